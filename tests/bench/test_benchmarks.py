"""The benchmarks run as benchmarks/README.md says to run them.

Every script in benchmarks/ is ``sweflow bench NAME --json`` and answers ``--help`` when run as
``python benchmarks/NAME.py --help`` from the repository root in a fresh process (before, most
ignored ``--help`` and started measuring, and ``envprep.py`` died with a circular import: issue
29). The slow test runs every ``sweflow bench NAME --json --quick`` that finishes in a few minutes
on 2 cores and checks it prints one JSON object with the top-level keys the README documents.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from conftest import cli_commands

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "benchmarks").glob("*.py"))
# a script named like its benchmark would shadow a dependency (swebench, ray) or say less
RENAMED = {
    "swebench_rows": "swebench",
    "ray_cluster": "ray",
    "prefect_pipeline": "pipeline",
    "dataset_formats": "datasets",
}
# quick runs longer than a few minutes on 2 cores (benchmarks/README.md has the times)
NOT_QUICK = {
    "sft": "4 trainings of SmolLM2-135M (torchtune and TRL, twice each): over 20 min",
    "rl": "4 GRPO steps of SmolLM2-135M, 4 episodes each: over 20 min",
    "learn": "golden trajectories, SFT, GRPO, then vLLM serving three models in turn: hours",
    "tts": "vLLM's start on the CPU, 12 SmolLM2 runs, their gradings and selections: ~15 min",
}


def _bench_names() -> set[str]:
    return {path[1] for path, _ in cli_commands() if path[0] == "bench"}


def _documented_keys() -> dict[str, list[str]]:
    """{benchmark: its documented top-level JSON keys} from benchmarks/README.md's table."""
    keys = {}
    for line in (REPO / "benchmarks" / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and (script := re.fullmatch(r"`(\w+)\.py`", cells[0])):
            name = RENAMED.get(script[1], script[1])
            keys[name] = re.findall(r"`(\w+)`", cells[3])
    return keys


def test_one_script_per_benchmark_and_each_documented() -> None:
    scripts = {RENAMED.get(p.stem, p.stem) for p in SCRIPTS}
    assert scripts == _bench_names()
    documented = _documented_keys()
    assert set(documented) == scripts and all(documented.values()), documented


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_every_script_answers_help_run_as_the_readme_says(script: Path) -> None:
    name = RENAMED.get(script.stem, script.stem)
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script.name}", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Usage: sweflow bench {name} [OPTIONS]" in done.stdout, done.stdout
    assert "--quick" in done.stdout


QUICK = sorted(_bench_names() - set(NOT_QUICK))
# Each quick run's minutes on 2 cores, two at a time (the CI deadline's estimate; 1 unless named).
QUICK_MINUTES = {
    "pipeline": 6,
    "serving": 5,
    "datasets": 4,
    "envprep": 2,
    "swebench": 2,
    "ray": 2,
    "synth": 1.5,
}
QUICK_AT_ONCE = 2  # they wait on builds, sandboxes and servers about half the time (2 cores)
QUICK_TIMEOUT_S = 900


class QuickRuns:
    """Every quick run as its own process, ``QUICK_AT_ONCE`` at a time, in QUICK's order: the
    tests ask for their results in that order, and the next run starts as one ends. Each runs
    in its own process group, stopped with the session (Ctrl-C included)."""

    def __init__(self, names: list[str]) -> None:
        self.waiting = list(names)
        self.running: dict[str, tuple[subprocess.Popen, IO[bytes], IO[bytes], float]] = {}
        self.done: dict[str, tuple[int, str, str]] = {}

    def result(self, name: str) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of ``sweflow bench NAME --json --quick``."""
        while name not in self.done:
            self._start()
            for other, (proc, out, err, began) in list(self.running.items()):
                over = time.monotonic() - began > QUICK_TIMEOUT_S
                if proc.poll() is None and not over:
                    continue
                if proc.poll() is None:
                    _stop(proc)
                out.seek(0), err.seek(0)
                stderr = err.read().decode(errors="replace")
                if over:
                    stderr += f"\n[test] stopped after {QUICK_TIMEOUT_S} s"
                self.done[other] = (proc.returncode, out.read().decode(errors="replace"), stderr)
                out.close(), err.close()
                del self.running[other]
            time.sleep(0.2)
        self._start()
        return self.done[name]

    def _start(self) -> None:
        while self.waiting and len(self.running) < QUICK_AT_ONCE:
            name = self.waiting.pop(0)
            out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
            argv = [sys.executable, "-m", "sweflow.cli", "bench", name, "--json", "--quick"]
            proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=err, start_new_session=True)
            self.running[name] = (proc, out, err, time.monotonic())

    def stop(self) -> None:
        for proc, out, err, _ in self.running.values():
            _stop(proc)
            out.close(), err.close()


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the run's process group (its servers and sandboxes), SIGKILL if it lingers."""
    for sig, wait_s in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)
            return


@pytest.fixture(scope="module")
def quick_runs(request: pytest.FixtureRequest) -> Iterator[QuickRuns]:
    """The quick runs of the tests this session selected."""
    test = test_the_quick_run_prints_its_documented_keys.__name__
    names = [i.callspec.params["name"] for i in request.session.items if i.originalname == test]
    runs = QuickRuns(names)
    try:
        yield runs
    finally:
        runs.stop()


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow(minutes=QUICK_MINUTES.get(n, 1))) for n in QUICK],
)
def test_the_quick_run_prints_its_documented_keys(name: str, quick_runs: QuickRuns) -> None:
    code, stdout, stderr = quick_runs.result(name)
    assert code == 0, stderr[-4000:]
    report = json.loads(stdout)
    missing = [key for key in _documented_keys()[name] if key not in report]
    assert not missing, f"sweflow bench {name} --json --quick lacks {missing}: {report}"


def test_the_bare_reward_baseline_runs_commands_ending_in_a_here_document() -> None:
    """The replay's reproduction step is ``python - <<'EOF' ... EOF``: wrapped for the bare
    baseline it must still parse (it once ended ``EOF)`` and bash refused it)."""
    from sweflow.bench.reward import _quietly

    command = "python3 - <<'EOF'\nprint('hi')\nEOF"
    line = _quietly(command).replace("cd /testbed", "cd /")
    done = subprocess.run(["bash", "-c", line + " && echo ran"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "ran\n", done.stderr
