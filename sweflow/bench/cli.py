"""How long the command line takes to start: every command pays it, ``--help`` included.

Each command runs as a fresh process (the installed ``sweflow`` script, as a user types it),
interleaved round-robin with the baseline ``python -c pass`` so that machine noise hits all of
them alike. Figures: p50 and p90 wall seconds per command, and the p50 over the baseline
(what sweflow itself adds). ``sandbox run true`` includes opening, running in and closing a
container-free sandbox on the default Debian base (built before timing when missing).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from sweflow.bench import BenchError
from sweflow.progress import Progress


def _sweflow() -> list[str]:
    """The console script beside this interpreter, else the module (an uninstalled checkout)."""
    script = Path(sys.executable).with_name("sweflow")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "sweflow.cli"]


def commands() -> dict[str, list[str]]:
    sweflow = _sweflow()
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "sweflow --help": [*sweflow, "--help"],
        "sweflow version": [*sweflow, "version"],
        "sweflow sandbox run true": [*sweflow, "sandbox", "run", "true"],
    }


def _wall(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-500:]}")
    return seconds


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(quick: bool = False, progress: Progress = print) -> dict:
    from sweflow.paths import rootfs_cache
    from sweflow.sandbox.rootfs import resolve_base

    progress("preparing the default base layer (debian:bookworm)")
    resolve_base("debian:bookworm", rootfs_cache(), progress=progress)
    reps = 7 if quick else 21
    argvs = commands()
    samples: dict[str, list[float]] = {name: [] for name in argvs}
    for argv in argvs.values():  # one warm-up each: the page cache, not the first read
        _wall(argv)
    for rep in range(reps):
        progress(f"round {rep + 1}/{reps}")
        for name, argv in argvs.items():
            samples[name].append(_wall(argv))
    baseline = statistics.median(samples["python -c pass"])
    report: dict = {"reps": reps, "commands": {}}
    for name, values in samples.items():
        p50 = statistics.median(values)
        report["commands"][name] = {
            "p50_s": round(p50, 4),
            "p90_s": round(_quantile(values, 0.9), 4),
            "over_python_p50_s": round(p50 - baseline, 4),
        }
    report["help_p50_s"] = report["commands"]["sweflow --help"]["p50_s"]
    report["sandbox_run_p50_s"] = report["commands"]["sweflow sandbox run true"]["p50_s"]
    return report
