"""The model endpoint of the agent stages: a given URL, or a vLLM server started on first use.

Starting vLLM on CPU takes minutes, so one server serves every stage of a pipeline run that
needs it (collect, then infer): :class:`ModelServers` starts it when a stage first asks and
stops it, by PID, when the run ends. A run whose agent stages are all cached starts nothing.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

from sweflow.agent.config import ModelConfig, SamplingConfig
from sweflow.pipeline.config import PipelineConfigError
from sweflow.pipeline.sections import AgentSection, ModelSection
from sweflow.serving import ServeConfig, prepare_model, tool_parser_for, vllm_server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ModelServers:
    """Endpoints by model section, started once per process and stopped by :meth:`close`."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._served: dict[str, tuple[ModelConfig, bool]] = {}
        self._lock = threading.Lock()

    def endpoint(
        self, model: ModelSection, agent: AgentSection, run_dir: Path
    ) -> tuple[ModelConfig, str]:
        """(the client config, the tool mode: "tools" or "text") for this model section."""
        key = model.model_dump_json()
        with self._lock:
            if key not in self._served:
                self._served[key] = self._start(model, run_dir)
        config, tools = self._served[key]
        mode = agent.tool_mode if agent.tool_mode != "auto" else ("tools" if tools else "text")
        return config, mode

    def _start(self, model: ModelSection, run_dir: Path) -> tuple[ModelConfig, bool]:
        sampling = model.model_dump(include=set(SamplingConfig.model_fields))
        if model.url is not None:
            url, key = model.url, model.api_key
            return ModelConfig(base_url=url, model=model.name, api_key=key, **sampling), True
        path = model.path
        if path is None:
            if model.prepare is None:
                raise PipelineConfigError("model: give url, path or prepare")
            path = prepare_model(model.prepare, run_dir / "models" / model.prepare)
        serve = ServeConfig(
            model=path,
            served_name=model.name,
            port=free_port(),
            max_model_len=model.max_model_len,
            ready_timeout_s=model.startup_timeout_s,
        )
        served = self._stack.enter_context(vllm_server(serve, run_dir / "logs" / "vllm.log"))
        config = ModelConfig(base_url=served.base_url, model=served.name, **sampling)
        return config, tool_parser_for(path) is not None

    def close(self) -> None:
        with self._lock:
            self._served.clear()
            self._stack.close()
