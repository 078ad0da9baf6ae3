"""A process group that ends when the process that started it ends, however that one ends.

A model server runs in a session of its own (its engine workers are one process group, stopped
together). When the process that started it is killed outright (SIGKILL, the kernel's OOM
killer) no ``finally`` runs: the server kept serving, holding the model's memory, and its
shared-memory segments stayed in /dev/shm. ``PR_SET_PDEATHSIG`` does not fit: it fires when the
*thread* that started the child ends, and a pipeline's shared server outlives the worker thread
that started it. So a small watcher process waits on both pids (pidfds: no polling, no reused
pid), and when the starter goes first, kills the group and unlinks the segments its members had
mapped; when the group's leader goes first (a normal stop), it just exits.

:func:`main` (``STARTER_PID GROUP_PID``) is the watcher.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

from sweflow.sandbox.procs import group_members, kill_group, shared_memory_of


def reap_with_starter(group: int) -> subprocess.Popen:
    """Start the watcher of process group ``group`` (led by a child of this process, in a
    session of its own) for this process; :func:`stop_reaper` it after stopping the group."""
    code = f"from {__name__} import main; main()"  # not -m: the package imports this module
    argv = [sys.executable, "-c", code, str(os.getpid()), str(group)]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)


def stop_reaper(reaper: subprocess.Popen) -> None:
    """Collect the watcher once the group has stopped (it exits by itself then)."""
    try:
        reaper.wait(timeout=5)
    except subprocess.TimeoutExpired:
        reaper.kill()
        reaper.wait()


def watch(starter: int, group: int) -> bool:
    """Block until ``starter`` or ``group``'s leader ends; whether the group was reaped."""
    try:
        leader = os.pidfd_open(group)
    except ProcessLookupError:  # stopped already
        return False
    try:
        starter_fd = os.pidfd_open(starter)
    except ProcessLookupError:  # gone already
        starter_fd = None
    if starter_fd is not None and starter_fd not in select.select([starter_fd, leader], [], [])[0]:
        return False  # the group was stopped first
    members = group_members(group)
    if not members:
        return False
    kill_group(group, shared_memory_of(members))
    return True


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the starter is its to handle
    watch(int(sys.argv[1]), int(sys.argv[2]))
