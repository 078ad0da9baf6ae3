"""Candidate bugs of a repository, in a seeded order, and their validation in a sandbox.

The order is a pure function of (seed, repo, files, operators): every operator's sites are
shuffled by a seeded RNG and the operators take turns, so a small ``max_tasks`` still samples
every operator and the same seed always tries the same candidates first.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import libcst as cst

from sweflow.cluster.base import Node
from sweflow.cluster.environments import BuildWork
from sweflow.errors import SweflowError
from sweflow.harness.specs import EnvSpec
from sweflow.instances import Instance
from sweflow.sandbox import SandboxSpec, open_sandbox
from sweflow.synth.operators import OPERATORS, apply_site, find_sites
from sweflow.synth.tasks import test_file_of
from sweflow.synth.testrun import SuiteRun, run_suite

CandidateOutcome = Literal[
    "valid", "no_change", "compile_error", "duplicate", "timeout", "tests_pass", "no_p2p"
]
# Files that are tests or packaging, never the code under test.
_NOT_SOURCE = ("test_", "conftest.py", "setup.py", "noxfile.py", "versioneer.py", "_version.py")
_NOT_SOURCE_DIRS = {"tests", "test", "testing", "docs", "doc", "examples", "benchmarks", "scripts"}


@dataclass(frozen=True)
class Candidate:
    file: str
    operator: str
    site: int
    line: int

    @property
    def key(self) -> str:
        return f"{self.file}:{self.operator}:{self.site}"


@dataclass
class CandidateResult:
    """What trying one candidate gave; one JSON line each in the work folder (for resuming)."""

    key: str
    file: str
    operator: str
    site: int
    line: int
    outcome: CandidateOutcome
    code_digest: str = ""
    seconds: float = 0.0
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def source_files(paths: Iterable[str]) -> list[str]:
    """The Python files of the library itself: no tests, docs, examples or packaging."""
    found = []
    for path in paths:
        parts = path.split("/")
        name = parts[-1]
        if not name.endswith(".py") or name.endswith("_test.py") or name.startswith(_NOT_SOURCE):
            continue
        if _NOT_SOURCE_DIRS & set(parts[:-1]):
            continue
        found.append(path)
    return sorted(found)


def enumerate_candidates(
    root: Path, files: Sequence[str], operators: Sequence[str], seed: int, label: str
) -> list[Candidate]:
    """Every site of every operator in ``files``, interleaved by operator in a seeded order."""
    per_operator: dict[str, list[Candidate]] = {name: [] for name in operators}
    for file in files:
        try:
            module = cst.parse_module((root / file).read_text())
        except (cst.ParserSyntaxError, UnicodeDecodeError):
            continue  # e.g. a Python 2 file shipped as an example: nothing to mutate
        for name in operators:
            lines = find_sites(module, OPERATORS[name])
            per_operator[name] += [Candidate(file, name, i, line) for i, line in enumerate(lines)]
    rng = random.Random(f"{seed}:{label}")
    for name in operators:
        rng.shuffle(per_operator[name])
    ordered: list[Candidate] = []
    for turn in range(max((len(v) for v in per_operator.values()), default=0)):
        ordered += [per_operator[n][turn] for n in operators if turn < len(per_operator[n])]
    return ordered


class Mutator:
    """Mutated code of candidates, each file parsed once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._modules: dict[str, cst.Module] = {}

    def original(self, file: str) -> str:
        return self.module(file).code

    def module(self, file: str) -> cst.Module:
        if file not in self._modules:
            self._modules[file] = cst.parse_module((self.root / file).read_text())
        return self._modules[file]

    def code(self, candidate: Candidate) -> str:
        return apply_site(
            self.module(candidate.file), OPERATORS[candidate.operator], candidate.site
        )


def new_result(candidate: Candidate, outcome: CandidateOutcome, **kw) -> CandidateResult:
    return CandidateResult(
        candidate.key,
        candidate.file,
        candidate.operator,
        candidate.site,
        candidate.line,
        outcome,
        **kw,
    )


