"""The model endpoint of the agent stages: a given URL, or a vLLM server started on first use.

The model served is the config's ``model.source``, or a folder a stage names (the newest
trained model of the run, for inference).

Starting vLLM on CPU takes minutes, so one server serves every stage of a pipeline run that
needs it (collect, then infer): :class:`ModelServers` starts it when a stage first asks and
stops it, by PID, when the run ends. A run whose agent stages are all cached starts nothing.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from sweflow.agent.config import ModelConfig, SamplingConfig, ToolMode
from sweflow.pipeline.sections import AgentSection, ModelSection
from sweflow.ports import free_port
from sweflow.serving import ServeConfig, resolve_model, tool_parser_for, vllm_server


class ModelServers:
    """Endpoints by model, started once per process and stopped by :meth:`close`."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._served: dict[str, ModelConfig] = {}
        self._lock = threading.Lock()

    def endpoint(
        self, model: ModelSection, agent: AgentSection, run_dir: Path, folder: Path | None = None
    ) -> tuple[ModelConfig, ToolMode]:
        """(the client config, the tool mode) of this model section; ``folder`` serves a model
        folder (a trained one) in place of the section's ``source``."""
        key = f"{model.model_dump_json()}|{folder}"
        with self._lock:
            if key not in self._served:
                self._served[key] = self._start(model, run_dir, folder)
        return self._served[key], self.tool_mode(model, agent, run_dir, folder)

    @staticmethod
    def tool_mode(
        model: ModelSection, agent: AgentSection, run_dir: Path, folder: Path | None = None
    ) -> ToolMode:
        """The agent's tool mode: as configured, else tool calls when the served model's chat
        template takes tools (an endpoint given by URL is assumed to)."""
        if agent.tool_mode != "auto":
            return agent.tool_mode
        if model.url is not None and folder is None:
            return "tools"
        path = folder or model_folder(model, run_dir)
        return "tools" if tool_parser_for(path) else "text"

    def _start(self, model: ModelSection, run_dir: Path, folder: Path | None) -> ModelConfig:
        sampling = model.model_dump(include=set(SamplingConfig.model_fields))
        if model.url is not None and folder is None:
            url, key = model.url, model.api_key
            return ModelConfig(base_url=url, model=model.name, api_key=key, **sampling)
        serve = ServeConfig(
            model=folder or model_folder(model, run_dir),
            served_name=model.name,
            port=free_port(),
            max_model_len=model.max_model_len,
            ready_timeout_s=model.startup_timeout_s,
        )
        served = self._stack.enter_context(vllm_server(serve, run_dir / "logs" / "vllm.log"))
        return ModelConfig(base_url=served.base_url, model=served.name, **sampling)

    def close(self) -> None:
        with self._lock:
            self._served.clear()
            self._stack.close()


def model_folder(model: ModelSection, run_dir: Path) -> Path:
    """The Hugging Face folder of the section's ``source`` (bundled models made in the run)."""
    return resolve_model(model.source, cache=run_dir / "models")
