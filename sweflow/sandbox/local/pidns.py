"""Finding and killing a local sandbox's processes from the host, by pid namespace and start time.

A timed-out command must die with everything it started (daemons that re-parented to init
included) while the shell and earlier background jobs live on: "started since the command began"
is exactly that set.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

from sweflow.sandbox.procs import running, start_ticks, stat_fields

_KILL_ROUNDS = 200


def members(init_pid: int) -> Iterator[int]:
    """Live processes in the pid namespace whose init is ``init_pid`` (host pids)."""
    try:
        ns = os.readlink(f"/proc/{init_pid}/ns/pid")
    except OSError:
        return
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/pid") == ns:
                yield int(name)
        except OSError:
            continue


def host_pid_of(init_pid: int, ns_pid: int) -> int:
    """Host pid of the process known as ``ns_pid`` inside the namespace (0 if it is gone)."""
    for pid in members(init_pid):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("NSpid:"):
                        if int(line.split()[-1]) == ns_pid:
                            return pid
                        break
        except OSError:
            continue
    return 0


def started_since(init_pid: int, tick: int) -> set[int]:
    """Live descendants of ``init_pid`` started at or after ``tick`` (host pids).

    Walks the ``children`` lists down from init (orphans are re-parented to it), which costs a
    few reads for a sandbox's handful of processes where :func:`members` scans all of /proc.
    """
    found: set[int] = set()
    stack = [init_pid]
    while stack:
        pid = stack.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except FileNotFoundError:  # a kernel without CONFIG_PROC_CHILDREN: scan /proc
                if pid != init_pid:
                    continue
                ours = (p for p in members(init_pid) if p != init_pid and running(p))
                return {p for p in ours if (start_ticks(p) or 0) >= tick}
            except OSError:
                continue
            for kid in kids:
                stack.append(kid)
                fields = stat_fields(kid)
                if fields and fields[0] not in ("Z", "X") and int(fields[19]) >= tick:
                    found.add(kid)
    return found


def kill_started_since(init_pid: int, tick: int, keep: int, spare: set[int] = frozenset()) -> int:
    """SIGKILL every process of the sandbox started at or after ``tick`` but init and ``keep``.

    ``spare`` are processes that were already running when the command began but started in the
    same clock tick (an earlier command's background job): they live on. Repeats until none is
    left, so that a process forking in a loop cannot outrun it. Returns how many were killed.
    """
    killed = 0
    for _ in range(_KILL_ROUNDS):
        victims = []
        for pid in members(init_pid):
            if pid in (init_pid, keep) or pid in spare:
                continue
            fields = stat_fields(pid)
            if fields and fields[0] != "Z" and int(fields[19]) >= tick:
                victims.append(pid)
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed
