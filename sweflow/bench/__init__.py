"""Benchmarks behind `sweflow bench ...` and benchmarks/.

Each runs with no option but ``--json`` and ``--quick``, installed or from a checkout: the data
it defaults to ships with the package (sweflow/data: ``DEMO``, ``ENVCACHE``, the SWE-bench
sample of bench.swebench; data/demo and tests/data/* of a checkout link to them) and what it
builds lives in the cache (``bench_root``). Bigger sets (data/learn) are named by option or plan.
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

from sweflow.errors import SweflowError
from sweflow.paths import cache_root

DATA = Path(str(files("sweflow.data")))  # package data: in the wheel as in the checkout
DEMO = DATA / "demo" / "tasks.jsonl"  # 36 synthetic tasks from parse, cachetools, toolz (2.1 MB)
ENVCACHE = DATA / "envcache" / "instances.jsonl"  # SWE-bench rows with their bundle (0.9 MB)
DEMO_HELDOUT = ["pypi/toolz"]  # the repository configs/demo.yaml holds out (split.eval)
WHEELHOUSE = Path.home() / ".cache" / "sweflow-test" / "wheelhouse"  # scripts/prefetch.py


class BenchError(SweflowError):
    """A benchmark could not measure what it set out to (its setup or a sample failed)."""


def bench_root(name: str) -> Path:
    """Where benchmark ``name`` keeps what it builds (layer stores), reused by later runs."""
    return cache_root() / "bench" / name


def wheelhouse() -> Path | None:
    """The test wheelhouse when scripts/prefetch.py made one (offline installs), else None."""
    return WHEELHOUSE if WHEELHOUSE.is_dir() else None


def heldout_repos(dataset: Path) -> list[str]:
    """The projects held out of training: the split.json beside ``dataset`` (the learning
    set's), else the demo's toolz."""
    split = dataset.parent / "split.json"
    return json.loads(split.read_text())["eval"] if split.is_file() else DEMO_HELDOUT
