"""A reward is an attack surface: the checks that refuse a patch which makes tests pass without
fixing anything (the tamper guard, on by default in RL and golden-trajectory collection).

An RL policy finds every way to turn "the tests pass" into a reward: a conftest hook that
reports failures as passes, a plugin loaded through settings or install metadata, a diff header
that ``git apply`` reads and a path check does not, files a ``.gitignore`` hides from git, library
code that patches pytest's reports or runner, marks the bug XFAIL, prints PASSED lines and leaves,
or swaps in a fix only while it is being tested. The official harness checks none of this (so
``eval`` keeps the harness's verdicts, byte for byte, unless asked); the guard judges every patch
by what it does, in three steps, one module each:

1. the text (``text``), before anything runs: every file header must be one this package reads
   the way ``git apply`` does, naming no path inside ``.git``;
2. the effect (``effect``, ``config``), once applied: what git says changed, ignore rules
   ignored, must hold no test file, no file of the test patch, no test-runner configuration
   (pytest's settings, ``pytest11`` entry points, any entry_points.txt), no start-up hook
   (``sitecustomize``, ``.pth``), no symlink, no path the text did not name;
3. the run (``run``, ``judge``), after the eval script: it must end as pytest ends, and under
   a plugin of the guard's loaded first, outside the repository, whose record must bear the
   log out: no hook, runner object or test defined by the patch's code or by code with no
   file, every test the log passes passed by pytest's own runner, no FAIL_TO_PASS test XFAIL
   or skipped, and every FAIL_TO_PASS test that pytest passed passing again in an interpreter
   without pytest (sweflow/data/guard_plain.py). ``run`` states what this cannot close.

A refusal is a verdict of 0 with its reason (``apply_status`` names the check), never an error.
"""

from sweflow.grading.guard.base import REFUSALS, Refusal
from sweflow.grading.guard.effect import check_effect, untracked_files
from sweflow.grading.guard.judge import judge
from sweflow.grading.guard.run import PYTEST_PARSERS, Collected, RunWatch, check_run
from sweflow.grading.guard.text import read_paths

__all__ = [
    "PYTEST_PARSERS",
    "REFUSALS",
    "Collected",
    "Refusal",
    "RunWatch",
    "check_effect",
    "check_run",
    "judge",
    "read_paths",
    "untracked_files",
]
