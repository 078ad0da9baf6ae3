"""The guard's third check, on the test run: how it ended, and what pytest itself recorded.

The log first: a pytest run must end the way one ends, its summary line last, with no test
status printed after it (library code that prints PASSED lines and leaves early).

Then the run's own record. The eval script runs as the harness runs it, plus one plugin of the
guard's (sweflow/data/guard_plugin.py) that pytest loads first, from a folder outside the
repository under a random name, told the patch's changed paths and the FAIL_TO_PASS tests; it
records what the runner did through a file of its own, and sweflow.grading.guard.judge weighs
that record against the log. A run that does not load it cannot be verified and is refused.

Residual risk, stated plainly: the record is written from inside the process that runs the
code under test, and the plain runner's results from inside the interpreter that imports it.
Code that goes looking for the guard itself (its module, its file, its nonce, the plain
runner's spec) can forge or silence both, and ``setup.py`` runs arbitrary code at the eval
script's re-install, with the sandbox's full powers. The names are random per grading and the
guard's files are checked unchanged after the run, so no constant spelling in a patch finds
them; what is closed is every way of passing tests that does not target sweflow by design.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from importlib import resources

from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

from sweflow.grading.guard.base import Refusal
from sweflow.sandbox import Sandbox, SandboxFileError

PYTEST_PARSERS = frozenset({"parse_log_pytest", "parse_log_pytest_options", "parse_log_pytest_v2"})
_STATUS_LINE = re.compile(r"^(?:PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s")
_SUMMARY_LINE = re.compile(r"^=+ .*\bin \d+(?:\.\d+)?s\b.* =+$")
_CONFIG_LINE = (
    "CONFIG = {}  # the grader's: nonce, records, home, plain, fail_to_pass, repo, changed"
)


def check_run(log: str, log_parser: str) -> Refusal | None:
    """Refuse a pytest run that did not end as pytest ends: test statuses without a summary
    line after them (the process left early, or something printed statuses after pytest)."""
    if log_parser not in PYTEST_PARSERS:
        return None
    start, end = log.find(START_TEST_OUTPUT), log.rfind(END_TEST_OUTPUT)
    lines = log[start if start >= 0 else 0 : end if end >= 0 else len(log)].splitlines()
    lines = [line for line in lines if not line.startswith("+")]  # the script's own xtrace
    last_summary = max((i for i, line in enumerate(lines) if _SUMMARY_LINE.match(line)), default=-1)
    late = [line for line in lines[last_summary + 1 :] if _STATUS_LINE.match(line)]
    if late:
        where = "after pytest's summary" if last_summary >= 0 else "with no pytest summary"
        return Refusal("abnormal_end", f"the test run printed statuses {where}: {late[0]!r}")
    return None


@dataclass(frozen=True)
class Collected:
    """What a watched run left: the plugin's record, and whether the guard's files survived."""

    records: str
    intact: bool


@dataclass(frozen=True)
class RunWatch:
    """The guard's plugin for one grading: its files, the environment that loads it, and the
    record it leaves (read with :meth:`collect`, weighed by sweflow.grading.guard.judge)."""

    nonce: str
    home: str
    module: str
    records: str
    files: dict[str, bytes] = field(repr=False)

    @classmethod
    def make(cls, repo: str, changed: set[str], fail_to_pass: list[str]) -> RunWatch:
        """Fresh random names, and the plugin and plain runner sources with their settings."""
        token = secrets.token_hex(8)
        home, module = f"/tmp/.{token}", f"_{secrets.token_hex(6)}"
        config = {
            "nonce": secrets.token_hex(16),
            "records": f"{home}/{secrets.token_hex(4)}",
            "home": home,
            "plain": f"{home}/{secrets.token_hex(4)}.py",
            "fail_to_pass": list(fail_to_pass),
            "repo": repo,
            "changed": sorted(f"{repo}/{path}" for path in changed),
        }
        data = resources.files("sweflow.data")
        plugin = data.joinpath("guard_plugin.py").read_text()
        if _CONFIG_LINE not in plugin:
            raise RuntimeError("guard_plugin.py lost its CONFIG line")
        plugin = plugin.replace(_CONFIG_LINE, f"CONFIG = {config!r}")
        files = {
            f"{home}/{module}.py": plugin.encode(),
            config["plain"]: data.joinpath("guard_plain.py").read_bytes(),
        }
        return cls(config["nonce"], home, module, config["records"], files)

    @property
    def env(self) -> dict[str, str]:
        """What the eval script runs with: pytest loads the plugin first (``-p``), found on
        PYTHONPATH; the plugin takes both out of the environment the tests see."""
        return {"PYTEST_ADDOPTS": f"-p {self.module}", "PYTHONPATH": self.home}

    def install(self, sandbox: Sandbox) -> None:
        for path, data in self.files.items():
            sandbox.write(path, data)

    def collect(self, sandbox: Sandbox) -> Collected:
        """The plugin's record, and whether the guard's files are as they were written."""
        intact = all(_read(sandbox, path) == data for path, data in self.files.items())
        text = (_read(sandbox, self.records) or b"").decode("utf-8", errors="replace")
        return Collected(text, intact)


def _read(sandbox: Sandbox, path: str) -> bytes | None:
    try:
        return sandbox.read(path)
    except SandboxFileError:
        return None