def code_digest(file: str, code: str) -> str:
    return hashlib.sha256(f"{file}\0{code}".encode()).hexdigest()[:16]


def screen(
    candidate: Candidate, code: str, original: str, seen: set[str]
) -> CandidateResult | None:
    """The outcome of a candidate that needs no test run (no change, no compile, a duplicate)."""
    digest = code_digest(candidate.file, code)
    if code == original:
        return new_result(candidate, "no_change", code_digest=digest)
    try:
        compile(code, candidate.file, "exec")
    except (SyntaxError, ValueError):
        return new_result(candidate, "compile_error", code_digest=digest)
    if digest in seen:
        return new_result(candidate, "duplicate", code_digest=digest)
    seen.add(digest)
    return None


@dataclass
class Baseline:
    """The clean suite: which tests pass steadily, and how long a run takes."""

    passing: set[str]
    seconds: float


def run_candidate(
    candidate: Candidate,
    code: str,
    *,
    sandbox_spec: SandboxSpec,
    spec: EnvSpec,
    baseline: Baseline,
    timeout: float,
    max_fail_fraction: float = 1.0,
    log_dir: Path | None = None,
) -> CandidateResult:
    """Run the suite with the mutated file in a fresh sandbox and judge the outcome."""
    with open_sandbox(sandbox_spec) as sandbox:
        sandbox.write(f"{sandbox_spec.workdir}/{candidate.file}", code)
        log = log_dir / f"{candidate.key.replace('/', '__')}.log" if log_dir else None
        run = run_suite(sandbox, spec, timeout=timeout, log_path=log)
    return judge(candidate, run, baseline, code_digest(candidate.file, code), max_fail_fraction)


@dataclass
class CandidateWork:
    """Try one (candidate, mutated code) on the node it lands on, the picklable work of an
    executor: the clean environment is found in, brought to or built into that node's store,
    and the suite's log is written under ``out``."""

    clean: Instance
    build: BuildWork
    spec: EnvSpec
    baseline: Baseline
    timeout: float
    max_fail_fraction: float = 1.0

    def __call__(self, item: tuple[Candidate, str], out: Path, node: Node) -> CandidateResult:
        candidate, code = item
        with self.build.ensured(self.clean, node) as (builder, built):
            if built.status == "error":
                raise SweflowError(
                    f"{self.clean.instance_id}: the clean environment did not build on node "
                    f"{node.name}: {built.error}"
                )
            return run_candidate(
                candidate,
                code,
                sandbox_spec=builder.sandbox_spec(self.clean.instance_id),
                spec=self.spec,
                baseline=self.baseline,
                timeout=self.timeout,
                max_fail_fraction=self.max_fail_fraction,
                log_dir=out,
            )


def judge(
    candidate: Candidate,
    run: SuiteRun,
    baseline: Baseline,
    digest: str,
    max_fail_fraction: float = 1.0,
) -> CandidateResult:
    """Keep a bug that fails >= 1 steadily passing test and leaves >= 1 in those files passing.

    A bug that fails more than ``max_fail_fraction`` of the suite (an import-time crash, a core
    helper gone) is "too broad": it teaches little and hides most test files from the agent.
    """
    if run.timed_out:
        return new_result(candidate, "timeout", code_digest=digest, seconds=run.seconds)
    now_passing = run.passing
    f2p = sorted(baseline.passing - now_passing)
    if not f2p:
        return new_result(candidate, "tests_pass", code_digest=digest, seconds=run.seconds)
    if len(f2p) > max_fail_fraction * len(baseline.passing):
        return new_result(candidate, "too_broad", code_digest=digest, seconds=run.seconds)
    files = {test_file_of(t) for t in f2p}
    p2p = sorted(t for t in baseline.passing & now_passing if test_file_of(t) in files)
    messages = {t: run.messages[t] for t in f2p if t in run.messages}
    outcome: CandidateOutcome = "valid" if p2p else "no_p2p"
    return new_result(
        candidate,
        outcome,
        code_digest=digest,
        seconds=run.seconds,
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        messages=messages,
    )
