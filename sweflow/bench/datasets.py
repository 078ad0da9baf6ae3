"""Every dataset format built, validated and graded container-free: ``sweflow bench datasets``.

For each format of ``sweflow.formats`` the rows of that format (the committed ones of
``FIXTURES``, or those ``--dataset FORMAT=SOURCE`` names: a file, a folder or a Hugging Face id)
are loaded as that format, built and validated both ways on ``local`` by bench swebench's method
(the gold patch passes every FAIL_TO_PASS and PASS_TO_PASS test; the FAIL_TO_PASS ones fail
without it), and the gold patch of each validated row is graded by the grader the pipeline's
reward and evaluation use (the format's own grading where it has one: SWE-smith's, R2E-Gym's).

``grader_agreement`` counts the verdicts the project's own grader gives alike, over
``grader_compared`` compared: the gold run's log graded again by swebench's own
``get_logs_eval``, ``get_eval_tests_report`` and ``get_resolution_status`` (the SWE-bench family:
swebench, swe-gym, swe-rebench, sweflow's own), and, where the project's harness published a
graded run of a committed row (``<id>/test_output.txt`` and the ``report.json`` it wrote), the
verdict and test statuses sweflow gives that log against the published ones.

Per format: ``loaded``, ``built``, ``validated``, ``gold_resolved``, ``grader_agreement``,
``grader_compared``, ``build_minutes``, ``mb_per_instance`` (the built rows' layers on disk,
each file once, over the rows built; ``above_base_mb_per_instance`` without the Debian base),
``failures`` (a named reason per row), ``missing`` (why a
format has fewer than ``TARGET`` rows here) and ``target_met``. Results live in the store
(``<store>/bench-datasets/<format>/``): an interrupted run keeps what it did and a re-run
resumes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from swebench.harness.constants import FAIL_TO_PASS, LOG_TEST_OUTPUT, PASS_TO_PASS, ResolvedStatus
from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status

from sweflow.bench import DATA, DEMO, ENVCACHE, BenchError, bench_root
from sweflow.bench.swebench import RowResults, build_and_validate, rows_report
from sweflow.envcache.dataset import Dataset
from sweflow.envcache.store import LayerStore
from sweflow.formats import FORMATS, FormatError, check_format_name, grading_of
from sweflow.formats.r2egym import FORMAT as R2EGYM_FORMAT
from sweflow.formats.r2egym import published_runs
from sweflow.grading.reward import Grader
from sweflow.instances import Instance, InstancesError
from sweflow.paths import cache_root
from sweflow.progress import Progress
from sweflow.sandbox.docker.daemon import docker_daemon
from sweflow.sandbox.tracking import interrupted

R2EGYM = R2EGYM_FORMAT.grading
TARGET = 5  # validated rows, gold resolved, per format (issue 56)
FORMATS_DATA = DATA / "formats"
_OFF_HUB = "its rows are on the Hugging Face hub ({}), which this machine cannot reach"


@dataclass(frozen=True)
class Fixture:
    """A format's rows for the benchmark, and what to say of them."""

    rows: str | Path | None  # a file, a folder or a Hub id; None: no row of it is reachable
    source: str  # where the rows come from, for people
    mirror: Path | None = None  # their repositories (None: beside the rows)
    published: Path | None = None  # graded runs its project's harness published
    published_rows: Path | None = None  # the rows of those runs, where not among ``rows``


FIXTURES: dict[str, Fixture] = {
    "swebench": Fixture(
        FORMATS_DATA / "swebench" / "sample" / "tasks.jsonl",
        "five SWE-bench rows with their commits: four of Lite (pallets/flask, pytest-dev/pytest) "
        "and one of the full set's dev split (pylint-dev/astroid) "
        "(sweflow/data/formats/swebench/SOURCE.md); more: "
        + _OFF_HUB.format("SWE-bench/SWE-bench_Lite"),
    ),
    "swe-gym": Fixture(
        FORMATS_DATA / "swe-gym" / "rows.jsonl",
        "five SWE-Gym rows (getmoto/moto) as NVIDIA-NeMo/Gym commits them "
        "(sweflow/data/formats/swe-gym/SOURCE.md); more: " + _OFF_HUB.format("SWE-Gym/SWE-Gym"),
    ),
    "swe-smith": Fixture(
        FORMATS_DATA / "swe-smith" / "monkeytype" / "tasks.jsonl",
        "five rows SWE-smith's pipeline made of Instagram/MonkeyType, with its commit, and the "
        "one row SWE-smith's repository publishes with the run its harness graded "
        "(sweflow/data/formats/swe-smith/SOURCE.md); more: "
        + _OFF_HUB.format("SWE-bench/SWE-smith"),
        published=FORMATS_DATA / "swe-smith" / "run_evaluation",
        published_rows=FORMATS_DATA / "swe-smith" / "pandas-dev__pandas.95280573.pr_53652.json",
    ),
    "r2e-gym": Fixture(
        FORMATS_DATA / "r2e-gym" / "aiohttp" / "tasks.jsonl",
        "five R2E-Gym-Subset rows of aio-libs/aiohttp as k-l-lambda/R2E-Gym commits them, with "
        "their commits and llhttp's (sweflow/data/formats/r2e-gym/SOURCE.md); more: "
        + _OFF_HUB.format("R2E-Gym/R2E-Gym-Subset"),
    ),
    "swe-rebench": Fixture(
        FORMATS_DATA / "swe-rebench" / "rows.jsonl",
        "more-itertools' SWE-bench-format rows (sweflow/data/envcache) with the install_config "
        "SWE-rebench rows carry (scripts/make_swerebench_rows.py); published ones: "
        + _OFF_HUB.format("nebius/SWE-rebench"),
        mirror=ENVCACHE.parent,
    ),
    "sweflow": Fixture(DEMO, "the demo's synthesized tasks (sweflow/data/demo)"),
}


