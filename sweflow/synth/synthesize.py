"""Synthesis of one dataset: sources -> clean environment -> candidate bugs -> validated tasks.

Per source: import it as a git repo, build its environment with the environment cache (the
clean repo is an instance like any other), run the suite twice clean to learn which tests pass
steadily, then try candidates in their seeded order, ``max_workers`` sandboxes at a time, until
``max_tasks`` are valid. Every tried candidate is appended to ``candidates.jsonl`` in the work
folder, so an interrupted run resumes where it stopped. Emitted tasks are built and validated
the way ``sweflow env validate`` does (``final_check``) before they are written.

The dataset folder gets ``<out>.jsonl``, ``specs.yaml`` (the environment specs travel with the
data), ``repos/<owner>__<name>.bundle`` (the commits the tasks name), a report and, when the
recipe has a ``split``, ``split.json`` (the held-out repos).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sweflow.cluster.base import Executor
from sweflow.cluster.environments import BuildWork, ValidateWork, validate_instances
from sweflow.cluster.local import LocalExecutor
from sweflow.envcache.builder import BuildOptions, EnvBuilder
from sweflow.errors import SweflowError
from sweflow.harness.specs import EnvSpec, SpecTable
from sweflow.instances import Instance, write_jsonl
from sweflow.progress import Progress, no_progress
from sweflow.sandbox import open_sandbox
from sweflow.synth.candidates import (
    Baseline,
    Candidate,
    CandidateResult,
    CandidateWork,
    Mutator,
    enumerate_candidates,
    screen,
    source_files,
)
from sweflow.synth.config import SourceConfig, SynthConfig
from sweflow.synth.sources import SourceRepo, git, import_source, parse_source
from sweflow.synth.tasks import Bug, make_task
from sweflow.synth.testrun import run_suite

CLEAN_RUNS = 2
MIN_TIMEOUT_S = 20.0


class SynthError(SweflowError):
    """A source that yields no tasks for a reason the user must fix (named in the message)."""


@dataclass
class SourceReport:
    source: str
    repo: str
    clean_tests: int = 0
    clean_seconds: float = 0.0
    candidates: int = 0  # sites found
    outcomes: Counter = field(default_factory=Counter)  # tried candidates by outcome
    per_operator: dict[str, Counter] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=list)
    rejected_by_final_check: list[str] = field(default_factory=list)
    seconds: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)  # wall seconds per phase

    def lap(self, phase: str, since: float) -> float:
        now = time.monotonic()
        self.phases[phase] = round(now - since, 2)
        return now

    def count(self, result: CandidateResult) -> None:
        self.outcomes[result.outcome] += 1
        self.per_operator.setdefault(result.operator, Counter())[result.outcome] += 1


@dataclass
class Synthesizer:
    config: SynthConfig
    work: Path
    wheelhouse: Path | None = None
    network: bool = True
    progress: Progress = no_progress
    executor: Executor | None = None  # where candidates and final checks run (default: here)

    def __post_init__(self) -> None:
        self.repos = self.work / "repos"
        self.builder_options = BuildOptions(
            store=self.work / "store",
            repo_mirror=self.repos,
            wheelhouse=self.wheelhouse,
            network=self.network,
            max_workers=self.config.max_workers,
        )
        self.executor = self.executor or LocalExecutor(self.builder_options.store)

    # -- whole run -------------------------------------------------------------------------
    def run(self) -> tuple[list[Instance], list[SourceReport]]:
        instances: list[Instance] = []
        reports: list[SourceReport] = []
        specs: dict[str, dict[str, EnvSpec]] = {}
        for source_config in self.config.sources:
            tasks, report, repo, spec = self.synthesize(source_config)
            instances += tasks
            reports.append(report)
            specs.setdefault(repo.source.repo, {})[repo.source.version] = spec
            self._write_bundle(repo, tasks)
        self._write_dataset(instances, specs, reports)
        return instances, reports

    # -- one source ------------------------------------------------------------------------
    def synthesize(
        self, source_config: SourceConfig
    ) -> tuple[list[Instance], SourceReport, SourceRepo, EnvSpec]:
        start = time.monotonic()
        source = parse_source(
            source_config.source, repo=source_config.repo, version=source_config.version
        )
        self.progress(f"{source.text}: import", 0, 1)
        repo = import_source(source, self.repos, download_dir=self.work / "sdists")
        spec = source_config.env_spec()
        table = SpecTable({source.repo: {source.version: spec}})
        builder = EnvBuilder(table, self.builder_options)
        report = SourceReport(source.text, source.repo)

        clean_id = f"{source.slug}-{source.version}.clean"
        clean = Instance(
            instance_id=clean_id,
            repo=source.repo,
            base_commit=repo.base_commit,
            version=source.version,
        )
        self.progress(f"{source.text}: environment", 0, 1)
        lap = report.lap("import", start)
        built = builder.build([clean])[0]
        if built.status == "error":
            raise SynthError(f"{source.text}: the environment did not build: {built.error}")
        lap = report.lap("environment", lap)
        sandbox_spec = builder.sandbox_spec(clean_id)
        baseline = self._baseline(source.text, sandbox_spec, spec)
        report.clean_tests, report.clean_seconds = len(baseline.passing), baseline.seconds
        lap = report.lap("clean_runs", lap)

        files = source_files(git(repo.root, "ls-files").split("\n"))
        candidates = enumerate_candidates(
            repo.root, files, self.config.operators, self.config.seed, source.repo
        )
        report.candidates = len(candidates)
        if self.config.max_candidates is not None:
            candidates = candidates[: self.config.max_candidates]
        max_tasks = source_config.max_tasks or self.config.max_tasks
        timeout = max(MIN_TIMEOUT_S, self.config.timeout_factor * baseline.seconds)
        work = CandidateWork(
            clean,
            BuildWork(table, self.builder_options),
            spec,
            baseline,
            timeout,
            self.config.max_fail_fraction,
        )
        results = self._try_all(source.text, repo, candidates, max_tasks, work)
        bugs = []
        mutator = Mutator(repo.root)
        for result in results:
            report.count(result)
            if result.outcome == "valid" and len(bugs) < max_tasks:
                bugs.append(_bug(result, mutator.code(_candidate(result))))
        tasks = [make_task(repo, spec, bug) for bug in bugs]
        lap = report.lap("candidates", lap)
        if self.config.final_check and tasks:
            tasks = self._final_check(source.text, table, tasks, report)
            report.lap("final_check", lap)
        report.tasks = [t.instance_id for t in tasks]
        report.seconds = round(time.monotonic() - start, 1)
        return tasks, report, repo, spec

    def _baseline(self, label: str, sandbox_spec, spec: EnvSpec) -> Baseline:
        runs = []
        for i in range(CLEAN_RUNS):
            self.progress(f"{label}: clean test runs", i, CLEAN_RUNS)
            with open_sandbox(sandbox_spec) as sandbox:
                log = self.work / "logs" / f"{label.replace('/', '_')}.clean-{i + 1}.log"
                runs.append(run_suite(sandbox, spec, timeout=3600, log_path=log))
        passing = set.intersection(*(r.passing for r in runs))
        if not passing:
            raise SynthError(
                f"{label}: no test passes in the clean environment (test_cmd "
                f"{spec.test_cmd!r}); see {self.work / 'logs'}"
            )
        return Baseline(passing, max(r.seconds for r in runs))

    def _try_all(
        self,
        label: str,
        repo: SourceRepo,
        candidates: list[Candidate],
        max_tasks: int,
        work: CandidateWork,
    ) -> list[CandidateResult]:
        """Results in candidate order, stopping once ``max_tasks`` are valid (resumable: each
        result is journaled as it lands)."""
        # A candidate's result depends on the code, the environment and the judging settings,
        # never on the seed or the limits: those only choose which candidates are tried.
        key = _digest(
            work.spec.model_dump(),
            self.config.max_fail_fraction,
            self.config.timeout_factor,
            work.baseline.passing,
        )
        journal = self.work / "candidates" / f"{repo.source.slug}-{repo.source.version}-{key}.jsonl"
        journal.parent.mkdir(parents=True, exist_ok=True)
        done = _read_journal(journal)
        mutator = Mutator(repo.root)
        seen: set[str] = set()
        results: list[CandidateResult] = []
        valid = 0
        batch_size = self.config.max_workers * 4
        log_dir = self.work / "logs" / repo.source.slug
        lock = threading.Lock()
        with open(journal, "a") as out:

            def record(result: CandidateResult) -> None:
                with lock:
                    done[result.key] = result
                    out.write(json.dumps(result.to_json()) + "\n")
                    out.flush()

            index = 0
            while index < len(candidates) and valid < max_tasks:
                batch = candidates[index : index + batch_size]
                index += len(batch)
                pending: dict[str, tuple[Candidate, str]] = {}
                for candidate in batch:
                    if candidate.key in done:
                        seen.add(done[candidate.key].code_digest)
                        continue
                    code = mutator.code(candidate)
                    early = screen(candidate, code, mutator.original(candidate.file), seen)
                    if early is None:
                        pending[candidate.key] = (candidate, code)
                    else:
                        record(early)
                self.executor.map(  # type: ignore[union-attr]
                    work,
                    list(pending.values()),
                    [log_dir] * len(pending),
                    keys=list(pending),
                    max_workers=self.config.max_workers,
                    on_done=record,
                )
                for candidate in batch:
                    results.append(done[candidate.key])
                    valid += done[candidate.key].outcome == "valid"
                    if valid >= max_tasks:
                        break
                self.progress(f"{label}: candidates ({valid} valid)", index, len(candidates))
        return results

    def _final_check(
        self, label: str, table: SpecTable, tasks: list[Instance], report: SourceReport
    ) -> list[Instance]:
        """Build every task and validate it as ``sweflow env validate`` would; keep the valid."""
        self.progress(f"{label}: final check (build and validate)", 0, len(tasks))
        check = ValidateWork(BuildWork(table, self.builder_options), timeout=MIN_TIMEOUT_S * 10)
        log_root = self.work / "logs" / "final-check"
        outcomes = validate_instances(self.executor, check, tasks, log_root)  # type: ignore[arg-type]
        valid = {v.instance_id for v in outcomes if v.outcome == "valid"}
        report.rejected_by_final_check = [
            f"{v.instance_id}: {v.outcome} ({v.reason})" for v in outcomes if v.outcome != "valid"
        ]
        return [t for t in tasks if t.instance_id in valid]

    # -- outputs -----------------------------------------------------------------------------
    def _write_bundle(self, repo: SourceRepo, tasks: list[Instance]) -> None:
        """The base commit and every task commit, as one git bundle beside the dataset."""
        folder = self.config.out.parent.resolve() / "repos"
        folder.mkdir(parents=True, exist_ok=True)
        bundle = folder / f"{repo.source.slug}.bundle"
        refs = ["refs/heads/main", *(f"refs/tasks/{t.instance_id}" for t in tasks)]
        tmp = bundle.with_suffix(".bundle.tmp")
        git(repo.root, "-c", "pack.threads=1", "bundle", "create", "-q", str(tmp), *refs)
        tmp.rename(bundle)

    def _write_dataset(
        self, instances: list[Instance], specs: dict, reports: list[SourceReport]
    ) -> None:
        out = self.config.out
        out.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(instances, out)
        specs_path = out.parent / "specs.yaml"
        data = {
            repo: {v: spec.model_dump(exclude_defaults=True) for v, spec in vs.items()}
            for repo, vs in specs.items()
        }
        header = "# Environment specs of the tasks beside this file (written by sweflow synth).\n"
        specs_path.write_text(header + yaml.safe_dump(data, sort_keys=True))
        report_path = out.with_suffix(".report.json")
        report_path.write_text(json.dumps([report_json(r) for r in reports], indent=2) + "\n")
        if self.config.split is not None:  # the held-out repos, as the pipeline's split reads them
            split = self.config.split.model_dump()
            (out.parent / "split.json").write_text(json.dumps(split, indent=1) + "\n")


def report_json(report: SourceReport) -> dict:
    """A source's report as tasks.report.json holds it (benchmarks read it back)."""
    return {
        "source": report.source,
        "repo": report.repo,
        "clean_tests": report.clean_tests,
        "clean_seconds": report.clean_seconds,
        "sites": report.candidates,
        "outcomes": dict(sorted(report.outcomes.items())),
        "per_operator": {
            k: dict(sorted(v.items())) for k, v in sorted(report.per_operator.items())
        },
        "tasks": report.tasks,
        "rejected_by_final_check": report.rejected_by_final_check,
        "seconds": report.seconds,
        "phases": report.phases,
    }


