"""Which Hugging Face architectures torchtune 0.6.1 can build here, and with what arguments.

torchtune ships builders for named sizes (Llama 3.2 1B, Qwen2.5 0.5B...), not for any folder, so
the architecture's own builder is called with the numbers of the folder's ``config.json``:
Llama-architecture models (SmolLM2, Llama 3.x, TinyLlama...) through the Llama 3.2 builder, with
its RoPE scaling off unless the config asks for Llama 3's, and Qwen2/Qwen2.5 through Qwen2's. A
folder of any other architecture is refused before training starts, naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sweflow.errors import ConfigError

# model_type in config.json -> torchtune's checkpointer ModelType (it converts the weights)
CHECKPOINT_TYPES = {"llama": "LLAMA3_2", "qwen2": "QWEN2"}


class ArchitectureError(ConfigError):
    """A model torchtune cannot build here; the message names its architecture."""


def checkpoint_model_type(config: dict[str, Any]) -> str:
    """The checkpointer's ModelType for a HF config, or an ArchitectureError naming it."""
    kind = config.get("model_type")
    if kind not in CHECKPOINT_TYPES:
        names = ", ".join(config.get("architectures") or []) or "unknown"
        raise ArchitectureError(
            f"torchtune cannot build model_type {kind!r} ({names}) here; supported: "
            "llama (Llama-architecture models such as SmolLM2 and Llama 3.x) and qwen2 "
            "(Qwen2, Qwen2.5)"
        )
    heads, dim = config["num_attention_heads"], config["hidden_size"]
    if config.get("head_dim") not in (None, dim // heads):
        raise ArchitectureError(
            f"{kind}: head_dim {config['head_dim']} is not hidden_size / num_attention_heads "
            f"({dim // heads}), which torchtune's {kind} builder assumes"
        )
    _rope(config)  # refuses a scaling the builder cannot do
    return CHECKPOINT_TYPES[kind]


def _rope(config: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """(rope base, scaling) from either config layout (transformers 4 or 5)."""
    params = config.get("rope_parameters") or {}
    base = params.get("rope_theta", config.get("rope_theta", 10_000.0))
    scaling = config.get("rope_scaling") or {}
    if params.get("rope_type", "default") != "default":
        scaling = params
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    if kind not in ("default", "llama3"):
        raise ArchitectureError(f"RoPE scaling {kind!r} has no torchtune builder here")
    return float(base), scaling


def torchtune_arguments(
    config: dict[str, Any], max_seq_len: int, lora: bool
) -> tuple[Callable[..., Any], dict[str, Any]]:
    """(builder, keyword arguments) that build the model of a HF config in torchtune."""
    model_type = checkpoint_model_type(config)
    base, scaling = _rope(config)
    common = {
        "vocab_size": config["vocab_size"],
        "num_layers": config["num_hidden_layers"],
        "num_heads": config["num_attention_heads"],
        "num_kv_heads": config.get("num_key_value_heads", config["num_attention_heads"]),
        "embed_dim": config["hidden_size"],
        "intermediate_dim": config["intermediate_size"],
        "max_seq_len": max_seq_len,
        "norm_eps": config.get("rms_norm_eps", 1e-5),
        "tie_word_embeddings": config.get("tie_word_embeddings", False),
    }
    if model_type == "LLAMA3_2":
        from torchtune.models.llama3_2 import llama3_2, lora_llama3_2

        scale = int(scaling.get("factor", 1))  # Llama 3's scaling, or none (1) by default
        kwargs = {**common, "rope_base": int(base), "scale_factor": scale}
        return (lora_llama3_2 if lora else llama3_2), kwargs
    from torchtune.models.qwen2 import lora_qwen2, qwen2

    return (lora_qwen2 if lora else qwen2), {**common, "rope_base": base}
