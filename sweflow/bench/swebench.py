"""Real SWE-bench rows, container-free: how many build and validate, how fast, how much disk.

For each row of the dataset whose repository the mirror holds (the others are counted under
``not_mirrored``, by repository, and not tried): build its layers with the spec
table (the built-in SWE-bench table unless a specs file is given), then validate it as the
harness would (the gold patch resolves every FAIL_TO_PASS and PASS_TO_PASS test, and the
FAIL_TO_PASS tests fail without it). Every row that does not validate has a named reason: not
mirrored, a build error (its first line), or the validation's outcome with the tests it
singled out (failing with the gold patch, passing without it, or changing verdict).

- ``subset``: which SWE-bench the rows are (``lite``, ``verified``, ``full``; ``custom`` for
  other rows), given or told by the dataset's name (``SWE-bench_Verified``, ``lite.json``...);
- ``tried`` / ``built`` / ``validated``: rows, rows with layers, rows that validated;
- ``build_s_p50``: median build seconds of the rows built (a row built by an earlier run keeps
  the seconds recorded then: results live in ``<store>/bench-swebench/`` and a re-run resumes,
  redoing a row whose environment a build would make anew: another base, spec or recipe);
- ``store_mb_per_instance``: the bytes on disk of the built rows' layers, each file once (a
  layer shared by many rows, the Debian base, and a file the pool shares between layers are
  counted once) over the rows built, beside the anchors: an official SWE-bench docker image
  (1.21 GB) and SWE-MiniSandbox (178 MB per instance); ``above_base_mb_per_instance`` leaves the
  Debian bases out (environments and instances only); ``store_mb_per_instance_as_trees`` counts
  each distinct layer whole (what a store without the file pool holds), and
  ``files_deduplicated_pct`` is the share of the layers' files stored once for several;
- ``build_minutes_total`` / ``validate_minutes_total``: the rows' build and validation time,
  summed over rows (the wall time is less with ``-j`` above 1).
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from sweflow.bench import DATA, BenchError, bench_root
from sweflow.envcache.dataset import Dataset
from sweflow.envcache.diskusage import disk_usage
from sweflow.envcache.repos import RepoError, RepoSource
from sweflow.envcache.store import LayerStore
from sweflow.envcache.validate import validate_one
from sweflow.instances import Instance
from sweflow.progress import Progress
from sweflow.sandbox.tracking import interrupted, interruptible_map

# Three real SWE-bench Lite rows (pallets/flask) with their commits in repos/ (a 0.9 MB tar of a
# shallow repository, scripts/make_swebench_sample.py): what runs with no option.
DATASET = DATA / "swebench-sample" / "tasks.jsonl"
DOCKER_IMAGE_MB = 1210.0  # an official SWE-bench instance image (SWE-MiniSandbox, arXiv 2602.11210)
MINISANDBOX_MB = 178.0  # SWE-MiniSandbox per SWE-bench Verified instance (arXiv 2602.11210)
SUBSETS = ("lite", "verified", "full", "custom")


NETWORK_ERRORS = ("Temporary failure in name resolution", "Network is unreachable")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def subset_of(dataset: Path) -> str:
    """The SWE-bench subset a dataset's name says it holds (Hugging Face ids and the files made
    from them keep it: ``SWE-bench_Lite``, ``swe-bench-verified.jsonl``, ``lite.json``); the full
    set when it names SWE-bench alone, ``custom`` when it names none."""
    if dataset == DATASET:
        return "lite"
    name = str(dataset).lower().replace("_", "-")
    for subset in ("lite", "verified"):
        if subset in name:
            return subset
    return "full" if re.search(r"swe-?bench", name) else "custom"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "unknown"


def failure_cause(log: Path, tests: Sequence[str] = ()) -> str:
    """The error most failing tests of a run's log share (pytest's ``E   ...`` lines), named
    for people: ``needs the network`` when it is a failed connection (sandboxes run offline).

    With ``tests`` (the ones that failed), only their sections of pytest's report count, so a
    test outside the row's lists that fails for its own reason does not name the cause."""
    if not log.is_file():
        return ""
    text = _ANSI.sub("", log.read_text(errors="replace"))
    lines = _sections_of(text, tests)
    if tests and not lines and (skipped := _skip_reason(text, tests)):
        return skipped
    lines = lines or text.splitlines()
    errors = Counter(
        line[1:].strip() for line in lines if line.startswith("E ") and line[1:].strip()
    )
    if not errors:
        return ""
    cause = errors.most_common(1)[0][0]
    if any(marker in "\n".join(lines) for marker in NETWORK_ERRORS):
        return f"needs the network (sandboxes run without one): {cause}"
    return cause


