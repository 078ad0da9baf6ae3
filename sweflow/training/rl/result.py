"""What an RL run produced, whichever backend trained: the result record published beside the
model (``sweflow_training.json``), its per-step records, and the curves drawn from them.

Every backend returns the same :class:`RLResult`, so the CLI, the pipeline's rl stage and the
``infer`` stage read any of them alike. A step's figures are a :class:`RLStepRecord`; a figure a
backend does not measure is None (verl's trainer, for one, logs no per-episode resolve rate).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sweflow.training.output import RECORD


@dataclass
class RLStepRecord:
    """The figures of one policy update (written to metrics.jsonl and TensorBoard)."""

    step: int
    episodes: int | None = 0
    infra_failures: int | None = 0
    refused: int | None = 0  # scored episodes whose patch the tamper guard refused
    filtered: int | None = 0  # scored episodes masked out of the loss by compact filtering
    off_policy: int | None = 0  # episodes trained by a newer policy than the one that sampled them
    policy_version: int | None = None  # updates the policy that sampled the episodes had had
    zero_spread_groups: float | None = 0.0  # share of groups whose rewards were all equal
    redrawn_groups: int | None = 0  # groups drawn again by dynamic sampling (no outcome differed)
    masked_groups: int | None = 0  # groups whose outcomes never differed: masked out of the loss
    mean_reward: float | None = None
    resolve_rate: float | None = 0.0
    valid_action_rate: float | None = 0.0
    episode_turns: float | None = 0.0
    generated_tokens: float | None = 0.0
    tokens: int | None = 0  # tokens generated in the rollout, all its episodes
    generation_s: float = 0.0
    env_s: float | None = 0.0
    env_s_per_rollout: float | None = 0.0  # sandbox, tools and grading of one episode (overlapped)
    weight_sync_s: float | None = 0.0  # writing the policy's weights and reloading the server's
    wait_s: float | None = 0.0  # the trainer waiting for the step's episodes
    update_s: float = 0.0
    step_s: float = 0.0
    loss: float | None = None
    extra: dict[str, float] = field(default_factory=dict)


@dataclass
class RLResult:
    model: str
    base_model: str
    backend: str
    inputs_digest: str
    tasks: int
    steps: int = 0
    records: list[dict] = field(default_factory=list)
    infra_failures: int | None = 0  # None: the backend does not count them
    train_seconds: float = 0.0
    curves: str | None = None
    tensorboard: str = ""
    validation: list[dict] = field(default_factory=list)  # rl.validation's measurements

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def quarter_rewards(self) -> tuple[float | None, float | None]:
        """Mean reward over the first and the last quarter of the steps."""
        rewards = [r["mean_reward"] for r in self.records if r["mean_reward"] is not None]
        if not rewards:
            return None, None
        q = max(1, len(rewards) // 4)
        return sum(rewards[:q]) / q, sum(rewards[-q:]) / q


def published(out: Path, inputs: str) -> RLResult | None:
    """The result recorded in ``out`` when it was trained from the same inputs, else None."""
    try:
        record = json.loads((out / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return RLResult(**record) if record.get("inputs_digest") == inputs else None


def read_records(*paths: Path) -> list[dict]:
    """The per-step records of JSON-lines files read in order, a step run again after a resume
    counted once (its last run); validation rows (sweflow.training.rl.validation) left out."""
    by_step: dict[int, dict] = {}
    for path in paths:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            if line.strip().endswith("}"):
                record = json.loads(line)
                if "kind" not in record:
                    by_step[record["step"]] = record
    return [by_step[step] for step in sorted(by_step)]


def plot_curves(
    records: list[dict], path: Path, validation: list[dict] | None = None
) -> Path | None:
    """rl.png: reward and resolve rate (and the validation's pass@k), valid actions, episode
    length, the time split (a figure the backend did not measure is left out)."""
    if not records and not validation:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(key: str) -> list[float]:
        return [float("nan") if r.get(key) is None else r[key] for r in records]

    steps = [r["step"] for r in records]
    fig, axes = plt.subplots(2, 2, figsize=(10, 6), dpi=110)
    axes[0][0].plot(steps, series("mean_reward"), "o-", label="mean reward")
    axes[0][0].plot(steps, series("resolve_rate"), "s--", label="resolve rate")
    for k in sorted({k for row in validation or [] for k in row["pass_at"]}, key=int):
        points = [
            (row["step"], row["pass_at"][k]) for row in validation or [] if k in row["pass_at"]
        ]
        axes[0][0].plot(*zip(*points, strict=True), "D:", label=f"validation pass@{k}")
    axes[0][1].plot(steps, series("valid_action_rate"), "o-", color="tab:green")
    axes[1][0].plot(steps, series("episode_turns"), "o-", color="tab:purple")
    bottom = [0.0] * len(records)
    for key, color in (
        ("generation_s", "tab:blue"),
        ("env_s", "tab:orange"),
        ("weight_sync_s", "tab:gray"),
        ("update_s", "tab:red"),
    ):
        values = [r.get(key) or 0.0 for r in records]
        axes[1][1].bar(steps, values, bottom=bottom, color=color, label=key[:-2])
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    titles = ("reward", "valid-action rate", "turns per episode", "seconds per step")
    for ax, title in zip(axes.flat, titles, strict=True):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    axes[1][1].legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
