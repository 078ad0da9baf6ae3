"""A model server's process group goes with the process that started it, however that one ends:
a trainer the kernel killed for memory left its vLLM server serving (and its shared memory in
/dev/shm) until someone found it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from sweflow.sandbox.procs import group_members
from sweflow.serving.reaper import reap_with_starter, stop_reaper

# A server stand-in: a group leader that maps a /dev/shm segment, with a worker of its own
GROUP = """
import mmap, subprocess, sys, time
with open(sys.argv[1], "w+b") as f:
    f.truncate(4096)
    segment = mmap.mmap(f.fileno(), 4096)
subprocess.Popen(["sleep", "300"])
print("ready", flush=True)
time.sleep(300)
"""

STARTER = """
import subprocess, sys, time
from sweflow.serving.reaper import reap_with_starter
proc = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], start_new_session=True,
                        stdout=subprocess.PIPE, text=True)
proc.stdout.readline()
reap_with_starter(proc.pid)
print(proc.pid, flush=True)
time.sleep(300)
"""


def _until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_a_starter_killed_outright_takes_its_server_group_and_shared_memory_with_it():
    segment = Path(f"/dev/shm/sweflow-test-{uuid.uuid4().hex}")
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, GROUP, str(segment)], stdout=subprocess.PIPE, text=True
    )
    try:
        group = int(starter.stdout.readline())  # type: ignore[union-attr]
        time.sleep(0.5)  # the reaper is watching
        assert len(group_members(group)) == 2 and segment.exists()
        starter.kill()  # SIGKILL: no finally, no atexit
        starter.wait()
        assert _until(lambda: not group_members(group)), group_members(group)
        # the watcher unlinks the segment just after the kill: wait for it, not only the group
        assert _until(lambda: not segment.exists())
    finally:
        starter.kill()
        starter.wait()
        for pid in group_members(group):
            os.kill(pid, signal.SIGKILL)
        segment.unlink(missing_ok=True)


def test_the_reaper_leaves_a_running_group_alone_and_exits_when_it_is_stopped():
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    reaper = reap_with_starter(proc.pid)
    try:
        time.sleep(1)
        assert proc.poll() is None and reaper.poll() is None
        os.killpg(proc.pid, signal.SIGTERM)  # the server's normal stop
        proc.wait()
        assert reaper.wait(timeout=5) == 0
    finally:
        proc.kill()
        proc.wait()
        stop_reaper(reaper)
