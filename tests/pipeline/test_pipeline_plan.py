"""The seeds' recipes as configs (configs/r2egym-agentsandbox.yaml and
configs/swesmith-minisandbox.yaml): each loads, and ``sweflow pipeline plan`` shows every
stage's command, checked against the tools' own schemas: torchtune's recipe YAML by torchtune's
config validation (every component found and its arguments bound to its signature), verl's
overrides by verl's schema (and by verl's own Hydra where .venv-verl exists), vLLM's options by
vLLM's own parser where the serving environment exists. Nothing is downloaded or started."""

from __future__ import annotations

import fcntl
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sweflow.cli import app
from sweflow.errors import ConfigError
from sweflow.pipeline.config import load_pipeline_config
from sweflow.pipeline.plan import StagePlan, plan
from sweflow.serving.vllm import serving_python, vllm_installed

REPO = Path(__file__).resolve().parents[2]
COOKBOOK = REPO / "configs" / "r2egym-agentsandbox.yaml"
MINISANDBOX = REPO / "configs" / "swesmith-minisandbox.yaml"
# Qwen2.5-Coder-3B-Instruct's config.json, the fields torchtune's builder and checkpointer read
CODER_3B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 2048,
    "intermediate_size": 11008,
    "num_hidden_layers": 36,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "torch_dtype": "bfloat16",
}


# what each RL backend's launch.sh starts
TRAINER_MODULE = {
    "verl": "-m verl.trainer.main_ppo",
    "skyrl": "-m sweflow.training.rl.skyrl_generator",
}


def by_stage(plans: list[StagePlan]) -> dict[str, StagePlan]:
    return {p.stage: p for p in plans}


def shown(stage: StagePlan, title: str) -> str:
    (text,) = [s.text for s in stage.shown if s.title.startswith(title)]
    return text


@pytest.mark.parametrize("recipe", [COOKBOOK, MINISANDBOX], ids=lambda p: p.stem)
def test_each_recipe_loads_and_plans_every_stage(recipe: Path) -> None:
    config = load_pipeline_config(recipe, root=REPO)
    plans = by_stage(plan(config))
    assert list(plans) == config.needed(config.stages)
    assert "collect_trajectories" not in plans  # neither collects: RL from the base, a public set
    backend = config.rl.backend
    launch = shown(plans["rl"], str(config.run_dir / "rl" / backend / "launch.sh"))
    assert TRAINER_MODULE[backend] in launch
    for override in getattr(config.rl, backend).overrides:  # the recipe's own, after sweflow's
        assert override in launch
    vllm = shown(plans["infer"], "vLLM")
    assert f"--tensor-parallel-size {config.model.tensor_parallel_size}" in vllm
    assert f"--model {config.run_dir / 'rl' / 'model'}" in vllm  # the trained model


def test_the_cookbook_is_verl_rloo_on_eight_gpus_validated_on_lite() -> None:
    config = load_pipeline_config(COOKBOOK, root=REPO)
    launch = shown(by_stage(plan(config))["rl"], str(config.run_dir / "rl" / "verl"))
    for setting in (
        "algorithm.adv_estimator=rloo",
        "data.train_batch_size=4",
        "actor_rollout_ref.rollout.n=4",
        "data.max_response_length=32768",
        "trainer.n_gpus_per_node=8",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
        "actor_rollout_ref.actor.clip_ratio_high=0.28",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum",
        "trainer.test_freq=10",
        "data.val_files=",
    ):
        assert setting in launch, setting
    assert config.sandbox.backend == "e2b" and config.tracking.mlflow is not None
    assert config.dataset.eval.path == Path("SWE-bench/SWE-bench_Lite:test")


