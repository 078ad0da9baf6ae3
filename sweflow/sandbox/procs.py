"""Reading and stopping host processes through /proc, shared by the backends and launchers.

A pid alone names a process only until it exits and the number is reused, so everything that
remembers a process keeps its start time too (``/proc/<pid>/stat`` field 22, in clock ticks
since boot) and checks both.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterable, Iterator

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def now_ticks() -> int:
    """The current time in the unit of /proc/<pid>/stat's start time (ticks since boot)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * TICKS_PER_S)


def stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat from the third (state) on, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    try:
        return raw[raw.rindex(b")") + 2 :].decode().split()
    except ValueError:
        return None


def start_ticks(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None  # field 22: starttime


def running(pid: int, started: int | None = None) -> bool:
    """Whether ``pid`` is a live (not zombie) process, and the same one if ``started`` is given."""
    fields = stat_fields(pid)
    if not fields or fields[0] in ("Z", "X"):
        return False
    return started is None or int(fields[19]) == started


def _processes() -> Iterator[tuple[int, list[str]]]:
    """(pid, :func:`stat_fields`) of every process, read from /proc."""
    for name in os.listdir("/proc"):
        fields = stat_fields(int(name)) if name.isdigit() else None
        if fields:
            yield int(name), fields


def children_of(parent: int) -> list[tuple[int, int]]:
    """(pid, start ticks) of ``parent``'s live children, found by scanning /proc."""
    return [(pid, int(fields[19])) for pid, fields in _processes() if int(fields[1]) == parent]


def descendants_of(ancestor: int) -> list[tuple[int, int]]:
    """(pid, start ticks) of ``ancestor``'s live descendants, found by scanning /proc. An orphan
    is one only where ``ancestor`` is a subreaper (PR_SET_CHILD_SUBREAPER): it is adopted there."""
    children: dict[int, list[tuple[int, list[str]]]] = {}
    for pid, fields in _processes():
        children.setdefault(int(fields[1]), []).append((pid, fields))
    found, todo = [], [ancestor]
    while todo:
        for pid, fields in children.get(todo.pop(), []):
            todo.append(pid)
            if fields[0] not in ("Z", "X"):
                found.append((pid, int(fields[19])))
    return found


def group_members(pgid: int) -> list[int]:
    """The live processes of process group ``pgid``, found by scanning /proc."""
    return [
        pid
        for pid, fields in _processes()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X")
    ]


def shared_memory_of(pids: list[int]) -> set[str]:
    """The /dev/shm files that processes ``pids`` have mapped (POSIX shared memory they made:
    the kernel keeps a segment until it is unlinked, so a killed process leaves it behind)."""
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    fields = line.split(maxsplit=5)  # address perms offset dev inode [path]
                    path = fields[5].strip() if len(fields) == 6 else ""
                    if path.startswith("/dev/shm/") and not path.endswith(" (deleted)"):
                        found.add(path)
        except OSError:
            continue
    return found


def kill_group(pgid: int, segments: Iterable[str]) -> None:
    """SIGKILL process group ``pgid`` and unlink the /dev/shm ``segments`` its members had
    mapped (:func:`shared_memory_of`, read while they ran: a killed process leaves them)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    for segment in segments:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(segment)


def stop_pid(pid: int, grace_s: float = 30.0, started: int | None = None) -> None:
    """SIGTERM a process we started, wait up to ``grace_s`` for it to exit, then SIGKILL it.

    With ``started``, a pid that now names another process is left alone.
    """
    if not running(pid, started):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not running(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def owner_id() -> str:
    """This process as the owner of what it leaves outside itself (containers, cloud
    sandboxes): host, pid and the pid's start time."""
    return f"{socket.gethostname()}:{os.getpid()}:{start_ticks(os.getpid())}"


def owner_is_gone(owner: str) -> bool:
    """Whether ``owner`` (an :func:`owner_id`) is a process of this host that has exited; a live
    owner or another host's is not gone, an unreadable record is (nobody can claim it)."""
    parts = owner.split(":")
    if len(parts) == 3 and parts[0] != socket.gethostname():
        return False
    alive = len(parts) == 3 and parts[1].isdigit() and str(start_ticks(int(parts[1]))) == parts[2]
    return not alive
