"""The reward: does this patch resolve this task? Answered exactly as the SWE-bench harness would.

Each call opens a fresh sandbox on the instance's cached layers and repeats swebench 5's
``run_instance`` step by step: write patch.diff, apply it with the harness's command chain, write
eval.sh, run it into test_output.txt, and grade that log with swebench's ``get_eval_report``
(report.json). An empty patch is not run (the harness skips those too). A patch that does not
apply (malformed, binary, or refused by every command of the chain), or whose tests run out of
time, scores 0 with its reason and, as in the harness, gets no report.json (an evaluation
counts it an error instance, as the harness's summary does); the verdict is kept in
``sweflow_verdict.json`` beside the harness's files, so that a re-run does not grade it again
(a timeout is graded again under a longer timeout). Any error of the sandbox scores 0 too and
is recorded nowhere: one bad call never stops a batch, and a re-run retries it. The sandbox
holds a lease on the instance's layers, so no store gc removes them meanwhile; if they go all
the same, the call is an infrastructure failure, not a verdict (its tests ran on a tree with
files missing). A Grader holds no mutable state, so threads, processes and Ray actors may share
one (or each build their own); every call writes into its own log directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import math
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from swebench.harness.constants import (
    FAIL_TO_PASS,
    LOG_INSTANCE,
    LOG_REPORT,
    LOG_TEST_OUTPUT,
    PASS_TO_PASS,
)
from swebench.harness.grading import get_eval_report
from swebench.types import TestSpec

from sweflow.envcache.builder import VENV_ACTIVATE, instance_sandbox_spec
from sweflow.envcache.store import LayerStore
from sweflow.errors import ConfigError, InfrastructureError, SweflowError, is_infrastructure
from sweflow.formats import grading_of
from sweflow.grading.guard import (
    PYTEST_PARSERS,
    Collected,
    Refusal,
    RunWatch,
    check_effect,
    check_run,
    judge,
    read_paths,
    untracked_files,
)
from sweflow.grading.patches import failure_kind, is_empty
from sweflow.harness.apply import REPO_DIR, apply_patch
from sweflow.harness.evalscript import (
    EvalOutput,
    make_eval_script,
    run_eval_script,
    test_spec_for,
)
from sweflow.harness.runlog import RunLog
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance
from sweflow.sandbox import Limits, Sandbox, SandboxSpec, open_sandbox
from sweflow.sandbox.backends import check_backend_name

PATCH_FILE = "patch.diff"
EVAL_FILE = "eval.sh"
VERDICT_FILE = "sweflow_verdict.json"  # beside the harness's files: a verdict without a report
GRADER_MODEL = "sweflow"  # model_name_or_path of a bare reward call (it names no model)
# Grading limits: a test log may be large, and suites may fork; memory stays capped.
DEFAULT_LIMITS = Limits(memory_bytes=8 << 30, pids=4096, output_bytes=16 << 20)


class Verdict(BaseModel):
    """What ``VERDICT_FILE`` keeps of a verdict the harness writes no report.json for: the
    ``apply_status``, its reason, and the timeout the tests ran past (None: they did not)."""

    status: str
    reason: str
    timeout_s: float | None = None


class GradingError(SweflowError):
    """An instance that cannot be graded at all: not built, or no eval script can be made."""


class EnvironmentGone(InfrastructureError):
    """The instance's layers went from under a grading: an infrastructure failure, no verdict."""


@dataclass
class RewardResult:
    """The verdict on one patch, with the counts and files behind it.

    ``apply_status``: applied | empty | malformed | binary | failed | timeout | error, or one of
    the tamper guard's refusals (sweflow.grading.guard.REFUSALS). ``report`` is swebench's
    per-instance report entry (empty when the harness would write no report.json: the patch was
    not run, did not apply, or the tests timed out; a refusal's says why it was refused).
    ``log_path`` is the directory of this call's harness files (None without a log directory).
    ``infrastructure`` marks an ``error`` that was the machinery's (the sandbox would not start
    or died, a connection dropped, the instance's layers were removed under it), not the
    patch's: the harness reports such an instance as an error too, but a reward must not count
    it as 0 (RL drops it; a retry may grade it).
    """

    instance_id: str
    resolved: bool
    f2p_passed: int
    f2p_total: int
    p2p_passed: int
    p2p_total: int
    apply_status: str
    reason: str
    duration_s: float
    log_path: str | None
    report: dict = field(default_factory=dict)
    infrastructure: bool = False


