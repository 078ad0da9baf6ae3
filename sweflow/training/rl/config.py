"""How on-policy RL is configured: the ``rl`` section of the pipeline.

One rollout is one episode of the sweflow agent (the pipeline's agent section: same tools,
templates and limits as collect and infer) in a fresh sandbox, rewarded 1 when the grader finds
the task resolved (a patch the tamper guard refuses is not), else 0, minus the optional shaping:
``format_error_penalty`` times the share of replies that parse into no action, and
``empty_patch_penalty`` when the episode changed nothing. The empty-patch penalty is at least the
format penalty, so doing nothing never scores above trying: an episode that submits at once loses
``empty_patch_penalty``, one that edits and fails loses at most ``format_error_penalty``.
Values that cannot work together are refused here, naming the fields, before anything runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sweflow.registered import registered_name
from sweflow.training.rl.backends import DEFAULT_RL_BACKEND, RL_BACKENDS, check_rl_backend


def default_group_size() -> int:
    """Episodes per task when the config names none: 4 on a CPU, 8 with a GPU (groups of 2 mostly
    have no reward spread, so no signal; the kernel lists NVIDIA GPUs under /proc/driver)."""
    gpus = Path("/proc/driver/nvidia/gpus")
    return 8 if gpus.is_dir() and any(gpus.iterdir()) else 4


# The type of the field that names an RL backend: the registered names, in the form too.
RLBackendName = registered_name(check_rl_backend, lambda: {"enum": list(RL_BACKENDS)})


class RLConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: RLBackendName = Field(
        DEFAULT_RL_BACKEND,
        description="trl: TRL's GRPOTrainer (CPU or one GPU); verl: verl on GPUs with Ray",
    )
    algorithm: Literal["grpo", "rloo", "ppo"] = Field("grpo", description="verl: all; trl: grpo")
    model: str | None = Field(
        None, description="the policy to start from; None: the run's SFT model, else its base"
    )
    steps: int = Field(4, ge=1, description="policy updates")
    tasks_per_step: int = Field(2, ge=1, description="train tasks in each step's batch")
    rollouts_per_task: int = Field(
        default_factory=default_group_size,
        ge=1,
        description="episodes per task (GRPO's group); default 4 on a CPU, 8 with a GPU",
    )
    learning_rate: float = Field(1e-6, gt=0)
    kl_coef: float = Field(0.0, ge=0, description="0: no KL penalty (and no reference model)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of the rollouts")
    max_tokens_per_turn: int = Field(256, ge=8, description="tokens one reply may generate")
    max_prompt_length: int = Field(1024, ge=64, description="tokens of the first prompt")
    max_response_length: int = Field(
        3072, ge=64, description="tokens after the first prompt (replies and observations)"
    )
    max_observation_chars: int = Field(
        2000, gt=200, description="observations are cut to this (keeps sequences trainable)"
    )
    format_error_penalty: float = Field(
        0.0, ge=0, description="shaping: times the share of replies that parse into no action"
    )
    empty_patch_penalty: float = Field(
        0.0,
        ge=0,
        description="shaping: subtracted when an episode changes nothing; at least "
        "format_error_penalty, so that submitting at once never beats trying",
    )
    tamper_guard: bool = Field(
        True, description="a patch that passes the tests without fixing anything earns 0"
    )
    reward_timeout_s: float = Field(
        900.0, gt=0, description="a grading that runs longer is an infrastructure failure"
    )
    infra_retries: int = Field(1, ge=0, description="episodes re-run after an infra failure")
    checkpoint_every: int = Field(2, ge=1, description="steps between checkpoints")
    seed: int = 0
    # verl (GPUs)
    gpus_per_node: int = Field(1, ge=1)
    nodes: int = Field(1, ge=1)
    ray_address: str | None = Field(None, description="None: a local Ray")
    tensor_parallel_size: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _fits(self) -> RLConfig:
        if self.algorithm in ("grpo", "rloo") and self.rollouts_per_task < 2:
            raise ValueError(
                f"algorithm {self.algorithm} compares episodes of the same task: "
                f"rollouts_per_task must be at least 2 (got {self.rollouts_per_task})"
            )
        if self.backend == "trl" and self.algorithm != "grpo":
            raise ValueError(f"backend trl runs GRPO only; algorithm {self.algorithm} needs verl")
        if self.empty_patch_penalty < self.format_error_penalty:
            raise ValueError(
                f"empty_patch_penalty ({self.empty_patch_penalty}) is below format_error_penalty "
                f"({self.format_error_penalty}): an episode that submits at once would beat one "
                "that tries and makes invalid replies; raise empty_patch_penalty"
            )
        if self.max_tokens_per_turn > self.max_response_length:
            raise ValueError("max_tokens_per_turn is larger than max_response_length")
        if self.tensor_parallel_size > self.gpus_per_node:
            raise ValueError("tensor_parallel_size is larger than gpus_per_node")
        return self

    @property
    def episodes_per_step(self) -> int:
        return self.tasks_per_step * self.rollouts_per_task
