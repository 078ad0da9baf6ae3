"""``sweflow bench``: the benchmarks behind benchmarks/ (JSON figures with baselines)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import typer
from rich.console import Console

from sweflow.cli.common import App, BaseOption, WheelhouseOption, console, work_starts

bench_app = App(help="Benchmarks of the sandbox backends and the pipeline stages.")
STORE_HELP = "Layer store (built if needed); default: in the cache, one per benchmark."
_err = Console(stderr=True)  # progress lines go to stderr, so --json keeps stdout clean


def _progress(line: str) -> None:
    _err.print(f"[dim]{line}[/]")


def _base_root(base: str) -> Path:
    """The sandbox base rootfs (built on first use, its progress on stderr)."""
    from sweflow.paths import rootfs_cache
    from sweflow.sandbox.rootfs import resolve_base

    return resolve_base(
        base, rootfs_cache(), progress=lambda line: _err.print(line, highlight=False)
    )


def _emit(report: dict, json_out: bool) -> None:
    """The figures: plain JSON on stdout (for scripts), or highlighted."""
    if json_out:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        console.print_json(json.dumps(report))


@bench_app.command("sandbox")
def bench_sandbox(
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
    quick: bool = typer.Option(False, help="Fewer samples (for CI)."),
    backends: str = typer.Option(
        "local,docker",
        help="Comma-separated: local, docker (starts dockerd if needed), e2b (through "
        "sweflow's E2B endpoint, started for the run).",
    ),
    base: str = BaseOption,
) -> None:
    """open+exec+close latency, exec overhead, idle memory and leaks: local vs docker vs e2b.

    Examples:
      sweflow bench sandbox --json --quick
      sweflow bench sandbox --backends local,docker,e2b --json
    """
    from sweflow.bench.sandbox import run

    names = [name.strip() for name in backends.split(",") if name.strip()]
    if unknown := set(names) - {"local", "docker", "e2b"}:
        raise typer.BadParameter(f"unknown backend(s): {', '.join(sorted(unknown))}",
                                 param_hint="--backends")  # fmt: skip
    work_starts(f"benchmark the {', '.join(names)} sandbox backend(s) on {base}")
    root = _base_root(base)
    report = run(root, quick=quick, backends=names, progress=_progress)
    _emit(report, json_out)


@bench_app.command("envprep")
def bench_envprep(
    dataset: str = typer.Option(
        None,
        "--dataset",
        "-d",
        help="Instances to build and time (default: the SWE-bench rows of tests/data/envcache).",
    ),
    specs: Path = typer.Option(
        None, "--specs", help="Environment specs (default: beside dataset)."
    ),
    repo_mirror: Path = typer.Option(None, "--repo-mirror", help="Folder of git repos."),
    store: Path = typer.Option(None, "--store", "-s", help=STORE_HELP),
    wheelhouse: Path = WheelhouseOption,
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
    quick: bool = typer.Option(False, help="Fewer samples (for CI)."),
    docker: bool = typer.Option(
        True, help="Include the docker baseline (starts dockerd if needed)."
    ),
    e2b: bool = typer.Option(
        True, help="Include the e2b backend's environment modes (a local E2B endpoint)."
    ),
    representative: bool = typer.Option(
        False,
        help="Also time the same instances in an environment grown to a typical SWE-bench size "
        "(numpy, pandas, scipy), built from the package index; both under real, representative.",
    ),
) -> None:
    """Cache-to-ready time and bytes per instance: sweflow vs untar vs docker (vs e2b modes).

    Examples:
      sweflow bench envprep --json --quick
      sweflow bench envprep -d data/demo --store store/ --json
      sweflow bench envprep --json --representative --no-docker
    """
    from sweflow.bench import ENVCACHE, bench_root
    from sweflow.bench.envprep import run, with_representative
    from sweflow.cli.env import load_dataset_rows
    from sweflow.envcache.dataset import dataset_builder

    dataset = dataset or str(ENVCACHE)
    store = store or bench_root("envprep") / "store"
    rows = load_dataset_rows(dataset, None, None)
    work_starts(f"build and time {len(rows)} instance(s) in {store}")
    builder = dataset_builder(
        dataset, store, specs=specs, mirror=repo_mirror, wheelhouse=wheelhouse, max_workers=2
    )
    if e2b and importlib.util.find_spec("e2b") is None:
        _progress("e2b: skipped (the e2b SDK is not installed: pip install 'sweflow[e2b]')")
        e2b = False
    report = run(builder, rows, quick=quick, docker=docker, e2b=e2b, progress=_progress)
    if representative:
        report = with_representative(report, dataset, store, rows, repo_mirror,
                                     quick=quick, docker=docker, progress=_progress)  # fmt: skip
    _emit(report, json_out)


@bench_app.command("agent")
def bench_agent(
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
    quick: bool = typer.Option(False, help="Fewer rollouts (for CI)."),
    latency_ms: float = typer.Option(100.0, "--latency-ms", help="The fake model's latency."),
    base: str = BaseOption,
) -> None:
    """Agent overhead per step and rollouts/min at concurrency 1, 8, 32 (fixed-latency model).

    Example:
      sweflow bench agent --json --quick
    """
    from sweflow.bench.agent import run

    work_starts(f"time agent runs on {base}")
    root = _base_root(base)
    report = run(
        root,
        quick=quick,
        latency_s=latency_ms / 1000,
        progress=_progress,
    )
    _emit(report, json_out)


@bench_app.command("reward")
def bench_reward(
    dataset: Path = typer.Option(
        None,
        "--dataset",
        "-d",
        help="Instances to grade (default: the SWE-bench rows of tests/data/envcache).",
    ),
    specs: Path = typer.Option(
        None, "--specs", help="Environment specs (default: beside dataset)."
    ),
    repo_mirror: Path = typer.Option(
        None, "--repo-mirror", help="Folder of git repos or bundles (default: beside dataset)."
    ),
    store: Path = typer.Option(None, "--store", "-s", help=STORE_HELP),
    wheelhouse: Path = WheelhouseOption,
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
    quick: bool = typer.Option(False, help="Two instances, gold patches, one rep (for CI)."),
    limit: int = typer.Option(
        0, "--limit", help="Instances, taken from each repository in turn (0: all)."
    ),
    docker: bool = typer.Option(True, help="Include the docker backend (starts dockerd)."),
    harness: bool = typer.Option(True, help="Include swebench's run_evaluation (starts dockerd)."),
) -> None:
    """Reward wall time: sweflow local and docker vs the official harness vs bare tests.

    Examples:
      sweflow bench reward --json --quick
      sweflow bench reward -d data/demo/tasks.jsonl --store store/ --limit 6 --no-harness
    """
    from sweflow.bench import ENVCACHE, bench_root
    from sweflow.bench.reward import run
    from sweflow.grading.dataset import GradingData

    store = store or bench_root("reward") / "store"
    work_starts(f"build and grade the instances of {dataset or ENVCACHE} in {store}")
    data = GradingData.load(dataset or ENVCACHE, store, wheelhouse, specs, repo_mirror)
    report = run(
        data,
        quick=quick,
        limit=limit,
        docker=docker,
        harness=harness,
        progress=_progress,
    )
    _emit(report, json_out)


@bench_app.command("sft")
def bench_sft(
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
    quick: bool = typer.Option(False, help="6 steps on 8 train tasks (for CI); else 16 on 24."),
) -> None:
    """SFT throughput and memory: torchtune's recipe vs TRL's SFTTrainer; held-out loss.

    Example:
      sweflow bench sft --json --quick
    """
    from sweflow.bench.sft import run

    work_starts("fine-tune SmolLM2 with torchtune and with TRL")
    _emit(run(quick=quick, progress=_progress), json_out)


@bench_app.command("learn")
def bench_learn(
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
    quick: bool = typer.Option(
        False, help="48 train and 6 held-out tasks, 40 SFT steps, 2 GRPO steps on 1 task."
    ),
    seed: int = typer.Option(
        0,
        min=0,
        help="SFT's seed (which tasks or windows it trains on, in what order): another seed "
        "is another sample of the trained model.",
    ),
) -> None:
    """Does training make the agent better? Base vs SFT vs SFT+RL served by vLLM on held-out
    tasks (valid actions, reproduced, right file, edited, patched, right hunk, submitted,
    resolved), and RL's resolve rate before and after on train tasks the SFT model resolves
    sometimes. A run cut short (Ctrl-C, a lost session) is continued by the same command: the
    run folder of the same plan and seed keeps every finished stage.

    Example:
      sweflow bench learn --json --quick
    """
    from sweflow.bench.learn import run

    work_starts("collect golden trajectories, fine-tune and RL-train SmolLM2, serve each model")
    report = run(quick=quick, progress=_progress, seed=seed)
    if json_out:
        _emit(report, json_out)
    else:
        print_learn_report(report, console)


def _counts(overfit: dict) -> str:
    """The runs behind the RL check's rates ("0 of 16 -> 4 of 16; "), when the run kept them."""
    if "resolved_before" not in overfit or "resolved_after" not in overfit:
        return ""
    return f"{overfit['resolved_before']} -> {overfit['resolved_after']} resolved; "