class Grader:
    """Grades patches on built instances of one layer store (see the module docstring)."""

    def __init__(
        self,
        store: Path,
        specs: SpecTable | None = None,
        *,
        backend: str = "local",
        log_dir: Path | None = None,
        timeout_s: float = 1800,
        tamper_guard: bool = False,
        limits: Limits | None = None,
    ) -> None:
        if not (math.isfinite(timeout_s) and timeout_s > 0):
            raise ConfigError(f"Grader: timeout_s must be a finite number above 0, got {timeout_s}")
        self.store = LayerStore(Path(store))
        self.specs = specs
        self.backend = check_backend_name(backend)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.timeout_s = timeout_s
        self.tamper_guard = tamper_guard
        self.limits = limits or DEFAULT_LIMITS

    # -- public ------------------------------------------------------------------------------
    def on_store(self, store: Path) -> Grader:
        """This grader with its settings on another store (a cluster node's own)."""
        if Path(store).absolute() == self.store.root:
            return self
        other = copy.copy(self)
        other.store = type(self.store)(Path(store))
        return other

    def reward(
        self,
        instance: Instance,
        patch: str | None,
        *,
        log_dir: Path | None = None,
        model: str = GRADER_MODEL,
    ) -> RewardResult:
        """Grade ``patch`` on ``instance``; files go to ``log_dir`` (as is) or a fresh
        ``<grader log_dir>/<instance_id>/<unique>`` directory. Raises GradingError only when the
        instance cannot be graded at all (not built, no eval script)."""
        start = time.monotonic()
        sandbox_spec = self._sandbox_spec(instance)
        test_spec = self.test_spec(instance)
        verdict = _Verdict(instance, start)
        if is_empty(patch):
            return verdict.unresolved("empty", "the patch is empty", None)
        assert patch is not None
        out = log_dir or self._call_dir(instance)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
        log = RunLog(instance.instance_id, out / LOG_INSTANCE if out else None)
        try:
            paths = read_paths(patch) if self.tamper_guard else set()
            if isinstance(paths, Refusal):
                return verdict.refused(paths, patch, out, log)
            return self._run(
                instance, patch, paths, sandbox_spec, test_spec, out, log, verdict, model
            )
        except Exception as exc:  # a sandbox failure is one unresolved call, not a crash
            log.error(f"Error in evaluating model for {instance.instance_id}: {exc!r}")
            why = f"{type(exc).__name__}: {exc}"
            return verdict.unresolved("error", why, out, infrastructure=is_infrastructure(exc))
        finally:
            log.close()

    async def areward(
        self,
        instance: Instance,
        patch: str | None,
        *,
        log_dir: Path | None = None,
        model: str = GRADER_MODEL,
    ) -> RewardResult:
        """:meth:`reward` in a worker thread, for asyncio agent loops."""
        return await asyncio.to_thread(self.reward, instance, patch, log_dir=log_dir, model=model)

    def test_spec(self, instance: Instance) -> TestSpec:
        """The swebench TestSpec this grader runs and reads ``instance``'s log by."""
        return test_spec_for(instance, self.eval_script(instance), self._log_parser(instance))

    def _log_parser(self, instance: Instance) -> str:
        """The spec's log parser (the row's own, when it names one, wins in test_spec_for);
        a format graded its own way reads its log as pytest's for the guard."""
        if (own := grading_of(instance)) is not None:
            return own.log_parser
        if self.specs is None or instance.log_parser:
            return ""
        return self.specs.get(instance.repo, instance.version or "").log_parser

    def eval_script(self, instance: Instance) -> str:
        """The row's own eval script, its format's (SWE-smith, R2E-Gym), or one made from its
        environment spec."""
        if instance.eval_script:
            return instance.eval_script
        if (own := grading_of(instance)) is not None:
            return own.eval_script(instance, None, self._activation(instance))
        if self.specs is None:
            raise GradingError(
                f"{instance.instance_id}: the row has no eval_script and no environment specs "
                "were given to make one (pass specs=Dataset.load('tasks.jsonl').specs)"
            )
        spec = self.specs.get(instance.repo, instance.version or "")
        return make_eval_script(instance, spec, activate=self._activation(instance))

    def _activation(self, instance: Instance) -> str:
        manifest = self.store.read_manifest(instance.instance_id)
        return manifest.meta.get("activate", VENV_ACTIVATE) if manifest else VENV_ACTIVATE

    # -- one call ----------------------------------------------------------------------------
    def _sandbox_spec(self, instance: Instance):
        try:
            return instance_sandbox_spec(self.store, instance.instance_id, limits=self.limits)
        except SweflowError as exc:
            raise GradingError(str(exc)) from exc

    def _call_dir(self, instance: Instance) -> Path | None:
        if self.log_dir is None:
            return None
        unique = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:12]}"
        return self.log_dir / instance.instance_id / unique

    def _run(self, instance, patch, paths, sandbox_spec, test_spec, out, log, verdict, model):
        iid = instance.instance_id
        with _files_dir(out) as files:
            (files / PATCH_FILE).write_text(patch)
            with open_sandbox(sandbox_spec, self.backend) as sandbox:
                log.info(f"Container for {iid} started: {getattr(sandbox, 'id', '')}")
                ran = self._in_sandbox(
                    sandbox, instance, patch, paths, test_spec, files, out, log, verdict
                )
            _check_environment(sandbox_spec)  # before any verdict is written
            if not isinstance(ran, _Ran):
                return ran()
            log_text = ran.output.log_path.read_text()
            if self.tamper_guard and (refusal := check_run(log_text, test_spec.log_parser)):
                return verdict.refused(refusal, patch, out, log, applied=True)
            prediction = {"instance_id": iid, "model_patch": patch, "model_name_or_path": model}
            if (own := grading_of(instance)) is not None:  # the format's own project's verdict
                report = {iid: own.report(instance, log_text)}
            else:
                report = get_eval_report(test_spec, prediction, str(ran.output.log_path), True)
            if ran.watch and ran.collected and report[iid]["resolved"]:  # it can only take away
                f2p, p2p = instance.FAIL_TO_PASS, instance.PASS_TO_PASS
                path = ran.output.log_path
                if refusal := judge(ran.watch, ran.collected, path, test_spec, f2p, p2p):
                    return verdict.refused(refusal, patch, out, log, applied=True)
            log.info(f"report: {report}\nResult for {iid}: resolved: {report[iid]['resolved']}")
            (files / LOG_REPORT).write_text(json.dumps(report, indent=4))
            return verdict.graded(report[iid], out)

    def _in_sandbox(self, sandbox, instance, patch, paths, test_spec, files, out, log, verdict):
        """Apply the patch and run the eval script: the run, or the verdict reached before it
        (to be given once the environment is known to have stayed whole)."""
        guard = self.tamper_guard
        untracked = untracked_files(sandbox, REPO_DIR, self.timeout_s) if guard else frozenset()
        applied = apply_patch(sandbox, patch, log, self.timeout_s)
        if not applied.ok:
            kind = "timeout" if applied.timed_out else failure_kind(patch, applied.output)
            why = f"the patch did not apply ({kind}): {applied.output.strip()[-500:]}"
            timeout = self.timeout_s if applied.timed_out else None
            return partial(verdict.final, kind, why, patch, out, log, timeout_s=timeout)
        watch = None
        if guard:
            changed = check_effect(
                sandbox, REPO_DIR, paths, instance.test_patch, self.timeout_s, untracked
            )
            if isinstance(changed, Refusal):
                return partial(verdict.refused, changed, patch, out, log, applied=True)
            if test_spec.log_parser in PYTEST_PARSERS:
                watch = RunWatch.make(REPO_DIR, changed, instance.FAIL_TO_PASS)
                watch.install(sandbox)
        _log_diff(sandbox, log, "before")
        (files / EVAL_FILE).write_text(test_spec.eval_script)
        env = watch.env if watch else None
        ran = run_eval_script(sandbox, test_spec, files / LOG_TEST_OUTPUT, self.timeout_s, env)
        if ran.timed_out:
            log.info(f"Test timed out after {self.timeout_s} seconds.")
            reason = f"timed out: the eval script ran past {self.timeout_s:g} s"
            return partial(
                verdict.final, "timeout", reason, patch, out, log, timeout_s=self.timeout_s
            )
        _log_diff(sandbox, log, "after")
        return _Ran(ran, watch, watch.collect(sandbox) if watch else None)


@dataclass(frozen=True)
class _Ran:
    """An eval script's run, and the guard's plugin and record where it watched the run."""

    output: EvalOutput
    watch: RunWatch | None = None
    collected: Collected | None = None


class _Verdict:
    """Builds the RewardResult of one call (durations and counts in one place)."""

    def __init__(self, instance: Instance, start: float) -> None:
        self.instance = instance
        self.start = start

    def _result(
        self, resolved, f2p, p2p, status, reason, out, report, infrastructure=False
    ) -> RewardResult:
        i = self.instance
        return RewardResult(
            instance_id=i.instance_id,
            resolved=resolved,
            f2p_passed=f2p,
            f2p_total=len(i.FAIL_TO_PASS),
            p2p_passed=p2p,
            p2p_total=len(i.PASS_TO_PASS),
            apply_status=status,
            reason=reason,
            duration_s=round(time.monotonic() - self.start, 4),
            log_path=str(out) if out else None,
            report=report,
            infrastructure=infrastructure,
        )

    def unresolved(
        self, status: str, reason: str, out: Path | None, *, infrastructure: bool = False
    ) -> RewardResult:
        return self._result(False, 0, 0, status, reason, out, {}, infrastructure)

    def refused(
        self, refusal: Refusal, patch: str, out: Path | None, log: RunLog, applied: bool = False
    ) -> RewardResult:
        """A patch the tamper guard refused: 0, its reason logged, and a report.json that says
        so, so that an evaluation counts it unresolved and a re-run does not grade it again."""
        iid = self.instance.instance_id
        log.info(f"Refused by the tamper guard ({refusal.status}): {refusal.reason}")
        entry = {
            "patch_is_None": False,
            "patch_exists": True,
            "patch_successfully_applied": applied,
            "resolved": False,
            "refused": refusal.status,
            "refusal_reason": refusal.reason,
        }
        if out is not None:
            (out / PATCH_FILE).write_text(patch)
            (out / LOG_REPORT).write_text(json.dumps({iid: entry}, indent=4))
        return self._result(False, 0, 0, refusal.status, refusal.reason, out, entry)

    def final(
        self,
        status: str,
        reason: str,
        patch: str,
        out: Path | None,
        log: RunLog,
        *,
        timeout_s: float | None = None,
    ) -> RewardResult:
        """The patch's own failure, as final as a graded run: it did not apply, or its tests ran
        past ``timeout_s``. No report.json (the harness writes none); ``VERDICT_FILE`` in
        ``out`` keeps it for a re-run (``Verdict``)."""
        log.info(f"Unresolved ({status}): {reason}")
        if out is not None:
            (out / PATCH_FILE).write_text(patch)
            kept = Verdict(status=status, reason=reason, timeout_s=timeout_s)
            (out / VERDICT_FILE).write_text(kept.model_dump_json(indent=1))
        return self.unresolved(status, reason, out)

    def graded(self, entry: dict, out: Path | None) -> RewardResult:
        tests = entry.get("tests_status", {})
        f2p = len(tests.get(FAIL_TO_PASS, {}).get("success", []))
        p2p = len(tests.get(PASS_TO_PASS, {}).get("success", []))
        i = self.instance
        counts = entry.get("summary") or (  # a project's own count (R2E-Gym's), else the lists'
            f"{f2p}/{len(i.FAIL_TO_PASS)} FAIL_TO_PASS, {p2p}/{len(i.PASS_TO_PASS)} PASS_TO_PASS"
            " pass"
        )
        if entry["resolved"]:
            reason = f"resolved: {counts}"
        elif not entry.get("patch_successfully_applied"):
            why = entry.get("infra_failure_reason") or "no parseable test results in the log"
            reason = f"unresolved: {why}"
        else:
            reason = f"unresolved: {counts}"
        return self._result(entry["resolved"], f2p, p2p, "applied", reason, out, entry)


def _log_diff(sandbox: Sandbox, log: RunLog, when: str) -> None:
    """The harness logs the tree's diff before and after the eval script; so does this."""
    if log.path is None:
        return
    diff = sandbox.exec("git -c core.fileMode=false diff", cwd=REPO_DIR).output.strip()
    log.info(f"Git diff {when}:\n{diff}")


def _check_environment(spec: SandboxSpec) -> None:
    """Raise EnvironmentGone if a layer of the sandbox was removed while it ran: its tests ran
    on a tree with files missing, which says nothing about the patch."""
    gone = [str(layer) for layer in spec.layers if not layer.is_dir()]
    if gone:
        raise EnvironmentGone(
            f"the environment's layers were removed while it was graded ({', '.join(gone)}): "
            "no verdict; grade it again"
        )


@contextlib.contextmanager
def _files_dir(out: Path | None) -> Iterator[Path]:
    """Where the call's files go: its log directory, or a temporary one removed afterwards."""
    if out is not None:
        yield out
        return
    with tempfile.TemporaryDirectory(prefix="sweflow-reward-") as tmp:
        yield Path(tmp)


def reward(instance: Instance, patch: str | None, *, store: Path, **options: Any) -> RewardResult:
    """One-off :meth:`Grader.reward`; ``options`` are the Grader's (build a Grader once when
    grading many patches)."""
    return Grader(store, **options).reward(instance, patch)