def _digest(*parts: object) -> str:
    text = json.dumps(parts, sort_keys=True, default=sorted)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _read_journal(path: Path) -> dict[str, CandidateResult]:
    done: dict[str, CandidateResult] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
                done[row["key"]] = CandidateResult(**row)
            except (json.JSONDecodeError, TypeError, KeyError):
                continue  # a line cut short by an interrupted run: that candidate runs again
    return done


def _candidate(result: CandidateResult) -> Candidate:
    return Candidate(result.file, result.operator, result.site, result.line)


def _bug(result: CandidateResult, code: str) -> Bug:
    return Bug(
        result.file,
        result.operator,
        result.site,
        result.line,
        code,
        result.fail_to_pass,
        result.pass_to_pass,
        result.messages,
    )


SUMMARY_COLUMNS = ("candidates", "compiled", "broke_tests", "valid")


def operator_summary(reports: list[SourceReport]) -> dict[str, dict[str, int]]:
    """Per operator: candidates tried, those that compiled, broke >= 1 test, and were valid."""
    summary: dict[str, dict[str, int]] = {}
    for report in reports:
        for operator, outcomes in report.per_operator.items():
            row = summary.setdefault(operator, dict.fromkeys(SUMMARY_COLUMNS, 0))
            row["candidates"] += sum(outcomes.values())
            row["compiled"] += sum(
                n for o, n in outcomes.items() if o not in ("compile_error", "no_change")
            )
            row["broke_tests"] += sum(
                outcomes[o] for o in ("valid", "no_p2p", "too_broad", "timeout")
            )
            row["valid"] += outcomes["valid"]
    return dict(sorted(summary.items()))
