"""Every sandbox this process has open, so that Ctrl-C can close them all within a second.

A worker thread blocked in ``exec`` (a test suite that runs for minutes) would keep the process
alive after Ctrl-C until its command ended, and a second Ctrl-C would leave its directory and
cgroups behind. :func:`interruptible_map` runs work items in threads; on KeyboardInterrupt it
drops the items not started, refuses new sandboxes, closes the open ones (their running
commands fail at once: ``close`` is safe from another thread) and re-raises once every worker
has returned, so what the workers write on the way out (logs, error records) is complete.
:func:`run_interruptible` does the same for an asyncio job (agent runs) when Ctrl-C cancels it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from sweflow.sandbox.base import Sandbox

T = TypeVar("T")
R = TypeVar("R")

# Held strongly until closed: a sandbox whose opener was cancelled (Ctrl-C while its thread
# opened it) has no other reference, and a weak one let it be collected unclosed, leaving its
# state directory behind (seen under load in tests/cli/test_interrupts.py)
_open: set[Sandbox] = set()
_lock = threading.Lock()
_interrupted = threading.Event()


def refuse_if_interrupted() -> None:
    """Raise SandboxStartError while an interrupt is closing this process's sandboxes."""
    if _interrupted.is_set():
        from sweflow.sandbox.errors import SandboxStartError

        raise SandboxStartError("interrupted: no new sandbox is opened")


def interrupted() -> bool:
    """Whether an interrupt is winding this process's work down (work elsewhere, such as a
    cluster's tasks, should be called back)."""
    return _interrupted.is_set()


def track(sandbox: Sandbox) -> Sandbox:
    """Remember an opened sandbox until it is closed; one opened during an interrupt is closed
    at once."""
    with _lock:
        _forget_closed()
        _open.add(sandbox)
    if _interrupted.is_set():
        sandbox.close()
        refuse_if_interrupted()
    return sandbox


def close_all() -> int:
    """Close every sandbox this process has open; returns how many were."""
    with _lock:
        _forget_closed()
        sandboxes = list(_open)
        _open.clear()
    for sandbox in sandboxes:
        sandbox.close()
    return len(sandboxes)


def _forget_closed() -> None:
    """Drop the sandboxes closed since; under _lock."""
    _open.difference_update([s for s in _open if s.closed])


def interrupt() -> None:
    """Refuse new sandboxes and close the open ones (until :func:`resume`)."""
    _interrupted.set()
    close_all()


def resume() -> None:
    """Sandboxes may open again: the interrupted work has wound down."""
    _interrupted.clear()


def interruptible_map(fn: Callable[[T], R], items: Iterable[T], max_workers: int) -> list[R]:
    """``list(ThreadPoolExecutor(max_workers).map(fn, items))`` that Ctrl-C stops at once."""
    pool = ThreadPoolExecutor(max_workers=max_workers)
    try:
        return list(pool.map(fn, items))
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        interrupt()
        raise
    finally:
        pool.shutdown(wait=True)
        resume()


def run_interruptible(main: Coroutine[Any, Any, R]) -> R:
    """``asyncio.run(main)`` that Ctrl-C stops at once: asyncio cancels the tasks, but the threads
    they started (a sandbox command, a grading) would hold the exit until they end."""

    async def guarded() -> R:
        try:
            return await main
        except asyncio.CancelledError:
            interrupt()
            raise

    try:
        return asyncio.run(guarded())
    finally:
        resume()