def test_the_cookbook_checks_are_made_before_anything_starts() -> None:
    """The token budget per GPU must hold prompt + response; train_batch_size x rollout.n must
    divide by the GPUs: a recipe changed past either is refused as it loads, naming the keys."""
    with pytest.raises(ConfigError, match="max_token_len_per_gpu"):
        load_pipeline_config(COOKBOOK, ["rl.max_response_length=40000"], root=REPO)
    with pytest.raises(ConfigError, match="n_gpus_per_node|GPUs"):
        load_pipeline_config(COOKBOOK, ["rl.rollouts_per_task=3"], root=REPO)


def test_minisandbox_sft_recipe_passes_torchtunes_own_validation(tmp_path: Path) -> None:
    """With the model's config.json here (as after its download), the recipe YAML is shown and
    torchtune's validation finds every component and binds its arguments."""
    from omegaconf import OmegaConf
    from torchtune.config._validate import validate

    model = tmp_path / "Qwen2.5-Coder-3B-Instruct"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(CODER_3B))
    config = load_pipeline_config(MINISANDBOX, [f"sft.model={model}"], root=REPO)
    sft = by_stage(plan(config))["sft"]
    tune = shown(sft, "torchtune")
    assert "run --nproc_per_node 8 full_finetune_distributed --config" in tune
    recipe = yaml.safe_load(shown(sft, str(config.run_dir / "sft" / "recipe.yaml")))
    assert recipe["device"] == "cuda" and recipe["dtype"] == "bf16"
    assert recipe["epochs"] == 3 and recipe["model"]["max_seq_len"] == 32768
    assert recipe["checkpointer"]["model_type"] == "QWEN2"
    validate(OmegaConf.create(recipe))  # raises torchtune's ConfigError on a bad component

    recipe["optimizer"]["no_such_argument"] = 1  # the validation is not a formality
    with pytest.raises(Exception, match="no_such_argument"):
        validate(OmegaConf.create(recipe))


def test_sft_on_a_public_set_collects_nothing_but_collect_data_does() -> None:
    public = load_pipeline_config(MINISANDBOX, root=REPO)
    assert "collect_trajectories" not in public.needed(["sft"])
    mixed = load_pipeline_config(
        MINISANDBOX, ['sft.data=[{"source": "collect"}, {"source": "x/y:tool"}]'], root=REPO
    )
    assert "collect_trajectories" in mixed.needed(["sft"])
    demo = load_pipeline_config(REPO / "configs" / "demo.yaml", root=REPO)
    assert "collect_trajectories" in demo.needed(["sft"])  # sft.data unset: collect's


def test_the_vllm_command_parses_by_vllms_own_parser() -> None:
    python = serving_python()
    with open(REPO / ".setup.lock", "a") as lock:  # the side stacks' installs hold it
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pytest.skip("a side stack is being installed (scripts/test.sh starts it first)")
        if not vllm_installed(python):
            pytest.skip(f"vLLM is not installed for {python} (bash scripts/setup-serve.sh)")
    config = load_pipeline_config(MINISANDBOX, root=REPO)
    argv = shown(by_stage(plan(config))["infer"], "vLLM").split()
    options = argv[argv.index("--model") :]
    probe = (
        "import sys; from vllm.entrypoints.launchers.cli_args import make_arg_parser; "
        "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
        "a = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:]); "
        "print(a.tensor_parallel_size, a.gpu_memory_utilization)"
    )
    done = subprocess.run(
        [python, "-c", probe, *options], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["4", "0.9"]


@pytest.mark.parametrize("recipe", [COOKBOOK, MINISANDBOX], ids=lambda p: p.stem)
def test_the_plan_command_prints_each_stage(recipe: Path) -> None:
    result = CliRunner().invoke(app, ["pipeline", "plan", str(recipe)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    for stage in ("build_envs", "rl", "infer", "evaluate"):
        assert stage in result.output
    backend = load_pipeline_config(recipe, root=REPO).rl.backend
    printed = " ".join(result.output.split())  # rich wraps long lines where the width ends
    assert TRAINER_MODULE[backend] in printed and "vllm.entrypoints" in printed