def parse_datasets(values: list[str]) -> dict[str, str]:
    """``FORMAT=SOURCE`` options as {format: source}, checked before any work (BenchError
    naming the bad one)."""
    out: dict[str, str] = {}
    for value in values:
        name, sep, source = value.partition("=")
        if not sep or not source:
            raise BenchError(f"--dataset {value!r}: expected FORMAT=SOURCE (swe-gym=rows.jsonl)")
        try:
            check_format_name(name)
        except FormatError as exc:
            raise BenchError(f"--dataset {value!r}: {exc}") from None
        if name not in FORMATS:
            raise BenchError(f"--dataset {value!r}: name a format, one of {', '.join(FORMATS)}")
        out[name] = source
    return out


def run(
    quick: bool = False,
    datasets: Mapping[str, str] | None = None,
    repo_mirror: Path | None = None,
    store: Path | None = None,
    limit: int = TARGET,
    max_workers: int = 2,
    timeout: float = 1800.0,
    wheelhouse: Path | None = None,
    progress: Progress = print,
    only: Collection[str] = (),
    images: str | None = None,
) -> dict:
    """The figures of every format (the module docstring), or of those ``only`` names;
    ``quick``: one row of each. With ``images`` (a folder of saved images, registry:HOST), the
    rows with an image run on it: built from its layers, validated and graded on ``local``,
    and their gold patches graded on ``docker`` too."""
    store = store or bench_root("datasets") / "store"
    limit = 1 if quick else limit
    fixtures = dict(FIXTURES)
    for name, source in (datasets or {}).items():
        fixtures[name] = Fixture(source, f"--dataset {name}={source}", mirror=repo_mirror)
    formats = {}
    with contextlib.ExitStack() as stack:
        if images:  # the docker backend's daemon: DOCKER_HOST's, else one of sweflow's own
            stack.enter_context(docker_daemon(cache_root() / "docker"))
        for name, fixture in fixtures.items():
            if only and name not in only:
                continue
            progress(f"{name}: {fixture.source}")
            formats[name] = _one_format(
                name, fixture, store, limit, max_workers, timeout, wheelhouse, progress, images
            )
            if interrupted():
                break
    return {
        "store": str(store),
        "images": images,
        "rows_per_format": limit,
        "target_validated": TARGET,
        "formats": formats,
        "formats_meeting_target": sorted(n for n, f in formats.items() if f["target_met"]),
    }


