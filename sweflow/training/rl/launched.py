"""What the backends that launch an outside trainer (verl, SkyRL) do alike around its process:
launch it from an RL run's inputs while the tracking run lets the trainer's own loggers report
to it, and publish the common result record from the steps and validations read back."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from sweflow.training.output import RECORD
from sweflow.training.rl.backend import RLRun
from sweflow.training.rl.result import RLResult, plot_curves
from sweflow.training.rl.validation import write_metrics

Prepare = Callable[..., list[str]]  # the backend's prepare(tasks, policy, work, rl, **where)
Launch = Callable[[list[str], dict[str, str]], Path]  # (command, the tracking env) -> output


def launch_run(run: RLRun, prepare: Prepare, launch: Launch) -> tuple[Path, float]:
    """The trainer's inputs written and composed by ``prepare``, then ``launch`` run with the
    tracking run's environment and the W&B run let go (two writers would interleave it): what
    ``launch`` returns and its seconds."""
    tracked = run.tracking.env() if run.tracking else {}
    command = prepare(
        run.tasks,
        run.policy,
        run.work,
        run.rl,
        store=run.store,
        specs=run.specs,
        agent=run.env.agent,
        backend=run.backend,
        env=tracked,
        tracking=run.tracking,
        val_tasks=run.val_tasks,
    )
    began = time.monotonic()
    with run.tracking.detached() if run.tracking else contextlib.nullcontext():
        output = launch(command, tracked)
    return output, round(time.monotonic() - began, 1)


def publish_result(
    run: RLRun,
    backend: str,
    records: list[dict],
    validation: list[dict],
    seconds: float,
    infra_failures: int | None,
) -> RLResult:
    """sweflow's metrics.jsonl and rl.png for the run, and the RLResult beside the published
    model in ``run.out``."""
    write_metrics(records, validation, run.work)
    plot = plot_curves(records, run.work / "rl.png", validation)
    result = RLResult(
        model=str(run.out),
        base_model=run.base_model,
        backend=backend,
        inputs_digest=run.inputs,
        tasks=len(run.tasks),
        steps=run.rl.steps,
        records=records,
        infra_failures=infra_failures,
        train_seconds=seconds,
        curves=str(plot) if plot else None,
        tensorboard=str(run.work / "tensorboard"),
        validation=validation,
    )
    (run.out / RECORD).write_text(json.dumps(result.to_dict(), indent=1))
    return result
