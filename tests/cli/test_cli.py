"""The `sweflow` command line, run in-process with typer's runner on a real rootfs (scratch
sandboxes on the host's files where the test is about the command line, not the sandbox)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweflow.cli import app

runner = CliRunner()


def test_sandbox_run_passes_output_and_exit_code() -> None:
    result = runner.invoke(
        app, ["sandbox", "run", "-b", "scratch", "--base", "host", "echo hi; exit 7"]
    )
    assert result.exit_code == 7
    assert result.stdout == "hi\n"


def test_bad_base_is_a_clear_error() -> None:
    result = runner.invoke(app, ["sandbox", "run", "--base", "debian:potato", "true"])
    assert result.exit_code == 2
    assert "potato" in result.stderr and "Traceback" not in result.stderr


def test_missing_layer_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    result = runner.invoke(
        app, ["sandbox", "run", "-b", "scratch", "--base", "host", "--layer", str(missing), "true"]
    )
    assert result.exit_code == 2
    assert str(missing) in result.stderr


def test_sandbox_gc_prints_a_table() -> None:
    # scratch: the local backend's gc would also take the cgroups of sandboxes kept in another
    # SWEFLOW_STATE_DIR (another user's, on a shared machine); tests/sandbox/test_sandbox_gc.py
    # has it
    result = runner.invoke(app, ["sandbox", "gc", "-b", "scratch"])
    assert result.exit_code == 0, result.output
    assert "directories removed" in result.stdout


def test_bench_sandbox_quick_json(bookworm_rootfs: Path) -> None:
    result = runner.invoke(
        app,
        [
            "bench",
            "sandbox",
            "--json",
            "--quick",
            "--backends",
            "local",
            "--base",
            str(bookworm_rootfs),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    local = report["local"]
    for key in ("cycle_p50_ms", "cycle_p95_ms", "idle_rss_mb"):
        assert local[key] > 0
    assert isinstance(local["exec_overhead_p50_ms"], float)
    assert local["concurrent_open"] == 20
    assert report["leaks"] == 0


def test_demo_runs_and_shows_the_diff(bookworm_rootfs: Path) -> None:
    result = runner.invoke(app, ["demo", "--base", str(bookworm_rootfs)])
    assert result.exit_code == 0, result.output
    assert "+    return a + b" in result.stdout
    assert "timed_out=True" in result.stdout


def test_sandbox_shell_is_interactive(bookworm_rootfs: Path) -> None:
    """`sandbox shell` on a real pseudo-terminal: commands typed in run inside, then it is gone."""
    if shutil.which("script") is None:
        pytest.skip("util-linux `script` is not installed")
    cli = f"{sys.executable} -m sweflow.cli sandbox shell --base {bookworm_rootfs} -w /testbed"
    typed = "echo inside-$((40+2)) $(hostname) $(pwd); exit 5\n"
    argv = ["script", "-qec", cli, "/dev/null"]
    result = subprocess.run(argv, input=typed, capture_output=True, text=True, timeout=60)
    assert "inside-42 sandbox /testbed" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 5