def _one_format(
    name: str,
    fixture: Fixture,
    store: Path,
    limit: int,
    max_workers: int,
    timeout: float,
    wheelhouse: Path | None,
    progress: Progress,
    images: str | None = None,
) -> dict:
    figures: dict = {
        "source": fixture.source,
        "loaded": 0,
        "built": 0,
        "validated": 0,
        "gold_resolved": 0,
        "grader_agreement": 0,
        "grader_compared": 0,
        "build_minutes": 0.0,
        "mb_per_instance": None,
        "above_base_mb_per_instance": None,
        "failures": {},
        "missing": "",
    }
    if fixture.rows is None:
        figures["missing"] = fixture.source
        return figures | {"target_met": False}
    try:
        data = Dataset.load(fixture.rows, mirror=fixture.mirror, format=name)
    except (InstancesError, FormatError) as exc:
        raise BenchError(f"{name}: {fixture.rows}: {exc}") from None
    figures["loaded"] = len(data.rows)
    rows = data.sample(limit)
    results = RowResults(store / "bench-datasets" / name)
    mirrored, not_mirrored = build_and_validate(
        data, rows, store, results, max_workers, timeout, progress, wheelhouse, images
    )
    report = rows_report(mirrored, results, LayerStore(store))
    graded = _grade_gold(data, mirrored, results, store, progress)
    if images:  # the same rows, their gold patches graded again on the image under docker
        on_docker = _grade_gold(data, mirrored, results, store, progress, backend="docker")
        figures["gold_resolved_docker"] = sum(g["resolved"] for g in on_docker)
    published_rows = data.rows
    if fixture.published_rows is not None:
        published_rows = Dataset.load(fixture.published_rows, format=name).rows
    published = _published_agreement(published_rows, fixture.published)
    published += [_own_runs_agree(row) for row in rows if grading_of(row) is R2EGYM]
    figures |= {
        "built": report["built"],
        "validated": report["validated"],
        "gold_resolved": sum(g["resolved"] for g in graded),
        "grader_agreement": sum(g["agrees"] for g in graded if g["agrees"] is not None)
        + sum(published),
        "grader_compared": sum(g["agrees"] is not None for g in graded) + len(published),
        "build_minutes": report["build_minutes_total"],
        "mb_per_instance": report["store_mb_per_instance"],
        "above_base_mb_per_instance": report["above_base_mb_per_instance"],
        "failures": report["failures"],
    }
    if not_mirrored:
        repos = ", ".join(f"{repo} ({n})" for repo, n in sorted(not_mirrored.items()))
        figures["missing"] = f"no repository here for {repos}"
    elif figures["loaded"] < TARGET:
        figures["missing"] = f"{figures['loaded']} rows here (the target is {TARGET})"
    met = (
        figures["validated"] >= TARGET
        and figures["gold_resolved"] == figures["validated"]
        and figures["grader_agreement"] == figures["grader_compared"] > 0
    )
    return figures | {"target_met": met}


def _grade_gold(
    data: Dataset,
    rows: list[Instance],
    results: RowResults,
    store: Path,
    progress: Progress,
    backend: str = "local",
) -> list[dict]:
    """The gold patch of each validated row graded on ``backend`` (kept in its record: a re-run
    resumes), with whether the project's own grader agrees (None: no reference for the format
    here)."""
    key = "gold" if backend == "local" else f"gold_{backend}"
    grader = Grader(store, data.specs, backend=backend, log_dir=results.root / key)
    graded = []
    for row in rows:
        record = results.get(row.instance_id)
        if record is None or record["outcome"] != "valid":
            continue
        if key not in record:
            result = grader.reward(row, row.patch)
            if interrupted():
                break
            reference = _harness_verdict(grader, row, result.log_path)
            record[key] = {
                "resolved": result.resolved,
                "reason": result.reason,
                "agrees": None if reference is None else reference == result.resolved,
            }
            results.put(row.instance_id, record)
            progress(f"{row.instance_id}: gold on {backend}: {result.reason}")
        graded.append(record[key])
    return graded


def _harness_verdict(grader: Grader, row: Instance, log_dir: str | None) -> bool | None:
    """Whether swebench's own grading functions find the gold run resolved (None for a format
    its project grades another way, or a run with no log)."""
    if grading_of(row) is not None or log_dir is None:
        return None
    log = Path(log_dir) / LOG_TEST_OUTPUT
    if not log.is_file():
        return None
    statuses, found = get_logs_eval(grader.test_spec(row), str(log))
    if not found:
        return False
    lists = {FAIL_TO_PASS: row.FAIL_TO_PASS, PASS_TO_PASS: row.PASS_TO_PASS}
    return (
        get_resolution_status(get_eval_tests_report(statuses, lists)) == ResolvedStatus.FULL.value
    )


def _own_runs_agree(row: Instance) -> bool:
    """An R2E-Gym row carries the runs of its hidden tests R2E-Gym made after the commit and
    before it (``execution_result_content``): whether sweflow's grading finds the one after
    resolved and the one before not, as R2E-Gym's own reward does on the committed rows
    (tests/formats/test_formats.py runs R2E-Gym's code on them)."""
    after, before = published_runs(row)
    return R2EGYM.report(row, after)["resolved"] and not R2EGYM.report(row, before)["resolved"]


def _published_agreement(rows: list[Instance], published: Path | None) -> list[bool]:
    """For each row with a published graded run: whether sweflow's grading of that log gives
    the published verdict and test statuses."""
    if published is None:
        return []
    agreed = []
    for row in rows:
        run = published / row.instance_id
        grading = grading_of(row)
        if grading is None or not (run / "report.json").is_file():
            continue
        theirs = json.loads((run / "report.json").read_text())
        theirs = theirs.get(row.instance_id, theirs)
        ours = grading.report(row, (run / LOG_TEST_OUTPUT).read_text())
        agreed.append(
            ours["resolved"] == theirs["resolved"]
            and ours.get("tests_status") == theirs.get("tests_status")
        )
    return agreed
