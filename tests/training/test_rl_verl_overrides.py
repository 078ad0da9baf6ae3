"""rl.verl.overrides: any verl key in Hydra syntax, checked against verl 0.9.1's own schema
(sweflow/data/verl-0.9.1-ppo-trainer.json, read out of verl by verl_config;
tests/training/test_rl_verl.py rewrites it from the installed verl and compares) before anything
starts, one line naming it.

The AgentSandbox cookbook's whole override list (rLLM + verl, Qwen3-8B on 8 GPUs) and
SWE-MiniSandbox's RL settings (SkyRL's keys, as verl names them) are written as an ``rl``
section here and pass; the cookbook's two warnings are checked up front.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.verl_backend import overrides
from sweflow.training.rl.verl_schema import OWNED, parse, schema

# lirong-lirong/ags-cookbook examples/swe-bench-rl/rl-training/train.py: its verl keys (rllm.*
# are rLLM's agent settings: sweflow's agent and sandbox sections hold those). Keys sweflow
# sets from the rl section are written as rl fields below; the rest are overrides as written.
COOKBOOK_RL = {
    "backend": "verl",
    "algorithm": "rloo",  # algorithm.adv_estimator=rloo
    "scale_advantages": "none",  # RLOO's advantage is never divided by the spread
    # actor.loss_agg_mode=seq-mean-token-sum, actor.clip_ratio_high=0.28, kl_loss_type=low_var_kl
    "objective": {"loss_aggregation": "seq-mean-token-sum", "epsilon_high": 0.28},
    "model": "/models/Qwen3-8B",  # actor_rollout_ref.model.path
    "tasks_per_step": 4,  # data.train_batch_size=4
    "rollouts_per_task": 4,  # actor_rollout_ref.rollout.n=4
    "max_prompt_length": 4096,
    "max_response_length": 32768,
    "max_tokens_per_turn": 4096,
    "learning_rate": 1e-6,  # actor_rollout_ref.actor.optim.lr
    "temperature": 1.0,  # actor_rollout_ref.rollout.temperature
    "checkpoint_every": 10,  # trainer.save_freq
    "verl": {"gpus_per_node": 8, "nodes": 1, "tensor_parallel_size": 8},
    # trainer.test_freq=10, trainer.val_before_train=False, rollout.val_kwargs n=1 temperature=0
    "validation": {"tasks": "eval", "every": 10, "samples": 1, "temperature": 0.0},
}
COOKBOOK_OVERRIDES = [
    "algorithm.kl_ctrl.kl_coef=0.001",
    "data.val_batch_size=4",
    "data.filter_overlong_prompts=True",
    "data.filter_overlong_prompts_workers=32",
    "actor_rollout_ref.hybrid_engine=True",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",  # the cookbook's 8 is over verl's batch of 4
    "actor_rollout_ref.actor.use_dynamic_bsz=False",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=40960",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=1",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.enforce_eager=False",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.ref.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.entropy_coeff=0.0",
    "trainer.critic_warmup=0",
    "trainer.project_name=AgentRL-with-ags",
    "trainer.experiment_name=swe-agent-rl",
    "trainer.default_hdfs_dir=null",
    "trainer.total_epochs=2",
]
# lblankl/SWE-MiniSandbox SkyRL/skyrl-train/examples/swe_agent/run_swe_3B_sandbox.sh, SkyRL's
# keys as verl names them (GRPO, 8 samples, KL loss, 16 prompts a step, TP 2 on 8 GPUs)
MINISANDBOX_RL = {
    "backend": "verl",
    "algorithm": "grpo",
    "tasks_per_step": 16,  # trainer.train_batch_size=16
    "rollouts_per_task": 8,  # generator.n_samples_per_prompt=8
    "max_prompt_length": 16384,  # trainer.max_prompt_length
    "max_response_length": 4096,  # generator.sampling_params.max_generate_length
    "max_tokens_per_turn": 4096,
    "learning_rate": 1e-6,
    "kl_coef": 0.001,  # trainer.algorithm.use_kl_loss=true (SkyRL's default coefficient)
    "checkpoint_every": 30,  # trainer.ckpt_interval
    "verl": {"gpus_per_node": 8, "tensor_parallel_size": 2},
    "validation": {"tasks": "eval", "every": 1000, "before_train": True},  # eval_before_train
}
MINISANDBOX_OVERRIDES = [
    "actor_rollout_ref.actor.strategy=fsdp2",  # trainer.strategy=fsdp2
    "actor_rollout_ref.ref.strategy=fsdp2",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",  # policy.sequence_parallel_size
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",  # trainer.policy_mini_batch_size
    "actor_rollout_ref.actor.ppo_epochs=1",  # trainer.update_epochs_per_batch
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.8",
    "trainer.project_name=swerl2",
    "trainer.experiment_name=debug",
]


@pytest.mark.parametrize(
    ("rl", "extra"),
    [(COOKBOOK_RL, COOKBOOK_OVERRIDES), (MINISANDBOX_RL, MINISANDBOX_OVERRIDES)],
    ids=["ags-cookbook", "swe-minisandbox"],
)
def test_the_seeds_recipes_are_expressible(rl: dict, extra: list[str]) -> None:
    config = RLConfig(**{**rl, "verl": {**rl["verl"], "overrides": extra}})
    settings = overrides(config, Path("/m"), Path("t.parquet"), Path("l.yaml"), Path("w"))
    assert settings[-len(extra) :] == extra  # the user's come last: verl's Hydra applies them so
    given = dict(s.split("=", 1) for s in settings)
    estimator = {"rloo": "rloo", "grpo": "grpo"}[rl["algorithm"]]
    assert given["algorithm.adv_estimator"] == estimator
    assert given["data.train_batch_size"] == str(rl["tasks_per_step"])
    assert given["actor_rollout_ref.rollout.n"] == str(rl["rollouts_per_task"])
    assert given["trainer.n_gpus_per_node"] == "8"


def test_the_cookbooks_warnings_are_checked_up_front() -> None:
    cookbook = {**COOKBOOK_RL, "verl": {**COOKBOOK_RL["verl"], "overrides": COOKBOOK_OVERRIDES}}
    # its log-prob pass has dynamic batch sizes: without the 40960 token budget verl's default
    # (16384) cannot hold a 4096 + 32768 token sequence
    short = [o for o in COOKBOOK_OVERRIDES if "ppo_max_token_len_per_gpu" not in o]
    with pytest.raises(ValidationError) as refused:
        RLConfig(**{**cookbook, "verl": {**cookbook["verl"], "overrides": short}})
    message = _one(refused.value)
    assert "log_prob_max_token_len_per_gpu (16384)" in message
    assert "4096 + 32768 = 36864" in message
    # the budget is per GPU times the sequence-parallel size (verl's max_token_len)
    parallel = [*short, "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4"]
    parallel.remove("actor_rollout_ref.actor.ulysses_sequence_parallel_size=1")
    RLConfig(**{**cookbook, "verl": {**cookbook["verl"], "overrides": parallel}})
    # train_batch_size x rollout.n over the GPUs: 3 x 4 = 12 sequences do not split over 8
    with pytest.raises(ValidationError, match=r"\(3 x 4 = 12\) must divide by the GPUs"):
        RLConfig(**{**cookbook, "tasks_per_step": 3})


@pytest.mark.parametrize(
    ("override", "named"),
    [
        (
            "actor_rollout_ref.rollout.gpu_mem=0.5",
            "no key actor_rollout_ref.rollout.gpu_mem (did you mean "
            "actor_rollout_ref.rollout.gpu_memory_utilization?)",
        ),
        (
            "actor_rollout_ref.rollout.gpu_memory_utilization=high",
            "actor_rollout_ref.rollout.gpu_memory_utilization takes a number, not 'high'",
        ),
        ("trainer.total_epochs=2.5", "trainer.total_epochs takes an integer, not 2.5"),
        ("actor_rollout_ref.actor.use_dynamic_bsz=maybe", "takes true or false"),
        (
            "actor_rollout_ref.rollout.n=8",
            "actor_rollout_ref.rollout.n is set by rl.rollouts_per_task",
        ),
        ("trainer.logger=[console]", "trainer.logger is set by sweflow: its file logger"),
        ("data.val_files=x.parquet", "data.val_files is set by rl.validation"),
        (
            "+actor_rollout_ref.rollout.speed=9",
            "actor_rollout_ref.rollout is verl's verl.workers.config.rollout.RolloutConfig, "
            "which has no field speed",
        ),
        ("+trainer.nnodes_x=1", None),  # trainer is a plain section: a new key may be added
        ("+ray_kwargs.ray_init.num_cpus=4", "ray_kwargs.ray_init.num_cpus exists; set it with"),
        ("~trainer.nope", "verl has no key trainer.nope to delete"),
        ("trainer.logger", "expected trainer.logger=VALUE"),
        ("trainer.project_name=a,b", "a,b is a Hydra sweep"),
        ("critic.enable=null", None),
    ],
)
def test_an_override_is_checked_against_verls_schema(override: str, named: str | None) -> None:
    build = lambda: RLConfig(backend="verl", verl={"overrides": [override]})  # noqa: E731
    if named is None:
        build()
        return
    with pytest.raises(ValidationError) as refused:
        build()
    message = _one(refused.value)
    assert named in message and "\n" not in message
    assert override in message or override.partition("=")[0].lstrip("+~") in message


def test_overrides_are_checked_whatever_the_backend() -> None:
    """A pipeline config that switches to verl later must not carry a typo until then."""
    with pytest.raises(ValidationError, match="no key trainer.total_epoch "):
        RLConfig(backend="trl", verl={"overrides": ["trainer.total_epoch=2"]})


def test_owned_keys_and_values_hydra_reads() -> None:
    defaults = schema()["config"]
    for key in OWNED:  # every key sweflow owns is one of verl's (or one it adds: ray's address)
        node = defaults
        for part in key.split(".")[:-1]:
            node = node[part]
        assert key.rpartition(".")[2] in node or key.startswith("ray_kwargs"), key
    assert parse("a.b=1e-6").value == 1e-6 and parse("a.b=1_000").value == 1000
    assert parse("a.b=[console,file]").value == ["console", "file"]
    assert parse("a.b={x: 1}").value == {"x": 1}
    assert parse("a.b='1'").value == "1" and parse("a.b=null").value is None
    assert parse("a.b=${oc.select:c.d,1}").value == "${oc.select:c.d,1}"
    assert parse("++a.b=True").op == "++" and parse("~a.b").op == "~"


def _one(exc: ValidationError) -> str:
    """The one error a refused config gives, as the CLI prints it."""
    (error,) = exc.errors()
    return error["msg"].removeprefix("Value error, ")
