"""The one progress callback a long task reports through, whoever watches it: a line printer,
a progress bar, a Prefect artifact."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    """Told ``what`` a task is at and, where it counts, that ``done`` of ``total`` are done
    (0 of 0 where it does not): a printer shows ``what``, a bar also moves to ``done``."""

    def __call__(self, what: str, done: int = 0, total: int = 0) -> None: ...


def no_progress(what: str, done: int = 0, total: int = 0) -> None:
    """The progress of a task nobody watches."""
