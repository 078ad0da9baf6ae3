"""``report``: what the run did and what it learned, for the people who started it.

Environments built and valid, golden trajectories kept (and how imitable they were), the SFT loss
first -> last, the RL reward and valid-action rate first -> last, and on the held-out tasks the
base model beside the trained one: valid actions, right file (looked at a file the fix
changes), submitted, resolved (sweflow.agent.scores). The base model's runs on those tasks
cost a vLLM start and the runs themselves, so their figures are kept in
``report.baseline_cache`` under a key of the model's content, the tasks and the agent and
sampling settings, and measured again only when one of those changed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from sweflow.agent import jobs as agent_jobs
from sweflow.agent.scores import rates, score_run
from sweflow.agent.trajectory import load_runs
from sweflow.grading import Grader
from sweflow.harness.specs import load_specs
from sweflow.instances import Instance
from sweflow.pipeline.model_servers import model_folder
from sweflow.pipeline.stages.agents import newest_model, run_job, split_rows
from sweflow.pipeline.stages.common import StageContext, StageResult, json_digest
from sweflow.training.workdir import folder_digest

if TYPE_CHECKING:
    from sweflow.pipeline.config import PipelineConfig

HELDOUT_FIGURES = ("valid_action_rate", "right_file_rate", "submitted_rate", "resolved_rate")


def report(ctx: StageContext) -> StageResult:
    """The run's summary (Markdown for the Prefect artifact, text for the terminal, JSON)."""
    config, up = ctx.config, ctx.upstream
    rows = split_rows(ctx, "eval", config.infer.limit)
    trained = _heldout(config.run_dir / "infer", rows)
    graded = up.get("evaluate", {}).get("rows", [])
    if graded:  # infer does not grade; evaluate did
        trained["resolved"] = sum(bool(row["resolved"]) for row in graded)
        trained["resolved_rate"] = round(trained["resolved"] / max(trained["runs"], 1), 3)
    figures: dict = {"environments": _counts(up, "build_envs", "validate_envs"),
                     "golden": _counts(up, "collect_trajectories"),
                     "sft": _series(up, "sft", "loss"),
                     "rl_reward": _series(up, "rl", "mean_reward"),
                     "rl_valid_actions": _series(up, "rl", "valid_action_rate"),
                     "heldout": {"trained": trained}}  # fmt: skip
    if newest_model(up) is not None:
        figures["heldout"]["base"] = _baseline(ctx, rows)
    out = config.run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(figures, indent=1) + "\n")
    text = summary_text(figures)
    (out / "summary.txt").write_text(text)
    outputs = {"summary": str(out / "summary.json"), "text": str(out / "summary.txt")}
    table = [{"model": name, **{k: v.get(k) for k in HELDOUT_FIGURES}}
             for name, v in figures["heldout"].items()]  # fmt: skip
    return StageResult("report", json_digest(figures), outputs, {"heldout_tasks": len(rows)},
                       table, f"```\n{text}```")  # fmt: skip


def summary_text(figures: dict) -> str:
    """The summary as lines a person reads (the demo prints it at the end)."""
    env, gold = figures["environments"], figures["golden"]
    lines = [f"environments: {env.get('built', 0) + env.get('cached', 0)} built, "
             f"{env.get('valid', 0)} valid"]  # fmt: skip
    if gold:
        lines.append(f"golden trajectories: {gold.get('kept', 0)} kept of {gold.get('runs', 0)} "
                     f"runs ({gold.get('skipped', 0)} tasks declined by the teacher)")  # fmt: skip
    for name, key, form in (("SFT loss", "sft", "{:.3f}"), ("RL reward", "rl_reward", "{:+.3f}"),
                            ("RL valid actions", "rl_valid_actions", "{:.0%}")):  # fmt: skip
        if figures[key]:
            first, last = figures[key]
            lines.append(f"{name}: {form.format(first)} -> {form.format(last)}")
    heldout = figures["heldout"]
    names = [n for n in ("base", "trained") if n in heldout]
    lines += ["", f"held-out tasks ({heldout['trained']['runs']} runs)  " + "  ".join(
        f"{n:>8}" for n in names)]  # fmt: skip
    for key in HELDOUT_FIGURES:
        cells = "  ".join(f"{heldout[n].get(key, 0):>8.0%}" for n in names)
        lines.append(f"  {key.removesuffix('_rate').replace('_', ' '):<22}{cells}")
    return "\n".join(lines) + "\n"


def _counts(up: dict, *stages: str) -> dict:
    counts: dict = {}
    for stage in stages:
        counts.update(up.get(stage, {}).get("counts", {}))
    return counts


def _series(up: dict, stage: str, key: str) -> list | None:
    """(first, last) of a per-step figure of a stage's rows; None when it has none."""
    values = [row[key] for row in up.get(stage, {}).get("rows", []) if row.get(key) is not None]
    return [values[0], values[-1]] if values else None


def _heldout(out: Path, rows: list[Instance]) -> dict:
    """Run scores of the trajectories under ``out`` on ``rows``."""
    by_id = {row.instance_id: row for row in rows}
    runs = load_runs(out)
    scores = [score_run(t, by_id[t.instance_id]) for t in runs if t.instance_id in by_id]
    return rates(scores).as_dict()


def baseline_key(config: PipelineConfig, rows: list[Instance]) -> str:
    """What the base model's figures depend on: its weights, the tasks as the agent sees them
    (a rewritten problem statement is another task), the agent's and the sampling settings."""
    return json_digest([
        folder_digest(model_folder(config.model, config.run_dir)),
        sorted((r.model_dump(mode="json") for r in rows), key=lambda r: r["instance_id"]),
        config.agent.model_dump(mode="json"), config.model.model_dump(mode="json"),
    ])[:16]  # fmt: skip


def _baseline(ctx: StageContext, rows: list[Instance]) -> dict:
    """The base model's held-out figures: from the cache, or measured (graded) and cached."""
    config = ctx.config
    key = baseline_key(config, rows)
    cache = config.report.baseline_cache
    known = json.loads(cache.read_text()) if cache and cache.is_file() else {}
    if key in known:
        return known[key]
    out = config.run_dir / "baseline"
    model, mode = ctx.model_servers().endpoint(config.model, config.agent, config.run_dir)
    grader = Grader(config.store(), load_specs(config.dataset.specs_path()),
                    backend=config.sandbox.backend)  # fmt: skip
    run_job(ctx, out, len(rows), lambda batch: agent_jobs.infer(rows, batch, "base"),
             model=model, tool_mode=mode, grader=grader)  # fmt: skip
    figures = _heldout(out, rows)
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({**known, key: figures}, indent=1, sort_keys=True) + "\n")
    return figures
