"""The torchtune command and config SFT generates, multi-node included, checked against the
tools' own parsers (torchrun's, which ``tune run`` is, and torchtune's config loader)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweflow.errors import ConfigError
from sweflow.training.sft import recipe
from sweflow.training.sft.config import SFTConfig


def _plan(tmp_path: Path, device: str = "cuda") -> recipe.RecipePlan:
    model = tmp_path / "base"
    model.mkdir()
    config = {
        "model_type": "qwen3",
        "num_attention_heads": 4,
        "hidden_size": 64,
        "head_dim": 32,
        "num_key_value_heads": 2,
        "vocab_size": 256,
        "num_hidden_layers": 2,
        "intermediate_size": 96,
        "tie_word_embeddings": True,
    }
    (model / "config.json").write_text(json.dumps(config))
    (model / "model.safetensors").write_bytes(b"")
    return recipe.RecipePlan(model, tmp_path / "train.jsonl", 8, tmp_path / "work", device, "bf16")


def test_a_multi_node_run_is_torchruns_command_on_every_node(tmp_path: Path) -> None:
    from torch.distributed.run import get_args_parser

    config = SFTConfig(gpus=8, nnodes=2, rdzv_endpoint="10.0.0.1:29500", device="cuda")
    argv = recipe.command(config, tmp_path / "recipe.yaml")
    run = argv.index("run")
    assert argv[run + 1 : run + 9] == [
        "--nproc_per_node",
        "8",
        "--nnodes",
        "2",
        "--rdzv_backend",
        "c10d",
        "--rdzv_endpoint",
        "10.0.0.1:29500",
    ]
    parsed = get_args_parser().parse_args(argv[run + 1 :])  # what `tune run` hands torchrun
    assert (parsed.nnodes, parsed.nproc_per_node, parsed.rdzv_endpoint) == (
        "2",
        "8",
        "10.0.0.1:29500",
    )
    assert parsed.training_script == "full_finetune_distributed"
    assert parsed.training_script_args == ["--config", str(tmp_path / "recipe.yaml")]


def test_the_distributed_config_loads_in_torchtune(tmp_path: Path) -> None:
    """The generated recipe.yaml is a torchtune config: it loads, and names Qwen3's builder and
    checkpointer by components torchtune can import."""
    from omegaconf import OmegaConf
    from torchtune.config._utils import _get_component_from_path

    config = SFTConfig(gpus=4, nnodes=2, rdzv_endpoint="node0:29500", method="lora")
    plan = _plan(tmp_path)
    plan.work_dir.mkdir()
    path = recipe.prepare_checkpoints(config, plan)
    text = path.read_text()
    assert text.startswith("# lora_finetune_distributed: re-run by hand with `")
    assert "--nnodes 2 --rdzv_backend c10d --rdzv_endpoint node0:29500" in text.splitlines()[0]
    loaded = OmegaConf.load(path)
    assert loaded.checkpointer._component_ == "sweflow.training.sft.qwen3.Qwen3Checkpointer"
    for section in ("model", "tokenizer", "checkpointer", "dataset", "optimizer", "loss"):
        assert callable(_get_component_from_path(loaded[section]._component_)), section


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"nnodes": 2}, "nnodes > 1 needs rdzv_endpoint"),
        ({"nnodes": 2, "rdzv_endpoint": "node0"}, "is not host:port"),
        ({"gpus": 2, "device": "cpu"}, "'Logging memory stats is not supported on CPU devices'"),
    ],
)
def test_a_multi_node_setting_without_its_rendezvous_is_refused(fields: dict, message: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=message):
        SFTConfig(**fields)
