"""CPU quota and terminal isolation of the local backend."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sweflow.sandbox import Limits, SandboxSpec, open_sandbox

BURN = (
    'python3 -c "import time, resource\n'
    "end = time.time() + 2\n"
    "while time.time() < end: pass\n"
    'print(resource.getrusage(resource.RUSAGE_SELF).ru_utime)"'
)


def test_cpu_quota_caps_a_busy_loop(bookworm_rootfs: Path) -> None:
    with open_sandbox(SandboxSpec(layers=[bookworm_rootfs], limits=Limits(cpus=0.25))) as sb:
        capped = float(sb.exec(BURN, timeout=30).output)
    # 2 s of wall time at a quarter of a core is ~0.5 s of CPU; uncapped it is ~2 s
    assert capped < 1.0


def test_sandbox_has_no_controlling_terminal(bookworm_rootfs: Path) -> None:
    """Even when its owner runs on a terminal, nothing inside can reach it (no TIOCSTI)."""
    if shutil.which("script") is None:
        pytest.skip("util-linux `script` is not installed")
    code = (
        "from pathlib import Path; from sweflow.sandbox import SandboxSpec, open_sandbox\n"
        f"sb = open_sandbox(SandboxSpec(layers=[Path({str(bookworm_rootfs)!r})]))\n"
        "print('tty-check', sb.exec('exec 3<>/dev/tty && echo OPENED || echo NO-TTY').output)\n"
        "sb.close()\n"
    )
    cmd = f"{sys.executable} -c {subprocess.list2cmdline([code])}"
    out = subprocess.run(
        ["script", "-qec", cmd, "/dev/null"], capture_output=True, text=True, timeout=60
    )
    assert "tty-check" in out.stdout, out.stdout + out.stderr
    assert "NO-TTY" in out.stdout and "OPENED" not in out.stdout
