"""A validation set during RL: the resolve rate of the current policy on tasks it does not train on.

``rl.validation`` names the tasks (the pipeline's eval split, the train tasks, or instance ids),
how often they are measured (``every`` N steps, and the last step, as verl's ``test_freq`` does;
``before_train`` adds step 0) and how many episodes each task gets (``samples``). A measurement
is pass@1 and, with more than one sample, pass@k for k = 2, 4, ... up to the samples, with the
unbiased estimator of Chen et al. 2021 (HumanEval): per task of n scored episodes of which c
resolved, ``1 - C(n-c, k) / C(n, k)``, averaged over the tasks that have at least k. An episode
the machinery failed is not scored (as in training): it is counted, never a failure.

Every backend measures the same thing on the same tasks: trl by sweflow's own episodes after the
update (sweflow.training.rl.trl_backend), verl by its validation (``data.val_files``,
``trainer.test_freq``, ``trainer.val_before_train``, ``rollout.val_kwargs``) whose per-sample
dump (``trainer.validation_data_dir``) sweflow reads back with the same estimator
(:func:`dumped_validations`), SkyRL by its evaluation (``data.val_data``,
``trainer.eval_interval``), whose episodes sweflow's generator dumps in the same form. Each
measurement is a row of ``metrics.jsonl`` (``"kind": "validation"``), TensorBoard scalars
``val/pass@k`` and points on ``rl.png``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from sweflow.agent.runs.passk import pass_at_k
from sweflow.configfile import ConfigModel
from sweflow.instances import Instance

if TYPE_CHECKING:
    from sweflow.training.rl.config import RLConfig

KIND = "validation"  # the ``kind`` of a validation row of metrics.jsonl


class ValidationSettings(ConfigModel):
    """``rl.validation``: which tasks measure the policy during RL, how often, how many times."""

    tasks: Literal["eval", "train"] | list[str] = Field(
        "eval",
        description="eval: the pipeline's eval split; train: the train tasks; or a list of "
        "instance ids of the run's dataset",
    )
    limit: int | None = Field(None, ge=1, description="the first N of those tasks (None: all)")
    every: int = Field(1, ge=1, description="steps between measurements (and the last step)")
    samples: int = Field(1, ge=1, description="episodes per task: pass@k for k up to this")
    temperature: float = Field(
        0.0, ge=0, description="sampling temperature of the validation episodes; 0: greedy"
    )
    before_train: bool = Field(False, description="also measure the starting policy (step 0)")

    @model_validator(mode="after")
    def _fits(self) -> ValidationSettings:
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(
                f"samples {self.samples} with temperature 0: greedy episodes of a task are all "
                "alike, so pass@k says nothing more than pass@1; set temperature above 0"
            )
        if isinstance(self.tasks, list) and not self.tasks:
            raise ValueError("tasks is an empty list: name instance ids, eval or train")
        return self

    def due(self, step: int, last: int) -> bool:
        """Whether the policy after update ``step`` is measured (verl's rule for test_freq)."""
        return step == last or step % self.every == 0


def pick(
    settings: ValidationSettings,
    train: list[Instance],
    rows: list[Instance],
    eval_split: list[Instance] | None = None,
) -> list[Instance]:
    """The tasks ``settings.tasks`` names: the train tasks, the eval split (where there is one:
    the pipeline's), or instance ids of ``rows`` (the run's dataset), the first ``limit``."""
    if settings.tasks == "train":
        chosen = train
    elif settings.tasks == "eval":
        if eval_split is None:
            raise ValueError(
                "rl.validation.tasks eval: there is no eval split here; name instance ids "
                "(validation.tasks=[id, ...]) or train"
            )
        chosen = eval_split
    else:
        by_id = {row.instance_id: row for row in rows}
        unknown = [i for i in settings.tasks if i not in by_id]
        if unknown:
            raise ValueError(f"rl.validation.tasks: not in the dataset: {', '.join(unknown)}")
        chosen = [by_id[i] for i in settings.tasks]
    return chosen[: settings.limit]


def ks(samples: int) -> list[int]:
    """The k of pass@k reported for ``samples`` episodes a task: 1, the powers of 2 below it,
    and itself."""
    return sorted({1, samples, *(2**i for i in range(1, samples.bit_length()) if 2**i < samples)})


@dataclass
class ValidationRecord:
    """One measurement of the policy after update ``step`` (0: before training)."""

    step: int
    tasks: int  # tasks with at least one scored episode
    episodes: int
    infra_failures: int
    pass_at: dict[str, float] = field(default_factory=dict)  # "k" -> the mean over tasks
    resolve_rate: float | None = None  # pass@1: the share of scored episodes that resolved
    seconds: float | None = None  # None: the backend does not time it (verl)
    kind: str = KIND

    def row(self) -> dict[str, Any]:
        return asdict(self)


def measure(
    step: int, outcomes: Iterable[tuple[str, bool | None]], samples: int, seconds: float | None
) -> ValidationRecord:
    """The record of a measurement from its episodes' ``(instance id, resolved)``, resolved
    None for an infrastructure failure."""
    scored: dict[str, list[bool]] = defaultdict(list)
    episodes = failures = 0
    for instance_id, resolved in outcomes:
        episodes += 1
        if resolved is None:
            failures += 1
        else:
            scored[instance_id].append(resolved)
    pass_at = {}
    for k in ks(samples):
        values = [pass_at_k(len(r), sum(r), k) for r in scored.values() if len(r) >= k]
        if values:
            pass_at[str(k)] = round(sum(values) / len(values), 6)
    return ValidationRecord(
        step=step,
        tasks=len(scored),
        episodes=episodes,
        infra_failures=failures,
        pass_at=pass_at,
        resolve_rate=pass_at.get("1"),
        seconds=None if seconds is None else round(seconds, 3),
    )


def write(record: ValidationRecord, metrics: Path, writer: Any | None = None) -> None:
    """Append the record to ``metrics`` (metrics.jsonl) and, given a SummaryWriter, to
    TensorBoard."""
    with metrics.open("a") as fh:
        fh.write(json.dumps(record.row()) + "\n")
    if writer is not None:
        scalars(record.row(), writer)


def scalars(row: dict, writer: Any) -> None:
    """A validation row as TensorBoard scalars ``val/pass@k`` and ``val/infra_failures``."""
    for k, value in row["pass_at"].items():
        writer.add_scalar(f"val/pass@{k}", value, row["step"])
    writer.add_scalar("val/infra_failures", row["infra_failures"], row["step"])
    writer.flush()


def read(*paths: Path) -> list[dict]:
    """The validation rows of metrics files read in order, one per step (its last)."""
    by_step: dict[int, dict] = {}
    for path in paths:
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.strip().endswith("}") and (row := json.loads(line)).get("kind") == KIND:
                    by_step[row["step"]] = row
    return [by_step[step] for step in sorted(by_step)]


def dumped_validations(folder: Path, rl: RLConfig) -> list[dict]:
    """rl.validation's measurements from an outside trainer's dump of its validation episodes
    (verl's ``trainer.validation_data_dir``, SkyRL's through sweflow's generator: one
    ``<step>.jsonl`` per validation, a line per episode with its ``instance_id``, ``resolved``
    and ``infra_failure``), by sweflow's own estimator."""
    if rl.validation is None or not folder.is_dir():
        return []
    rows = []
    for path in sorted(
        folder.glob("*.jsonl"), key=lambda p: int(p.stem) if p.stem.isdigit() else -1
    ):
        if not path.stem.isdigit():
            continue
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        outcomes = [
            (line["instance_id"], None if line.get("infra_failure") else bool(line["resolved"]))
            for line in lines
        ]
        rows.append(measure(int(path.stem), outcomes, rl.validation.samples, None).row())
    return rows


def write_metrics(records: list[dict], validation: list[dict], work: Path) -> None:
    """sweflow's metrics.jsonl for an outside trainer's run (its step records and validation
    rows, as the trl backend writes them) and the validation's ``val/pass@k`` in TensorBoard."""
    with (work / "metrics.jsonl").open("w") as fh:
        for row in [*records, *validation]:
            fh.write(json.dumps(row) + "\n")
    if validation:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=str(work / "tensorboard" / "sweflow"))
        for row in validation:
            scalars(row, writer)
        writer.close()
