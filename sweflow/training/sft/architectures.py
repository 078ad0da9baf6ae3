"""Which Hugging Face architectures torchtune 0.6.1 can build here, and with what arguments.

torchtune ships builders for named sizes (Llama 3.2 1B, Qwen2.5 0.5B...), not for any folder, so
the architecture's builder is called with the numbers of the folder's ``config.json``:

- ``llama`` (SmolLM2, Llama 3.x, TinyLlama): torchtune's Llama 3.2 builder, its RoPE scaling off
  unless the config asks for Llama 3's; torchtune's HF checkpointer converts the weights (LLAMA3_2);
- ``qwen2`` (Qwen2, Qwen2.5): torchtune's Qwen2 builder and checkpointer (QWEN2);
- ``qwen3`` (Qwen3 dense): sweflow.training.sft.qwen3, built from torchtune's parts (torchtune has
  no Qwen3), and its Qwen3Checkpointer.

Each is supported because tests/training/test_sft_architectures.py builds a small random model of it
with transformers and finds torchtune's logits equal to transformers' and the weights unchanged
by a checkpoint round trip. A folder of any other architecture, or with a setting a builder
cannot express (a head_dim of its own for llama/qwen2, sliding-window attention, biases Llama's
builder lacks, another RoPE scaling), is refused before training starts, naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sweflow.errors import ConfigError

HF_CHECKPOINTER = "torchtune.training.FullModelHFCheckpointer"
QWEN3 = "sweflow.training.sft.qwen3"
# model_type in config.json -> the checkpointer section's component and ModelType
CHECKPOINTERS: dict[str, dict[str, str]] = {
    "llama": {"_component_": HF_CHECKPOINTER, "model_type": "LLAMA3_2"},
    "qwen2": {"_component_": HF_CHECKPOINTER, "model_type": "QWEN2"},
    "qwen3": {"_component_": f"{QWEN3}.Qwen3Checkpointer"},
}
SUPPORTED = "llama (SmolLM2, Llama 3.x), qwen2 (Qwen2, Qwen2.5) and qwen3 (Qwen3 dense)"
# torchtune 0.6.1's Llama3ScaledRoPE fixes these; a config with others would train another model
LLAMA3_ROPE = {
    "low_freq_factor": 1,
    "high_freq_factor": 4,
    "original_max_position_embeddings": 8192,
}


class ArchitectureError(ConfigError):
    """A model torchtune cannot build here; the message names its architecture."""


def checkpointer(config: dict[str, Any]) -> dict[str, str]:
    """The recipe's checkpointer component (and ModelType) for a HF config, or an
    ArchitectureError naming what cannot be built."""
    kind = config.get("model_type")
    if kind not in CHECKPOINTERS:
        names = ", ".join(config.get("architectures") or []) or "unknown"
        raise ArchitectureError(
            f"torchtune cannot build model_type {kind!r} ({names}) here; supported: {SUPPORTED}"
        )
    heads, dim = config["num_attention_heads"], config["hidden_size"]
    if kind != "qwen3" and config.get("head_dim") not in (None, dim // heads):
        raise ArchitectureError(
            f"{kind}: head_dim {config['head_dim']} is not hidden_size / num_attention_heads "
            f"({dim // heads}), which torchtune's {kind} builder assumes"
        )
    if config.get("use_sliding_window"):
        raise ArchitectureError(f"{kind}: sliding-window attention has no torchtune builder here")
    if kind == "llama" and (config.get("attention_bias") or config.get("mlp_bias")):
        raise ArchitectureError("llama: attention_bias/mlp_bias have no torchtune builder here")
    _rope(config)  # refuses a scaling the builder cannot do
    return dict(CHECKPOINTERS[kind])


def checkpoint_model_type(config: dict[str, Any]) -> str:
    """The ModelType torchtune's checkpointer converts a HF config's weights as."""
    return checkpointer(config).get("model_type", "QWEN2")


def _rope(config: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """(rope base, scaling) from either config layout (transformers 4 or 5)."""
    params = config.get("rope_parameters") or {}
    base = params.get("rope_theta", config.get("rope_theta", 10_000.0))
    scaling = config.get("rope_scaling") or {}
    if params.get("rope_type", "default") != "default":
        scaling = params
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    if kind not in ("default", "llama3") or (kind == "llama3" and config["model_type"] != "llama"):
        raise ArchitectureError(f"RoPE scaling {kind!r} has no torchtune builder here")
    if kind == "llama3" and any(scaling.get(k, v) != v for k, v in LLAMA3_ROPE.items()):
        raise ArchitectureError(
            f"llama3 RoPE scaling other than torchtune's {LLAMA3_ROPE} has no builder here"
        )
    return float(base), scaling


def torchtune_arguments(
    config: dict[str, Any], max_seq_len: int, lora: bool
) -> tuple[Callable[..., Any], dict[str, Any]]:
    """(builder, keyword arguments) that build the model of a HF config in torchtune."""
    checkpointer(config)
    kind = config["model_type"]
    base, scaling = _rope(config)
    common = {
        "vocab_size": config["vocab_size"],
        "num_layers": config["num_hidden_layers"],
        "num_heads": config["num_attention_heads"],
        "num_kv_heads": config.get("num_key_value_heads") or config["num_attention_heads"],
        "embed_dim": config["hidden_size"],
        "intermediate_dim": config["intermediate_size"],
        "max_seq_len": max_seq_len,
        "norm_eps": config.get("rms_norm_eps", 1e-5),
        "tie_word_embeddings": config.get("tie_word_embeddings", False),
    }
    if kind == "llama":
        from torchtune.models.llama3_2 import llama3_2, lora_llama3_2

        scale = int(scaling.get("factor", 1))  # Llama 3's scaling, or none (1) by default
        kwargs = {**common, "rope_base": int(base), "scale_factor": scale}
        return (lora_llama3_2 if lora else llama3_2), kwargs
    if kind == "qwen3":
        from sweflow.training.sft.qwen3 import qwen3

        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        extra = {"head_dim": head_dim, "attention_bias": bool(config.get("attention_bias"))}
        return qwen3, {**common, **extra, "rope_base": base}
    from torchtune.models.qwen2 import lora_qwen2, qwen2

    return (lora_qwen2 if lora else qwen2), {**common, "rope_base": base}
