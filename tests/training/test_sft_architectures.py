"""An architecture is supported for SFT only when torchtune's model of it is transformers' model.

For each supported model_type a small model is made offline from a transformers config, every
weight random (norm scales too: a norm applied on the wrong side of RoPE hides behind scales of
1), and saved as a Hugging Face folder. The recipe's own checkpointer section and model component
load it into torchtune; its logits must equal transformers' in fp32, and a save through the same
checkpointer must give back the very tensors that were loaded (torchtune -> HF, same keys).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchtune")
transformers = pytest.importorskip("transformers")

from omegaconf import OmegaConf  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from torchtune import config as tune_config  # noqa: E402

from sweflow.training.sft.architectures import (  # noqa: E402
    CHECKPOINTERS,
    ArchitectureError,
    checkpointer,
    torchtune_arguments,
)
from sweflow.training.sft.torchtune_components import model as build_model  # noqa: E402

SIZES = dict(
    vocab_size=256,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
)
CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(**SIZES, tie_word_embeddings=True),
    "qwen2": lambda: transformers.Qwen2Config(**SIZES, tie_word_embeddings=False),
    # head_dim 32 with 4 heads in 64: Qwen3's own head size, not hidden_size / heads
    "qwen3": lambda: transformers.Qwen3Config(**SIZES, head_dim=32, tie_word_embeddings=True),
    "qwen3-untied": lambda: transformers.Qwen3Config(**SIZES, head_dim=16),
}


def _randomized(model) -> None:
    """Every weight random: matrices around 0, norm scales around 1 (each a different value)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            param.copy_(1 + 0.3 * noise if "norm" in name else 0.2 * noise)


def _hf_folder(kind: str, root: Path) -> tuple[Path, object]:
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[kind](), dtype=torch.float32)
    _randomized(model)
    folder = root / kind
    model.save_pretrained(folder)
    return folder, model.eval()


def _checkpointer(folder: Path, out: Path):
    section = {
        **checkpointer(json.loads((folder / "config.json").read_text())),
        "checkpoint_dir": str(folder),
        "checkpoint_files": sorted(p.name for p in folder.glob("*.safetensors")),
        "recipe_checkpoint": None,
        "output_dir": str(out),
    }
    return tune_config.instantiate(OmegaConf.create(section))


def test_every_supported_model_type_is_tested() -> None:
    assert set(CHECKPOINTERS) <= {kind.split("-")[0] for kind in CONFIGS}


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_torchtune_logits_equal_transformers(kind: str, tmp_path: Path) -> None:
    folder, hf = _hf_folder(kind, tmp_path)
    loaded = _checkpointer(folder, tmp_path / "out").load_checkpoint()["model"]
    tune = build_model(str(folder / "config.json"), max_seq_len=64)
    tune.load_state_dict(loaded, strict=True)
    tune.eval()
    tokens = torch.randint(
        0, SIZES["vocab_size"], (2, 40), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        expected = hf(tokens).logits
        got = tune(tokens)
    assert got.shape == expected.shape
    diff = (got - expected).abs().max().item()
    assert diff < 1e-4, f"{kind}: torchtune's logits differ from transformers' by {diff}"


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_checkpoint_round_trip_gives_back_the_weights(kind: str, tmp_path: Path) -> None:
    folder, hf = _hf_folder(kind, tmp_path)
    original = {}
    for path in folder.glob("*.safetensors"):
        original |= load_file(path)
    ckpt = _checkpointer(folder, tmp_path / "out")
    tune = build_model(str(folder / "config.json"), max_seq_len=64)
    tune.load_state_dict(ckpt.load_checkpoint()["model"], strict=True)
    ckpt.save_checkpoint({"model": tune.state_dict()}, epoch=0)
    saved = {}
    for path in (tmp_path / "out" / "epoch_0").glob("*.safetensors"):
        saved |= load_file(path)
    assert sorted(saved) == sorted(original)
    for key, tensor in original.items():
        assert torch.equal(saved[key], tensor), key
    # what RL and serving do with the published folder: transformers loads it as it was saved
    again = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "out" / "epoch_0", dtype=torch.float32
    )
    assert type(again).__name__ == type(hf).__name__


def test_a_norm_on_the_wrong_side_of_rope_would_be_caught(tmp_path: Path) -> None:
    """The logits check can fail: Qwen3's q/k norm moved after RoPE (torchtune's own
    MultiHeadAttention order) changes the logits with these random norm scales."""
    folder, hf = _hf_folder("qwen3", tmp_path)
    tune = build_model(str(folder / "config.json"), max_seq_len=64)
    tune.load_state_dict(_checkpointer(folder, tmp_path / "o").load_checkpoint()["model"])
    for layer in tune.layers:
        for proj in ("q_proj", "k_proj"):
            linear = getattr(layer.attn, proj)
            setattr(layer.attn, f"{proj[0]}_norm", linear.norm)  # after RoPE, as torchtune does
            linear.forward = torch.nn.Linear.forward.__get__(linear)
    tokens = torch.arange(40).unsqueeze(0)
    with torch.no_grad():
        diff = (tune(tokens) - hf(tokens).logits).abs().max().item()
    assert diff > 1e-2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "model_type 'gpt2'"),
        ({"model_type": "qwen2", "use_sliding_window": True}, "sliding-window"),
        ({"model_type": "llama", "head_dim": 8}, "head_dim 8"),
        ({"model_type": "llama", "attention_bias": True}, "attention_bias"),
        ({"model_type": "qwen3", "rope_scaling": {"rope_type": "yarn", "factor": 4}}, "'yarn'"),
        (
            {
                "model_type": "llama",
                "rope_scaling": {"rope_type": "llama3", "factor": 8, "high_freq_factor": 2},
            },
            "llama3 RoPE scaling other than",
        ),
    ],
)
def test_what_no_builder_expresses_is_refused_by_name(change: dict, message: str) -> None:
    config = {**CONFIGS["qwen3-untied"]().to_dict(), **change}  # head_dim 16: 64 / 4
    with pytest.raises(ArchitectureError, match=message):
        torchtune_arguments(config, 64, lora=False)


def test_qwen3_lora_builds_on_the_normed_projections(tmp_path: Path) -> None:
    """LoRA's adapters sit in the normed q/k projections; the base weights load as before."""
    folder, hf = _hf_folder("qwen3", tmp_path)
    lora = dict(
        lora_attn_modules=["q_proj", "k_proj", "v_proj", "output_proj"],
        apply_lora_to_mlp=True,
        apply_lora_to_output=False,
        lora_rank=4,
        lora_alpha=8.0,
    )
    tune = build_model(str(folder / "config.json"), max_seq_len=64, **lora)
    missing, unexpected = tune.load_state_dict(
        _checkpointer(folder, tmp_path / "o").load_checkpoint()["model"], strict=False
    )
    assert not unexpected and missing and all("lora_" in key for key in missing)
    tokens = torch.arange(30).unsqueeze(0)
    with torch.no_grad():  # lora_b starts at zero: the adapted model is the base model
        assert (tune(tokens) - hf(tokens).logits).abs().max().item() < 1e-4
