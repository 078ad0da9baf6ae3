"""``sweflow bench learn``'s plan: how much of everything a run does, one YAML file."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field

from sweflow.agent.config import TeacherEdits
from sweflow.bench import DATA
from sweflow.configfile import ConfigModel, read_yaml_mapping, validate_model
from sweflow.errors import ConfigError


class LearnPlan(ConfigModel):
    """How much of everything a run does: a YAML file (sweflow/data/bench/learn.yaml, and
    learn-quick.yaml, which keeps every step, smaller), so another plan is a file, not code."""

    model_config = ConfigDict(frozen=True)

    train_tasks: int | None = Field(ge=1, description="train tasks the teacher runs (null: all)")
    heldout_tasks: int | None = Field(ge=1)
    sft_epochs: int = Field(ge=1)
    # a sample of sequences an epoch (parts of conversations)
    sft_steps_per_epoch: int | None = Field(ge=1)
    candidates: int = Field(ge=1, description="train tasks tried for the RL check")
    candidate_samples: int = Field(ge=1, description="samples per candidate at temperature 1")
    rl_tasks: int = Field(ge=1, description="tasks the RL check trains on")
    rl_steps: int = Field(ge=1)
    overfit_samples: int = Field(ge=1, description="samples per RL task before and after")
    # agent steps per run; the teacher keeps routes that fit in them
    max_steps: int = Field(12, ge=1)
    unguarded: bool = True  # run the SFT model once more without the agent's repeat guard
    max_tokens: int = Field(768, ge=1)  # per reply: the teacher's longest (a reproduction script)
    learning_rate: float = Field(1e-4, gt=0)  # full fine-tune of a 135M model, a few hundred rows
    # whole conversations that fit in this many, every epoch
    sft_sequences: int | None = Field(None, ge=1)
    # GRPO's step size: at 1e-5 a few steps barely move the weights next to SFT's hundred-odd
    # steps of 1e-4, nor the resolve rate (benchmarks/results/learn.md)
    rl_learning_rate: float = Field(5e-5, gt=0)
    # DAPO's dynamic sampling: a group of 4 episodes with no success is drawn again, up to 3 more
    # times, and masked if none differs; without it every update of an all-failure group follows
    # the shaping alone, toward a first action that never resolves (benchmarks/results/learn.md)
    rl_dynamic_rounds: int = Field(3, ge=0)
    # the test split (a tasks file, relative to where the bench runs): every model is run on it
    # once, reported apart from the dev split (the dataset's held-out projects); null: none
    test_dataset: Path | None = None
    # samples per task at temperature 1 for pass@k of resolving and of the right hunk, per model
    # and split (0: greedy runs only)
    pass_k: int = Field(0, ge=0)
    # the order of the train tasks, which the teacher's trajectories keep and SFT takes them in
    # while they fit sft_sequences: each project in turn (the committed figures' order), or each
    # bug operator in turn, its tasks across projects (every operator among the first tasks)
    sft_order: Literal["projects", "operators"] = "projects"
    # tokens per SFT window: a trajectory longer than this is cut into windows (the committed
    # figures' 2,048), or, at the agent's context (8,192), each one whole as the agent reads it
    sft_max_seq_len: int = Field(2048, ge=512)
    # the editor command of the teacher's edits, which SFT teaches: str_replace quotes the old
    # text verbatim, replace_lines names it by the line numbers a view showed
    teacher_edits: TeacherEdits = "str_replace"


def load_plan(path: Path) -> LearnPlan:
    """The plan of the YAML file ``path``; a ConfigError names the file and the field."""
    data = read_yaml_mapping(path, "learn plan", ConfigError)
    return validate_model(LearnPlan, data, f"learn plan {path}", ConfigError)


# The plan's fields that only the RL check and the samples for pass@k read: a run that differs
# from an earlier one only in these starts from that run's teacher, SFT and held-out stages
# (their folders copied)
RL_ONLY = (
    "pass_k",
    "candidates",
    "candidate_samples",
    "rl_tasks",
    "rl_steps",
    "overfit_samples",
    "rl_learning_rate",
    "rl_dynamic_rounds",
)
BEFORE_RL = ("gold", "sft", "base", "gold-dev", "teacher-forced")


FULL = DATA / "bench" / "learn.yaml"  # the plans, shipped: why each figure, in its comments
QUICK = DATA / "bench" / "learn-quick.yaml"
