"""``sweflow bench``: the benchmarks behind benchmarks/ (JSON figures with baselines).

One table, ``BENCHES``: each entry names a command, its help (summary and examples), what its
``--quick`` measures, its own options and the function that measures; every command gets
``--json`` and ``--quick`` and prints its figures the same way.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from sweflow.cli import bench_measures as measures
from sweflow.cli.common import (
    App,
    BaseOption,
    WheelhouseOption,
    image_source,
    non_negative,
)
from sweflow.cli.tracking import tracking_option_table

bench_app = App(help="Benchmarks of the sandbox backends and the pipeline stages.")
STORE_HELP = "Layer store (built if needed); default: in the cache, one per benchmark."
Option = tuple[str, Any, Any]  # a command's parameter: name, type, its typer.Option


def _opt(name: str, kind: Any, *decls: Any, **kwargs: Any) -> Option:
    return name, kind, typer.Option(*decls, **kwargs)


@dataclass(frozen=True)
class Bench:
    """One ``sweflow bench NAME``: its help (the summary, then examples), what ``--quick``
    does, its own options and what measures."""

    name: str
    help: str
    quick: str
    measure: measures.Measure
    options: tuple[Option, ...] = ()
    show: Callable[[dict, bool], None] = measures.emit  # the figures: JSON, or a table for a person


def _tasks_file(help: str) -> Option:
    """``--dataset FILE``: a tasks file that must exist."""
    return _opt(
        "dataset", Path | None, None, "--dataset", "-d", exists=True, dir_okay=False, help=help
    )


_ENVCACHE = "(default: the SWE-bench rows shipped in sweflow/data/envcache)."
_SPECS = _opt(
    "specs", Path | None, None, "--specs", help="Environment specs (default: beside dataset)."
)
_STORE = _opt("store", Path | None, None, "--store", "-s", help=STORE_HELP)
_MODEL = _opt(
    "model",
    str,
    "smollm2-135m-instruct",
    "--model",
    "-m",
    help="Model to serve with vLLM: a bundled name or a Hugging Face folder.",
)
_WHEELHOUSE: Option = ("wheelhouse", Path | None, WheelhouseOption)
_BASE: Option = ("base", str, BaseOption)

BENCHES = (
    Bench(
        "sandbox",
        """\
    open+exec+close latency, exec overhead, idle memory and leaks: local vs docker vs e2b.

    Examples:
      sweflow bench sandbox --json --quick
      sweflow bench sandbox --backends local,docker,e2b --json
    """,
        "Fewer samples (for CI).",
        measures.sandbox,
        (
            _opt(
                "backends",
                str,
                "local,docker",
                help="Comma-separated: local, docker (starts dockerd if needed), e2b (through "
                "sweflow's E2B endpoint, started for the run).",
            ),
            _BASE,
        ),
    ),
    Bench(
        "envprep",
        """\
    Cache-to-ready time and bytes per instance: sweflow vs untar vs docker (vs e2b modes).

    Examples:
      sweflow bench envprep --json --quick
      sweflow bench envprep -d data/demo --store store/ --json
      sweflow bench envprep --json --representative --no-docker
    """,
        "Fewer samples (for CI).",
        measures.envprep,
        (
            _opt(
                "dataset",
                str | None,
                None,
                "--dataset",
                "-d",
                help=f"Instances to build and time {_ENVCACHE}",
            ),
            _SPECS,
            _opt("repo_mirror", Path | None, None, "--repo-mirror", help="Folder of git repos."),
            _STORE,
            _WHEELHOUSE,
            _opt(
                "docker", bool, True, help="Include the docker baseline (starts dockerd if needed)."
            ),
            _opt(
                "e2b",
                bool,
                True,
                help="Include the e2b backend's environment modes (a local E2B endpoint).",
            ),
            _opt(
                "representative",
                bool,
                False,
                help="Also time the same instances in an environment grown to a typical SWE-bench "
                "size (numpy, pandas, scipy), built from the package index; both under real, "
                "representative.",
            ),
        ),
    ),
    Bench(
        "agent",
        """\
    Agent overhead per step and rollouts/min at concurrency 1, 8, 32 (fixed-latency model).

    Example:
      sweflow bench agent --json --quick
    """,
        "Fewer rollouts (for CI).",
        measures.agent,
        (
            _opt(
                "latency_ms",
                float,
                100.0,
                "--latency-ms",
                help="The fake model's latency.",
                callback=non_negative,
            ),
            _BASE,
        ),
    ),
    Bench(
        "reward",
        """\
    Reward wall time: sweflow local and docker vs the official harness vs bare tests.

    Examples:
      sweflow bench reward --json --quick
      sweflow bench reward -d data/demo/tasks.jsonl --store store/ --limit 6 --no-harness
    """,
        "Two instances, gold patches, one rep (for CI).",
        measures.reward,
        (
            _opt(
                "dataset",
                Path | None,
                None,
                "--dataset",
                "-d",
                help=f"Instances to grade {_ENVCACHE}",
            ),
            _SPECS,
            _opt(
                "repo_mirror",
                Path | None,
                None,
                "--repo-mirror",
                help="Folder of git repos or bundles (default: beside dataset).",
            ),
            _STORE,
            _WHEELHOUSE,
            _opt(
                "limit",
                int,
                0,
                "--limit",
                help="Instances, taken from each repository in turn (0: all).",
            ),
            _opt("docker", bool, True, help="Include the docker backend (starts dockerd)."),
            _opt("harness", bool, True, help="Include swebench's run_evaluation (starts dockerd)."),
        ),
    ),
    Bench(
        "sft",
        """\
    SFT throughput and memory: torchtune's recipe vs TRL's SFTTrainer; held-out loss.

    Example:
      sweflow bench sft --json --quick
    """,
        "6 steps on 8 train tasks (for CI); else 16 on 24.",
        measures.plain("sft", "fine-tune SmolLM2 with torchtune and with TRL"),
    ),
    Bench(
        "learn",
        """\
    Does training make the agent better? Base vs SFT vs SFT+RL served by vLLM on held-out
    tasks (valid actions, reproduced, right file, edited, patched, right hunk, submitted,
    resolved), and RL's resolve rate before and after on train tasks the SFT model resolves
    sometimes. A run cut short (Ctrl-C, a lost session) is continued by the same command: the
    run folder of the same plan and seed keeps every finished stage.

    Examples:
      sweflow bench learn --json --quick
      sweflow bench learn --quick --mlflow sqlite:///runs/mlflow.db --wandb agents --wandb-offline
    """,
        "48 train and 6 held-out tasks, 40 SFT steps, 2 GRPO steps on 1 task.",
        measures.learn,
        (
            _opt(
                "seed",
                int,
                0,
                min=0,
                help="SFT's seed (which tasks or windows it trains on, in what order): another "
                "seed is another sample of the trained model.",
            ),
            _opt(
                "plan",
                Path | None,
                None,
                "--plan",
                exists=True,
                dir_okay=False,
                help="A plan (YAML, the keys of sweflow/data/bench/learn.yaml) instead of the "
                "shipped one (learn.yaml, or learn-quick.yaml with --quick).",
            ),
            _tasks_file(
                "Tasks (default: data/learn/tasks.jsonl of the current folder when there, "
                "else the demo shipped in sweflow/data/demo)."
            ),
            *tracking_option_table(),
        ),
        show=measures.show_learn,
    ),
    Bench(
        "tts",
        """\
    Test-time scaling: N graded samples per held-out task, pass@k for k = 1..N, best-of-N
    per selector (first, majority, tests, verifier) and oracle pass@N, and the minutes taken.
    A run cut short is continued by the same command.

    Examples:
      sweflow bench tts --json --quick
      sweflow bench tts --json --samples 16 --model-url http://127.0.0.1:8000/v1
    """,
        "3 held-out tasks, 4 samples, 6 steps a run; else 12 tasks, 8 samples, 8 steps.",
        measures.tts,
        (
            _tasks_file(
                "Tasks (default: the demo shipped in sweflow/data/demo, toolz held out); a "
                "split.json beside them names the held-out repositories, else all are used."
            ),
            _MODEL,
            _opt(
                "model_url",
                str | None,
                None,
                "--model-url",
                help="An OpenAI-compatible endpoint serving the model as 'model' (none served).",
            ),
            _opt("samples", int | None, None, "--samples", "-n", min=1, help="Samples per task."),
            _opt("tasks", int | None, None, "--tasks", min=1, help="Held-out tasks (overrides)."),
            _opt("seed", int, 0, "--seed", min=0, help="Base seed of the samples."),
        ),
    ),
    Bench(
        "rl",
        """\
    RL steps with rollouts by HF generate vs a vLLM server vs vLLM one step ahead (time
    split, rollouts/min, generated tokens/s); sandbox + reward per rollout: local vs docker vs
    bare tests.

    Example:
      sweflow bench rl --json --quick
    """,
        "2 tasks, 4 GRPO steps, 4 reps; else 4, 8 and 6.",
        measures.plain("rl", "time RL rollouts and GRPO steps"),
        (_opt("docker", bool, True, help="Time the docker backend too (starts dockerd)."),),
    ),
    Bench(
        "cli",
        """\
    Start-up time of the command line: --help, version, sandbox run true vs python -c pass.

    Example:
      sweflow bench cli --json --quick
    """,
        "7 rounds (for CI); else 21.",
        measures.plain("cli", "time the command line's start-up"),
    ),
    Bench(
        "serving",
        """\
    vLLM's start and decoding with torch.compile off (what a CPU gets) and on, alternating.

    Examples:
      sweflow bench serving --json --quick
      sweflow bench serving --json --model path/to/hf-folder
    """,
        "One start per mode, 8 replies of 64 tokens; else 3 rounds, 16 replies of 256.",
        measures.plain("serving", "start vLLM compiled and eager, in turn"),
        (_MODEL,),
    ),
    Bench(
        "pipeline",
        """\
    The Prefect pipeline on a private server: cold, cached re-run, retry, stage start.

    Needs a checkout (its deployments/ and flows/) and the pipeline extra; the library drives
    the `prefect` command and the server's API, never importing Prefect.

    Example:
      sweflow bench pipeline --json --quick
    """,
        "1 task, 2 reps (for CI); else 2 tasks, 5 reps.",
        measures.pipeline,
        (
            _opt(
                "tasks", int | None, None, "--tasks", min=1, help="Demo tasks per run (overrides)."
            ),
            _opt("reps", int | None, None, "--reps", min=1, help="Repetitions (overrides)."),
        ),
    ),
    Bench(
        "ray",
        """\
    Ray executor overhead per instance, throughput on 1 and 2 nodes, layer transfer MB/s.

    Examples:
      sweflow bench ray --json --quick
      sweflow bench ray --json
    """,
        "4 instances, 2 reps (for CI).",
        measures.ray,
    ),
    Bench(
        "swebench",
        """\
    Real SWE-bench rows built and validated container-free: tried, built, validated, build
    seconds p50 and store MB per instance against the official images.

    Examples:
      sweflow bench swebench --json --quick
      sweflow bench swebench --json -d lite.json --repo-mirror mirrors/ --store /data/store
      sweflow bench swebench --json -d rows.jsonl --subset verified --repo-mirror mirrors/
    """,
        "The first row only (for CI).",
        measures.swebench,
        (
            _opt(
                "dataset",
                Path | None,
                None,
                "--dataset",
                "-d",
                help="SWE-bench rows (default: the committed Lite sample).",
            ),
            _opt(
                "repo_mirror",
                Path | None,
                None,
                "--repo-mirror",
                help="Folder of the repositories (default: repos/ beside the rows).",
            ),
            _opt("store", Path | None, None, "--store", help=STORE_HELP),
            _opt(
                "specs",
                Path | None,
                None,
                "--specs",
                help="Environment specs (default: beside the rows, else built-in).",
            ),
            _opt("limit", int, 0, "--limit", min=0, help="Only the first N rows (0: all)."),
            _opt("max_workers", int, 2, "--max-workers", "-j", min=1, help="Rows at once."),
            _opt(
                "subset",
                str | None,
                None,
                "--subset",
                help="lite, verified, full or custom (default: told by the rows' name).",
            ),
            _WHEELHOUSE,
        ),
    ),
    Bench(
        "datasets",
        """\
    Every dataset format (SWE-bench, SWE-Gym, SWE-smith, R2E-Gym, SWE-rebench, sweflow's own)
    built, validated both ways and its gold patches graded on local, beside its project's own
    grader: rows loaded, built, validated, gold resolved, agreement, build minutes, MB each.

    Examples:
      sweflow bench datasets --json --quick
      sweflow bench datasets --json
      sweflow bench datasets --json -d swe-gym=SWE-Gym/SWE-Gym-Lite:train --repo-mirror mirrors/
      sweflow bench datasets --json -f swe-smith --images images/
    """,
        "One row of each format (for CI); else 5.",
        measures.datasets,
        (
            _opt(
                "dataset",
                list[str] | None,
                None,
                "--dataset",
                "-d",
                help="FORMAT=SOURCE: that format's rows from a file, folder or Hub id "
                "(repeat; default: the committed rows of each).",
            ),
            _opt(
                "repo_mirror",
                Path | None,
                None,
                "--repo-mirror",
                help="Folder of the --dataset rows' repositories (default: beside the rows).",
            ),
            _STORE,
            _opt("limit", int, 5, "--limit", min=1, help="Rows of each format."),
            _opt("max_workers", int, 2, "--max-workers", "-j", min=1, help="Rows at once."),
            _WHEELHOUSE,
            _opt(
                "only",
                list[str] | None,
                None,
                "--format",
                "-f",
                help="Only this format (repeat; default: every format).",
            ),
            _opt(
                "images",
                str | None,
                None,
                "--images",
                help="Rows with an image run on it (a folder of saved images, "
                "registry:HOST[:PORT]): built from its layers, validated on local, gold graded "
                "on local and docker.",
                callback=image_source,
            ),
        ),
    ),
    Bench(
        "synth",
        """\
    Task synthesis: valid tasks per minute from the demo's three projects, yield per operator,
    SWE-smith's published figures beside them.

    Examples:
      sweflow bench synth --json --quick
      sweflow bench synth --json --report data/learn/tasks.report.json
    """,
        "3 valid tasks per project (for CI); else 12.",
        measures.synth,
        (
            _opt(
                "tasks",
                int | None,
                None,
                "--tasks",
                min=1,
                help="Valid tasks per project (overrides).",
            ),
            _opt("seed", int, 1, "--seed", help="Seed of the candidate order."),
            _opt(
                "report",
                Path | None,
                None,
                "--report",
                exists=True,
                dir_okay=False,
                help="A finished synthesis's tasks.report.json: its figures instead of a new run.",
            ),
        ),
    ),
)


def _register(bench: Bench) -> None:
    """``sweflow bench NAME``: ``--json``, ``--quick`` and the entry's options."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter(
            "json_out",
            keyword,
            annotation=bool,
            default=typer.Option(False, "--json", help="Print the figures as JSON only."),
        ),
        inspect.Parameter(
            "quick", keyword, annotation=bool, default=typer.Option(False, help=bench.quick)
        ),
        *(
            inspect.Parameter(name, keyword, annotation=kind, default=option)
            for name, kind, option in bench.options
        ),
    ]

    def command(json_out: bool, **options: Any) -> None:
        bench.show(bench.measure(**options), json_out)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__doc__ = inspect.cleandoc(bench.help)
    command.__name__ = f"bench_{bench.name}"
    bench_app.command(bench.name)(command)


for _bench in BENCHES:
    _register(_bench)