def print_learn_report(report: dict, out: Console) -> None:
    """bench learn's figures for a person: the held-out funnel per model, then the rest."""
    from rich.table import Table

    from sweflow.agent.scores import FUNNEL

    table = Table(title=f"held-out tasks ({report['heldout_tasks']}, of "
                  f"{', '.join(report['heldout_repos'])})")  # fmt: skip
    table.add_column("model")
    table.add_column("valid actions", justify="right")
    for name in FUNNEL:
        table.add_column(name.replace("_", " "), justify="right")
    for model, figures in report["heldout"].items():
        valid = f"{figures['valid_action_rate']:.0%} of {figures['replies']} replies"
        table.add_row(model, valid, *(f"{figures[n]} ({figures[f'{n}_rate']:.2f})" for n in FUNNEL))
    out.print(table)
    sft, overfit = report["sft"], report["rl_overfit"]
    loss = (f"{sft['loss_first']:.3f} -> {sft['loss_last']:.3f}"
            if sft["loss_first"] is not None else "-")  # fmt: skip
    out.print(f"golden trajectories: {report['golden_kept']} kept of {report['train_tasks']} "
              f"train tasks, imitable fraction {report['imitable_fraction']:.3f}")  # fmt: skip
    out.print(f"SFT (seed {report['seed']}): {sft['steps']} steps, loss {loss}")
    if overfit.get("note"):
        out.print(f"RL check: {overfit['note']}")
    else:
        out.print(f"RL check: {overfit['steps']} GRPO steps on {len(overfit['tasks'])} task(s), "
                  f"resolve rate {overfit['resolve_before']} -> {overfit['resolve_after']} "
                  f"({_counts(overfit)}{overfit['samples_per_task']} samples each)")  # fmt: skip
    out.print(f"{report['minutes']} minutes; runs, models and plots in {report['run_dir']}")


