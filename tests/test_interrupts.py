"""Ctrl-C during a real ``sweflow eval`` or ``collect``: it stops within about a second and
leaves nothing.

The predictions add a root conftest.py that sleeps for two minutes, so every eval script is busy
in its sandbox when SIGINT comes: before it stopped only when the script ended, and each
interrupted run left sandbox folders and cgroups behind.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from sweflow.sandbox.local.leaks import leftovers

SLEEPY_PATCH = """diff --git a/conftest.py b/conftest.py
new file mode 100644
--- /dev/null
+++ b/conftest.py
@@ -0,0 +1,2 @@
+import time
+time.sleep(120)
"""


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _sandbox_dirs() -> set[str]:
    return set(leftovers()["dirs"])


@pytest.mark.parametrize("moment", ["loading", "sandbox opening", "test script running"])
def test_ctrl_c_during_eval_stops_at_once_and_leaves_nothing(grading_data, tmp_path, moment):
    _interrupt(_sleepy_eval(grading_data, tmp_path, rows=3), tmp_path, moment)


def test_sigterm_during_eval_winds_down_as_ctrl_c_does(grading_data, tmp_path):
    """A process manager's stop (Prefect cancelling, Slurm, kill) closes every sandbox too."""
    argv = _sleepy_eval(grading_data, tmp_path, rows=2)
    code = _interrupt(argv, tmp_path, "test script running", signal.SIGTERM)
    assert code == 128 + signal.SIGTERM


def test_ctrl_c_during_collect_stops_at_once_and_leaves_nothing(grading_data, tmp_path):
    """Agent runs are asyncio tasks whose sandbox commands and gradings run in threads."""
    argv = ["collect", "-d", str(grading_data.dataset), "--store", str(grading_data.store),
            "--teacher", "replay", "--tool-mode", "text", "-o", str(tmp_path / "out"), "-c", "3",
            "-k", "2"]  # fmt: skip
    _interrupt(argv, tmp_path, "sandbox opening")


def _sleepy_eval(grading_data, tmp_path, rows: int) -> list[str]:
    """``eval`` arguments grading the first ``rows`` instances with a patch whose tests sleep."""
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(
        json.dumps({"instance_id": i.instance_id, "model_patch": SLEEPY_PATCH,
                    "model_name_or_path": "m"}) + "\n"
        for i in grading_data.instances[:rows]
    ))  # fmt: skip
    return ["eval", "-d", str(grading_data.dataset), "-p", str(preds), "--run-id", "r", "-j", "2",
            "--store", str(grading_data.store), "--report-dir", str(tmp_path)]  # fmt: skip


def _interrupt(
    command: list[str], tmp_path, moment: str, sig: signal.Signals = signal.SIGINT
) -> int:
    """Run ``sweflow COMMAND``, signal it at ``moment``, check it stops at once, leaving nothing;
    returns its exit status."""
    before = leftovers()
    argv = [sys.executable, "-m", "sweflow.cli", *command]
    # A shell starts background jobs with SIGINT ignored (CI runs us so): the child gets the
    # default disposition, as a command typed at a terminal has.
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=_default_sigint)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        if moment != "loading":
            while not (_sandbox_dirs() - set(before["dirs"])):  # grading has opened one
                assert proc.poll() is None and time.monotonic() < deadline, "no sandbox opened"
                time.sleep(0.02)
        if moment == "test script running":
            time.sleep(3)  # inside conftest.py's sleep
        else:
            time.sleep(0.2)
        assert proc.poll() is None
        sent = time.monotonic()
        proc.send_signal(sig)
        code = proc.wait(timeout=30)
        stopped_after = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = proc.stdout.read().decode(errors="replace")  # type: ignore[union-attr]
    print(f"{moment}: stopped {stopped_after:.2f} s after {sig.name}, exit {code}")
    assert code != 0, output
    assert "Traceback" not in output, output
    assert stopped_after < 5, output  # the sleeping test scripts had two minutes to go
    after = leftovers()
    for kind in ("dirs", "mounts", "processes", "cgroups"):
        assert set(after[kind]) <= set(before[kind]), (kind, after[kind])
    return code