_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$")
_SKIPPED = re.compile(r"^SKIPPED \[\d+\] ([^:]+):\d+: (.+)$")


def _skip_reason(text: str, tests: Sequence[str]) -> str:
    """Why pytest skipped ``tests`` (the harness counts a skipped PASS_TO_PASS test as failed):
    the reason of a skip line of their files that names a word of their names (``-rA`` gives
    file and line, not the test)."""
    files = {test.split("::")[0] for test in tests}
    words = {
        word
        for test in tests
        for word in re.findall(r"[a-z0-9]+", test.lower())
        if len(word) > 3 and word != "test"
    }
    for line in text.splitlines():
        found = _SKIPPED.match(line)
        if found and found[1] in files and any(word in found[2].lower() for word in words):
            return f"skipped, not passed: {found[2]}"
    return ""


def _sections_of(text: str, tests: Sequence[str]) -> list[str]:
    """The lines of pytest's failure sections (``____ Class.test[param] ____``) of ``tests``."""
    wanted = {t.split("::", 1)[-1].replace("::", ".") for t in tests}
    out: list[str] = []
    keep = False
    for line in text.splitlines():
        header = _SECTION.match(line)
        if header:
            keep = header.group(1).replace("ERROR at setup of ", "") in wanted
        elif keep:
            out.append(line)
    return out