@bench_app.command("rl")
def bench_rl(
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
    quick: bool = typer.Option(False, help="2 tasks, 4 GRPO steps, 4 reps; else 4, 8 and 6."),
    docker: bool = typer.Option(True, help="Time the docker backend too (starts dockerd)."),
) -> None:
    """RL steps with rollouts by HF generate vs a vLLM server vs vLLM one step ahead (time
    split, rollouts/min, generated tokens/s); sandbox + reward per rollout: local vs docker vs
    bare tests.

    Example:
      sweflow bench rl --json --quick
    """
    from sweflow.bench.rl import run

    work_starts("time RL rollouts and GRPO steps")
    _emit(run(quick=quick, docker=docker, progress=_progress), json_out)


@bench_app.command("cli")
def bench_cli(
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
    quick: bool = typer.Option(False, help="7 rounds (for CI); else 21."),
) -> None:
    """Start-up time of the command line: --help, version, sandbox run true vs python -c pass.

    Example:
      sweflow bench cli --json --quick
    """
    from sweflow.bench.cli import run

    work_starts("time the command line's start-up")
    _emit(run(quick=quick, progress=_progress), json_out)


@bench_app.command("pipeline")
def bench_pipeline(
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
    quick: bool = typer.Option(False, help="1 task, 2 reps (for CI); else 2 tasks, 5 reps."),
    tasks: int = typer.Option(None, "--tasks", min=1, help="Demo tasks per run (overrides)."),
    reps: int = typer.Option(None, "--reps", min=1, help="Repetitions (overrides)."),
) -> None:
    """The Prefect pipeline on a private server: cold, cached re-run, retry, stage start.

    Needs a checkout (its deployments/ and flows/) and the pipeline extra; the library drives
    the `prefect` command and the server's API, never importing Prefect.

    Example:
      sweflow bench pipeline --json --quick
    """
    from sweflow.bench.pipeline import require_checkout, run

    require_checkout()
    tasks, reps = tasks or (1 if quick else 2), reps or (2 if quick else 5)
    work_starts(f"run end-to-end/demo on a private Prefect server: {tasks} task(s), {reps} rep(s)")
    _emit(run(tasks, reps, progress=_progress), json_out)


