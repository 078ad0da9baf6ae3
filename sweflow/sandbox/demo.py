"""The sandbox demo behind ``sweflow demo``, a first look at the sandbox.

It walks through what a rollout does: open a sandbox on a Debian base layer, set up a git repo,
edit it like an agent would, take the diff, let a runaway command time out, and close.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from sweflow.sandbox import SandboxSpec, open_sandbox

STEPS: list[tuple[str, str]] = [
    ("python", "python3 -c 'import sys; print(sys.version.split()[0])'"),
    (
        "repo",
        "git init -q -b main . && printf 'def add(a, b):\\n    return a - b\\n' > calc.py"
        " && git add . && git -c user.name=demo -c user.email=demo@x commit -qm base"
        " && git log --oneline",
    ),
    (
        "agent edit",
        "sed -i 's/a - b/a + b/' calc.py && python3 -c 'import calc; print(calc.add(2, 3))'",
    ),
    (
        "isolation",
        "hostname; ls /proc | grep -c '^[0-9]'; python3 -c \"import socket; "
        "socket.create_connection(('127.0.0.1', 9), timeout=1)\" 2>&1 | tail -1",
    ),
]


def run_demo(base: Path, report: Callable[[str, str, float], None]) -> str:
    """Run the demo steps in one sandbox, passing each to ``report``; returns the final diff."""
    start = time.perf_counter()
    with open_sandbox(SandboxSpec(layers=[base], workdir="/testbed")) as sandbox:
        report("open", f"sandbox on {base.name}", time.perf_counter() - start)
        for name, cmd in STEPS:
            result = sandbox.exec(cmd, timeout=60)
            report(name, result.output.strip(), result.duration_s)
        result = sandbox.exec("sleep 600", timeout=1)
        report(
            "timeout", f"timed_out={result.timed_out} exit={result.exit_code}", result.duration_s
        )
        start = time.perf_counter()
        patch = sandbox.diff()
        report("diff", f"{len(patch.splitlines())} lines", time.perf_counter() - start)
        start = time.perf_counter()
    report("close", "nothing left behind", time.perf_counter() - start)
    return patch
