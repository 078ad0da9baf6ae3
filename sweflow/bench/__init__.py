"""Benchmarks behind `sweflow bench ...` and benchmarks/.

Each runs from a fresh checkout with no option but ``--json`` and ``--quick``: its data is
committed (``DEMO``, ``ENVCACHE``) and what it builds lives in the cache (``bench_root``).
"""

from __future__ import annotations

from pathlib import Path

from sweflow.errors import SweflowError
from sweflow.paths import cache_root

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "data" / "demo" / "tasks.jsonl"  # 36 synthetic tasks from parse, cachetools, toolz
ENVCACHE = REPO / "tests" / "data" / "envcache" / "instances.jsonl"  # SWE-bench rows
WHEELHOUSE = Path.home() / ".cache" / "sweflow-test" / "wheelhouse"  # scripts/prefetch.py


class BenchError(SweflowError):
    """A benchmark could not measure what it set out to (its setup or a sample failed)."""


def bench_root(name: str) -> Path:
    """Where benchmark ``name`` keeps what it builds (layer stores), reused by later runs."""
    return cache_root() / "bench" / name


def wheelhouse() -> Path | None:
    """The test wheelhouse when scripts/prefetch.py made one (offline installs), else None."""
    return WHEELHOUSE if WHEELHOUSE.is_dir() else None