@bench_app.command("ray")
def bench_ray(
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
    quick: bool = typer.Option(False, help="4 instances, 2 reps (for CI)."),
) -> None:
    """Ray executor overhead per instance, throughput on 1 and 2 nodes, layer transfer MB/s.

    Examples:
      sweflow bench ray --json --quick
      sweflow bench ray --json
    """
    if importlib.util.find_spec("ray") is None:
        raise typer.BadParameter("Ray is not installed: pip install 'sweflow[ray]'")
    from sweflow.bench.ray import run

    work_starts("start a Ray cluster of this machine and grade on it")
    _emit(run(quick=quick, progress=_progress), json_out)


@bench_app.command("swebench")
def bench_swebench(
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
    quick: bool = typer.Option(False, help="The first row only (for CI)."),
    dataset: Path = typer.Option(
        None, "--dataset", "-d", help="SWE-bench rows (default: the committed Lite sample)."
    ),
    repo_mirror: Path = typer.Option(
        None, "--repo-mirror", help="Folder of the repositories (default: repos/ beside the rows)."
    ),
    store: Path = typer.Option(None, "--store", help=STORE_HELP),
    specs: Path = typer.Option(
        None, "--specs", help="Environment specs (default: beside the rows, else built-in)."
    ),
    limit: int = typer.Option(0, "--limit", min=0, help="Only the first N rows (0: all)."),
    max_workers: int = typer.Option(2, "--max-workers", "-j", min=1, help="Rows at once."),
    subset: str = typer.Option(
        None, "--subset", help="lite, verified, full or custom (default: told by the rows' name)."
    ),
    wheelhouse: Path = WheelhouseOption,
) -> None:
    """Real SWE-bench rows built and validated container-free: tried, built, validated, build
    seconds p50 and store MB per instance against the official images.

    Examples:
      sweflow bench swebench --json --quick
      sweflow bench swebench --json -d lite.json --repo-mirror mirrors/ --store /data/store
      sweflow bench swebench --json -d rows.jsonl --subset verified --repo-mirror mirrors/
    """
    from sweflow.bench.swebench import SUBSETS, run

    if subset is not None and subset not in SUBSETS:
        raise typer.BadParameter(
            f"{subset!r} is not one of {', '.join(SUBSETS)}", param_hint="--subset"
        )
    work_starts("build and validate SWE-bench rows")
    report = run(dataset, repo_mirror, store, specs, 1 if quick else limit, max_workers,
                 progress=_progress, subset=subset, wheelhouse=wheelhouse)  # fmt: skip
    _emit(report, json_out)


@bench_app.command("synth")
def bench_synth(
    json_out: bool = typer.Option(False, "--json", help="Print the figures as JSON only."),
    quick: bool = typer.Option(False, help="3 valid tasks per project (for CI); else 12."),
    tasks: int = typer.Option(None, "--tasks", min=1, help="Valid tasks per project (overrides)."),
    seed: int = typer.Option(1, "--seed", help="Seed of the candidate order."),
    report: Path = typer.Option(
        None,
        "--report",
        exists=True,
        dir_okay=False,
        help="A finished synthesis's tasks.report.json: its figures instead of a new run.",
    ),  # fmt: skip
) -> None:
    """Task synthesis: valid tasks per minute from the demo's three projects, yield per operator,
    SWE-smith's published figures beside them.

    Examples:
      sweflow bench synth --json --quick
      sweflow bench synth --json --report data/learn/tasks.report.json
    """
    from sweflow.bench.synth import from_report, run

    if report is not None:
        work_starts(f"summarize the synthesis reported in {report}")
        _emit(from_report(report), json_out)
        return
    tasks = tasks or (3 if quick else 12)
    work_starts(f"synthesize up to {tasks} task(s) from each demo project")
    _emit(run(tasks, seed, progress=_progress), json_out)
