"""What each ``sweflow bench`` command runs: its options in, the figures out (``Measure``),
and how the figures are shown. The commands themselves are the table in ``sweflow.cli.bench``.

Each function imports its benchmark when it runs, so ``sweflow --help`` pays for none of them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from sweflow.cli.common import console, work_starts
from sweflow.errors import SweflowError

_err = Console(stderr=True)  # progress lines go to stderr, so --json keeps stdout clean
Measure = Callable[..., dict]  # the command's options by name (``quick`` among them) -> figures


def emit(report: dict, json_out: bool) -> None:
    """The figures: plain JSON on stdout (for scripts), or highlighted."""
    if json_out:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        console.print_json(json.dumps(report))


def progress(line: str, done: int = 0, total: int = 0) -> None:
    _err.print(f"[dim]{line}[/]")


def _base_root(base: str) -> Path:
    """The sandbox base rootfs (built on first use, its progress on stderr)."""
    from sweflow.paths import rootfs_cache
    from sweflow.sandbox.rootfs import resolve_base

    return resolve_base(
        base, rootfs_cache(), progress=lambda line, *_: _err.print(line, highlight=False)
    )


def plain(module: str, starts: str) -> Measure:
    """A benchmark whose ``sweflow.bench.<module>.run`` takes the command's options as they are
    (imported when it runs: ``sweflow --help`` pays for none of them)."""

    def measure(**options: Any) -> dict:
        work_starts(starts)
        return import_module(f"sweflow.bench.{module}").run(**options, progress=progress)

    return measure


def sandbox(quick: bool, backends: str, base: str) -> dict:
    from sweflow.bench.sandbox import run

    names = [name.strip() for name in backends.split(",") if name.strip()]
    if unknown := set(names) - {"local", "docker", "e2b"}:
        raise typer.BadParameter(
            f"unknown backend(s): {', '.join(sorted(unknown))}", param_hint="--backends"
        )
    work_starts(f"benchmark the {', '.join(names)} sandbox backend(s) on {base}")
    return run(_base_root(base), quick=quick, backends=names, progress=progress)


def envprep(
    quick: bool,
    dataset: str | None,
    specs: Path | None,
    repo_mirror: Path | None,
    store: Path | None,
    wheelhouse: Path | None,
    docker: bool,
    e2b: bool,
    representative: bool,
) -> dict:
    from sweflow.bench import ENVCACHE, bench_root
    from sweflow.bench.envprep import run, with_representative
    from sweflow.cli.datasets import usable_rows
    from sweflow.envcache.dataset import Dataset

    dataset = dataset or str(ENVCACHE)
    store = store or bench_root("envprep") / "store"
    data = Dataset.load(dataset, specs=specs, mirror=repo_mirror, strict=False)
    rows = usable_rows(dataset, data.rows, data.skipped)
    work_starts(f"build and time {len(rows)} instance(s) in {store}")
    builder = data.builder(store, wheelhouse=wheelhouse, max_workers=2)
    if e2b and importlib.util.find_spec("e2b") is None:
        progress("e2b: skipped (the e2b SDK is not installed: pip install 'sweflow[e2b]')")
        e2b = False
    report = run(builder, rows, quick=quick, docker=docker, e2b=e2b, progress=progress)
    if representative:
        report = with_representative(
            report,
            dataset,
            store,
            rows,
            repo_mirror,
            quick=quick,
            docker=docker,
            progress=progress,
        )
    return report


def agent(quick: bool, latency_ms: float, base: str) -> dict:
    from sweflow.bench.agent import run

    work_starts(f"time agent runs on {base}")
    return run(_base_root(base), quick=quick, latency_s=latency_ms / 1000, progress=progress)


def reward(
    quick: bool,
    dataset: Path | None,
    specs: Path | None,
    repo_mirror: Path | None,
    store: Path | None,
    wheelhouse: Path | None,
    limit: int,
    docker: bool,
    harness: bool,
) -> dict:
    from sweflow.bench import ENVCACHE, bench_root
    from sweflow.bench.reward import run
    from sweflow.envcache.dataset import Dataset

    store = store or bench_root("reward") / "store"
    work_starts(f"build and grade the instances of {dataset or ENVCACHE} in {store}")
    data = Dataset.load(dataset or ENVCACHE, specs=specs, mirror=repo_mirror)
    return run(
        data,
        store,
        wheelhouse=wheelhouse,
        quick=quick,
        limit=limit,
        docker=docker,
        harness=harness,
        progress=progress,
    )


def pipeline(quick: bool, tasks: int | None, reps: int | None) -> dict:
    from sweflow.bench.pipeline import require_checkout, run

    require_checkout()
    tasks, reps = tasks or (1 if quick else 2), reps or (2 if quick else 5)
    work_starts(f"run end-to-end/demo on a private Prefect server: {tasks} task(s), {reps} rep(s)")
    return run(tasks, reps, progress=progress)


def ray(quick: bool) -> dict:
    if importlib.util.find_spec("ray") is None:
        raise typer.BadParameter("Ray is not installed: pip install 'sweflow[ray]'")
    return plain("ray", "start a Ray cluster of this machine and grade on it")(quick=quick)


def datasets(
    quick: bool,
    dataset: list[str] | None,
    repo_mirror: Path | None,
    store: Path | None,
    limit: int,
    max_workers: int,
    wheelhouse: Path | None,
    only: list[str] | None,
    images: str | None,
) -> dict:
    from sweflow.bench.datasets import parse_datasets, run
    from sweflow.formats import FORMATS

    try:
        named = parse_datasets(dataset or [])
    except SweflowError as exc:
        raise typer.BadParameter(str(exc), param_hint="--dataset") from None
    for name in only or []:
        if name not in FORMATS:
            raise typer.BadParameter(
                f"{name!r}: one of {', '.join(FORMATS)}", param_hint="--format"
            )
    work_starts("build, validate and grade the rows of every dataset format")
    return run(
        quick,
        named,
        repo_mirror,
        store,
        limit,
        max_workers,
        wheelhouse=wheelhouse,
        progress=progress,
        only=only or (),
        images=images,
    )


def swebench(
    quick: bool,
    dataset: Path | None,
    repo_mirror: Path | None,
    store: Path | None,
    specs: Path | None,
    limit: int,
    max_workers: int,
    subset: str | None,
    wheelhouse: Path | None,
) -> dict:
    from sweflow.bench.swebench import SUBSETS, run

    if subset is not None and subset not in SUBSETS:
        raise typer.BadParameter(
            f"{subset!r} is not one of {', '.join(SUBSETS)}", param_hint="--subset"
        )
    work_starts("build and validate SWE-bench rows")
    return run(
        dataset,
        repo_mirror,
        store,
        specs,
        1 if quick else limit,
        max_workers,
        progress=progress,
        subset=subset,
        wheelhouse=wheelhouse,
    )


def learn(quick: bool, seed: int, plan: Path | None, dataset: Path | None, **tracking: Any) -> dict:
    """``tracking``: the tracking options (sweflow.cli.tracking), checked here."""
    from sweflow.bench.learn import load_plan, run
    from sweflow.cli.tracking import TrackingArgs

    chosen = load_plan(plan) if plan else None  # a bad plan is refused before any work
    trackers = TrackingArgs(**tracking).config()  # so is a tracker that cannot take the run
    work_starts("collect golden trajectories, fine-tune and RL-train SmolLM2, serve each model")
    return run(
        quick=quick, progress=progress, dataset=dataset, seed=seed, plan=chosen, tracking=trackers
    )


def tts(
    quick: bool,
    dataset: Path | None,
    model: str,
    model_url: str | None,
    samples: int | None,
    tasks: int | None,
    seed: int,
) -> dict:
    from sweflow.bench.tts import run

    what = f"the endpoint {model_url}" if model_url else f"{model} served by vLLM"
    work_starts(f"draw graded samples of held-out tasks from {what}, then select among them")
    return run(quick, progress, dataset, model, model_url, samples, tasks, seed)


def synth(quick: bool, tasks: int | None, seed: int, report: Path | None) -> dict:
    from sweflow.bench.synth import from_report, run

    if report is not None:
        work_starts(f"summarize the synthesis reported in {report}")
        return from_report(report)
    tasks = tasks or (3 if quick else 12)
    work_starts(f"synthesize up to {tasks} task(s) from each demo project")
    return run(tasks, seed, progress=progress)


def _counts(overfit: dict) -> str:
    """The runs behind the RL check's rates ("0 of 16 -> 4 of 16; "), when the run kept them."""
    if "resolved_before" not in overfit or "resolved_after" not in overfit:
        return ""
    return f"{overfit['resolved_before']} -> {overfit['resolved_after']} resolved; "