class RowResults:
    """Per-row results on disk, so an interrupted run keeps what it did and a re-run resumes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def get(self, instance_id: str) -> dict | None:
        path = self.root / f"{instance_id}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def put(self, instance_id: str, record: dict) -> None:
        tmp = self.root / f".{instance_id}.json.tmp"
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(self.root / f"{instance_id}.json")


def run(
    dataset: Path | None = None,
    repo_mirror: Path | None = None,
    store: Path | None = None,
    specs: Path | None = None,
    limit: int = 0,
    max_workers: int = 2,
    timeout: float = 1800.0,
    progress: Progress = print,
    subset: str | None = None,
    wheelhouse: Path | None = None,
) -> dict:
    dataset = dataset or DATASET
    subset = subset or subset_of(dataset)
    if subset not in SUBSETS:
        raise BenchError(f"subset {subset!r}: not one of {', '.join(SUBSETS)}")
    store = store or bench_root("swebench") / "store"
    data = Dataset.load(dataset, specs=specs, mirror=repo_mirror, limit=limit)
    if not data.rows:
        raise BenchError(f"{dataset}: no rows")
    results = RowResults(store / "bench-swebench")
    mirrored, not_mirrored = build_and_validate(
        data, data.rows, store, results, max_workers, timeout, progress, wheelhouse
    )
    report = rows_report(mirrored, results, LayerStore(store))
    return {
        "dataset": str(dataset),
        "subset": subset,
        "repo_mirror": str(data.source.mirror),
        "store": str(store),
        **report,
        "not_mirrored": dict(sorted(not_mirrored.items())),
    }


def build_and_validate(
    data: Dataset,
    rows: list[Instance],
    store: Path,
    results: RowResults,
    max_workers: int,
    timeout: float,
    progress: Progress,
    wheelhouse: Path | None = None,
    images: str | None = None,
) -> tuple[list[Instance], Counter[str]]:
    """Build and validate those of ``rows`` whose repository the dataset's mirror holds (or,
    with ``images``, that run on their own image) and that ``results`` has no record of yet
    (each record written as its row ends): the rows buildable, and the others counted by
    repository."""
    builder = data.builder(store, wheelhouse=wheelhouse, max_workers=max_workers, images=images)
    source = RepoSource(mirror=builder.options.repo_mirror)
    mirrored: list[Instance] = []
    not_mirrored: Counter[str] = Counter()
    for row in rows:
        if images and row.image:
            mirrored.append(row)
            continue
        try:
            source.locate(row.repo)
            mirrored.append(row)
        except RepoError:
            not_mirrored[row.repo] += 1

    def done(row: Instance) -> bool:
        """A record stands for the layers it was made on: a row whose environment a build would
        make now (another base, spec or recipe; a failed build) is built and validated again."""
        stored = builder.stored_layers(row)
        return stored is not None and (results.get(row.instance_id) or {}).get("layers") == stored

    todo = [r for r in mirrored if not done(r)]
    progress(f"{len(rows)} rows, {len(mirrored)} mirrored, {len(todo)} to build and validate")
    logs = results.root / "logs"

    def build_then_validate(instance: Instance) -> None:
        start = time.monotonic()
        built = builder.build_one(instance)
        built_at = time.monotonic()
        prepared = builder.prepare_validation(instance, built)
        validation = validate_one(prepared, logs, runs=1, timeout=timeout)
        if interrupted():  # Ctrl-C closed its sandboxes: no verdict, and a re-run does it again
            return
        results.put(
            instance.instance_id,
            {
                "repo": instance.repo,
                "build": built.status,
                "build_s": built.seconds if built.status == "built" else None,
                "build_error": _first_line(built.error) if built.status == "error" else "",
                "layers": built.layers,
                "outcome": validation.outcome,
                "reason": validation.reason,
                "cause": failure_cause(
                    logs / instance.instance_id / "gold-1.log", validation.tests.get("failing", [])
                )
                if validation.outcome == "gold_fails"
                else "",
                "tests": validation.tests,
                "validate_s": round(time.monotonic() - built_at, 1),
                "wall_s": round(time.monotonic() - start, 1),
            },
        )
        progress(f"{instance.instance_id}: {built.status}, {validation.outcome}")

    interruptible_map(build_then_validate, todo, max_workers)
    return mirrored, not_mirrored


def rows_report(rows: list[Instance], results: RowResults, store: LayerStore) -> dict:
    """The figures of the module docstring for ``rows``, from their records on disk."""
    reasons: dict[str, str] = {}
    per_repo: dict[str, Counter] = defaultdict(Counter)
    build_s: list[float] = []
    validate_s: list[float] = []
    built_ids: list[str] = []
    for row in rows:
        repo = per_repo[row.repo]
        repo["tried"] += 1
        record = results.get(row.instance_id)
        if record is None:
            reasons[row.instance_id] = "not run (interrupted)"
            continue
        if record["build"] != "error":
            repo["built"] += 1
            built_ids.append(row.instance_id)
            if record["build_s"] is not None:
                build_s.append(record["build_s"])
        # records written before validate_s: the rest of the row's wall time
        validate_s.append(record.get("validate_s", record["wall_s"] - (record["build_s"] or 0)))
        if record["outcome"] == "valid":
            repo["validated"] += 1
        elif record["build"] == "error":
            reasons[row.instance_id] = f"build error: {record['build_error']}"
        else:
            tests = record.get("tests", {})
            cause = record.get("cause") or failure_cause(
                results.root / "logs" / row.instance_id / "gold-1.log", tests.get("failing", [])
            )
            why = f"{record['outcome']}: {record['reason']}{_names(tests)}"
            reasons[row.instance_id] = f"{why} ({cause})" if cause else why
    tried = len(rows)
    built = sum(c["built"] for c in per_repo.values())
    validated = sum(c["validated"] for c in per_repo.values())
    usage = disk_usage(store, built_ids)
    above = disk_usage(store, built_ids, kinds={"python", "env", "instance", "image"})
    return {
        "tried": tried,
        "built": built,
        "validated": validated,
        "validated_ratio": round(validated / tried, 3) if tried else None,
        "build_s_p50": round(statistics.median(build_s), 1) if build_s else None,
        "build_minutes_total": round(sum(build_s) / 60, 1),
        "validate_minutes_total": round(sum(validate_s) / 60, 1),
        "store_mb_per_instance": _rounded(usage.mb_per_instance),
        "store_mb_total": round(usage.disk_bytes / 1e6, 1),
        "above_base_mb_per_instance": _rounded(above.mb_per_instance),
        "store_mb_per_instance_as_trees": round(usage.apparent_bytes / 1e6 / built, 1)
        if built
        else None,
        "files_deduplicated_pct": _rounded(usage.files_deduplicated_pct),
        "docker_image_mb": DOCKER_IMAGE_MB,
        "minisandbox_mb": MINISANDBOX_MB,
        "repos": {
            repo: {k: c[k] for k in ("tried", "built", "validated")}
            for repo, c in sorted(per_repo.items())
        },
        "failures": dict(sorted(reasons.items())),
    }


def _names(tests: dict[str, list[str]], shown: int = 3) -> str:
    """The tests a validation singled out, for people: the first few, then how many more."""
    names = next((found for found in tests.values() if found), [])
    if not names:
        return ""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ": " + ", ".join(names[:shown]) + more


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
