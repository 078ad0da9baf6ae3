"""Benchmarks behind `sweflow bench ...` and benchmarks/."""

from sweflow.errors import SweflowError


class BenchError(SweflowError):
    """A benchmark could not measure what it set out to (its setup or a sample failed)."""
