"""The model endpoint of the agent stages: a given URL, or a vLLM server started on first use.

The model served is the config's ``model.source``, or a folder a stage names (the newest
trained model of the run, for inference).

Starting vLLM on CPU takes minutes, so one server serves every stage of a pipeline run that
needs it (collect, then infer): :class:`ModelServers` holds one lazily started server per
model (sweflow.serving.ServedOnDemand), started when a stage first asks and stopped, by PID,
when the run ends. A run whose agent stages are all cached starts nothing.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from sweflow.agent.config import ModelConfig, SamplingConfig, ToolMode
from sweflow.pipeline.sections import AgentSection, ModelSection
from sweflow.ports import free_port
from sweflow.serving import ServeConfig, ServedOnDemand, resolve_model, tool_parser_for


class ModelServers:
    """Endpoints by model, each server started once per process and stopped by :meth:`close`."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._servers: dict[str, ServedOnDemand] = {}
        self._lock = threading.Lock()

    def endpoint(
        self, model: ModelSection, agent: AgentSection, run_dir: Path, folder: Path | None = None
    ) -> tuple[ModelConfig, ToolMode]:
        """(the client config, the tool mode) of this model section; ``folder`` serves a model
        folder (a trained one) in place of the section's ``source``."""
        sampling = model.model_dump(include=set(SamplingConfig.model_fields))
        if model.url is not None and folder is None:
            url, key = model.url, model.api_key
            config = ModelConfig(base_url=url, model=model.name, api_key=key, **sampling)
        else:
            served = self._server(model, run_dir, folder).get()
            config = ModelConfig(base_url=served.base_url, model=served.name, **sampling)
        return config, self.tool_mode(model, agent, run_dir, folder)

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

    def _server(self, model: ModelSection, run_dir: Path, folder: Path | None) -> ServedOnDemand:
        """The one server of this model (and folder), made (not started) on the first ask."""

        def config() -> ServeConfig:
            return ServeConfig(
                model=folder or model_folder(model, run_dir),
                served_name=model.name,
                port=free_port(),
                max_model_len=model.max_model_len,
                ready_timeout_s=model.startup_timeout_s,
                extra_args=model.serve_args(),
            )

        key = f"{model.model_dump_json()}|{folder}"
        with self._lock:
            if key not in self._servers:
                server = ServedOnDemand(config, run_dir / "logs" / "vllm.log")
                self._servers[key] = self._stack.enter_context(server)
            return self._servers[key]

    def close(self) -> None:
        with self._lock:
            self._servers.clear()
            self._stack.close()


def model_folder(model: ModelSection, run_dir: Path) -> Path:
    """The Hugging Face folder of the section's ``source`` (bundled models made in the run)."""
    return resolve_model(model.source, cache=run_dir / "models")
