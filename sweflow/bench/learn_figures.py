"""The figures a ``bench learn`` run reports: SFT's losses, a model's rates on a split, and the
RL check's resolve rates before and after, per task and pooled."""

from __future__ import annotations

import itertools
import statistics

from sweflow.agent.trajectory import Trajectory
from sweflow.bench.learn_runs import resolve_rates
from sweflow.instances import Instance
from sweflow.training.sft.train import SFTResult


def sft_figures(sft: SFTResult, epochs: int) -> dict:
    """SFT's steps and losses: the first and last step's (one window each: noisy), and each
    epoch's mean (every epoch trains the same windows, so the means compare)."""
    return {
        "steps": sft.steps,
        "loss_first": sft.losses[0] if sft.losses else None,
        "loss_last": sft.final_loss,
        "loss_epochs": epoch_means(sft.losses, epochs),
        "loss_plot": sft.loss_plot,
    }


def epoch_means(losses: list[float], epochs: int) -> list[float]:
    """The mean of each of ``epochs`` consecutive equal shares of ``losses`` (none when there
    are fewer losses than epochs)."""
    if len(losses) < epochs:
        return []
    ends = [round(i * len(losses) / epochs) for i in range(epochs + 1)]
    return [round(statistics.fmean(losses[a:b]), 4) for a, b in itertools.pairwise(ends)]


def model_figures(runs: dict) -> dict:
    """A model's figures on a split: the scores' rates, ``resolve_rate`` (the name the learning
    issue gives resolved_rate), the rates per project and per bug operator (``breakdown``)
    and pass@k (of the greedy runs, k 1, where the plan samples nothing)."""
    rates = runs["rates"]
    extra = {"pass_at_k": runs["pass_at_k"]} if "pass_at_k" in runs else {}
    named = {"resolve_rate": rates["resolved_rate"], "breakdown": runs["breakdown"]}
    return {**rates, **named, **extra}


def rl_check_figures(
    chosen: list[Instance], before: list[Trajectory], after: list[Trajectory]
) -> dict:
    """The RL check per task (``tasks``: each one's before and after, each on its own fresh
    samples, and its gain) and pooled over them (the mean of the tasks' rates): what is
    claimed of RL is claimed task by task, so one task's jump cannot stand for all."""
    tasks = []
    for row in chosen:
        mine = row.instance_id
        figures = _sampled("before", [t for t in before if t.instance_id == mine])
        figures |= _sampled("after", [t for t in after if t.instance_id == mine])
        tasks.append({"instance_id": mine, **figures, "gain": _gain(figures)})
    pooled = _sampled("before", before) | _sampled("after", after)
    return {"tasks": tasks, **pooled, "gain": _gain(pooled)}


def _gain(figures: dict) -> float | None:
    before, after = figures.get("resolve_before"), figures.get("resolve_after")
    return None if before is None or after is None else round(after - before, 3)


def _sampled(when: str, runs: list[Trajectory]) -> dict:
    """``resolve_<when>`` (the mean of the tasks' resolve rates) and the counts behind it: 4 of
    16 against 0 of 16 reads as +0.25, and a second draw of 16 can move a rate that much."""
    if not runs:
        return {f"resolve_{when}": None}
    per_task = list(resolve_rates(runs).values())
    resolved = sum(run.resolved for run in runs)
    return {
        f"resolve_{when}": round(sum(per_task) / len(per_task), 3),
        f"resolved_{when}": f"{resolved} of {len(runs)}",
    }
