"""Fault injection for rehearsals: a file `<run_dir>/.faults/<stage>` fails that stage once.

A test (or an operator rehearsing recovery) creates the file; the stage's next attempt removes it
and fails like a crashed process would, so ``prefect flow-run retry`` then finds the earlier
stages Cached and re-runs this one. No file, no effect.
"""

from __future__ import annotations

from pathlib import Path

from sweflow.errors import InfrastructureError


class InjectedFault(InfrastructureError):
    """An infrastructure failure on request: retry policies treat it as one."""


def maybe_fail(stage: str, run_dir: Path) -> None:
    flag = Path(run_dir) / ".faults" / stage
    try:
        flag.unlink()
    except FileNotFoundError:
        return
    raise InjectedFault(f"{stage}: injected fault ({flag} was present)")