def print_learn_report(report: dict, out: Console) -> None:
    """bench learn's figures for a person: the funnel per model on each split, then the rest."""
    from rich.table import Table

    from sweflow.agent.runs.scores import FUNNEL
    from sweflow.bench.learn import SPLITS

    for split in (s for s in SPLITS if s in report):
        rows = next(iter(report[split].values()), {}).get("runs", 0)
        about = f"of {', '.join(report['heldout_repos'])}" if split == "dev" else "run once"
        table = Table(title=f"{split} tasks ({rows}, {about})")
        table.add_column("model")
        table.add_column("valid actions", justify="right")
        for name in FUNNEL:
            table.add_column(name.replace("_", " "), justify="right")
        sampled = [  # the greedy runs' pass@1 repeats their own columns
            f["pass_at_k"]
            for f in report[split].values()
            if "pass_at_k" in f and not f["pass_at_k"].get("greedy")
        ]
        if sampled:
            table.add_column(f"pass@{sampled[0]['k']} resolved / right hunk", justify="right")
        for model, figures in report[split].items():
            valid = f"{figures['valid_action_rate']:.0%} of {figures['replies']} replies"
            counts = [f"{figures[n]} ({figures[f'{n}_rate']:.2f})" for n in FUNNEL]
            if sampled:
                passk = figures.get("pass_at_k") or {}
                counts.append(" / ".join(_share(passk.get(n)) for n in ("resolved", "right_hunk")))
            table.add_row(model, valid, *counts)
        out.print(table)
    sft, overfit = report["sft"], report["rl_overfit"]
    loss = (
        f"{sft['loss_first']:.3f} -> {sft['loss_last']:.3f}"
        if sft["loss_first"] is not None
        else "-"
    )
    if means := sft.get("loss_epochs"):
        loss += ", each epoch's mean " + " -> ".join(f"{m:.3f}" for m in means)
    out.print(
        f"golden trajectories: {report['golden_kept']} kept of {report['train_tasks']} "
        f"train tasks, imitable fraction {report['imitable_fraction']:.3f}"
    )
    out.print(f"SFT (seed {report['seed']}): {sft['steps']} steps, loss {loss}")
    for model, tf in report.get("teacher_forced", {}).items():
        shown = (
            f"{kind} {tf[f'{kind}_token_accuracy']:.3f} of {tf[f'{kind}_tokens']} tokens"
            if tf.get(f"{kind}_token_accuracy") is not None
            else f"{kind} -"
            for kind in ("edit", "fix", "view")
        )
        out.print(
            f"teacher-forced accuracy of {model} on {tf['conversations']} dev trajectories: "
            + ", ".join(shown)
        )
    if overfit.get("note"):
        out.print(f"RL check: {overfit['note']}")
    else:
        out.print(
            f"RL check: {overfit['steps']} GRPO steps on {len(overfit['tasks'])} task(s), "
            f"resolve rate {overfit['resolve_before']} -> {overfit['resolve_after']} "
            f"({_counts(overfit)}{overfit['samples_per_task']} samples each)"
        )
        for task in overfit["tasks"]:
            out.print(
                f"  {task['instance_id']}: {task['resolve_before']} -> {task['resolve_after']} "
                f"({_counts(task).removesuffix('; ')})",
                highlight=False,
            )
    out.print(f"{report['minutes']} minutes; runs, models and plots in {report['run_dir']}")


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def show_learn(report: dict, json_out: bool) -> None:
    if json_out:
        emit(report, json_out)
    else:
        print_learn_report(report, console)
