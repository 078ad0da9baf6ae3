"""Evaluation runs with the files and layout of swebench 5's ``run_evaluation``.

Under ``<root>/logs/run_evaluation/<run_id>/<model>/<instance_id>/`` each graded prediction gets
report.json, test_output.txt, patch.diff, eval.sh and run_instance.log (the Grader writes them
where run_instance does); ``<run_id>/run.json`` records the dataset, and the summary
``<model>.<run_id>.json`` comes from swebench's own ``make_run_report``, plus a Markdown twin.
As in the harness, empty patches are not run, and an instance whose report.json exists is not
run again, so a re-run with the same run id resumes; unlike the harness, only when the
prediction is the one that report graded (its patch.diff): a changed prediction is graded anew.
A patch that does not apply and tests that time out are error instances, as in the harness
(no report.json), but their verdict is kept (``reward.VERDICT_FILE``): unlike the harness, a
re-run does not grade them again in full, but for a timeout under a longer ``timeout_s``. The
machinery's errors (a sandbox that died) are kept nowhere: a re-run grades them again.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError
from swebench.harness.constants import LOG_INSTANCE, LOG_REPORT, RUN_EVALUATION_LOG_DIR

from sweflow.cluster.base import Executor, Node, Retry
from sweflow.cluster.local import LocalExecutor
from sweflow.errors import SweflowError
from sweflow.grading.patches import is_empty
from sweflow.grading.predictions import Prediction
from sweflow.grading.reward import PATCH_FILE, VERDICT_FILE, Grader, RewardResult, Verdict
from sweflow.harness.runlog import RunLog
from sweflow.instances import Instance
from sweflow.paths import check_name

if TYPE_CHECKING:
    from sweflow.cluster.environments import BuildWork

_CWD_LOCK = threading.Lock()  # make_run_report reads logs relative to the working directory


@dataclass
class PredictionOutcome:
    """One prediction's fate in a run: status resolved, unresolved, empty, error, or cached (a
    report.json from an earlier run with this run id)."""

    instance_id: str
    model: str
    status: str
    resolved: bool
    reason: str
    result: RewardResult | None = None


@dataclass
class RunSummary:
    outcomes: list[PredictionOutcome]
    report_path: Path
    markdown_path: Path
    report: dict
    retried: list[Retry] = field(default_factory=list)  # graded more than once (a node died)


def instance_dir(root: Path, run_id: str, model: str, instance_id: str) -> Path:
    """Where run_evaluation keeps one instance's files."""
    return root / RUN_EVALUATION_LOG_DIR / run_id / model.replace("/", "__") / instance_id


@dataclass
class GradeWork:
    """Grade one (instance, prediction) into ``out``: the picklable work of an executor.

    On a cluster node the grader's settings apply to that node's store; an instance the node
    lacks is brought from a peer. With ``build``, an instance the node still lacks, or holds
    built from another spec, is built, and leased for the grading either way."""

    grader: Grader
    build: BuildWork | None = None

    def __call__(
        self, item: tuple[Instance, Prediction], out: Path, node: Node
    ) -> PredictionOutcome:
        instance, pred = item
        grader = self.grader.on_store(node.store)
        if self.build is None:
            if not grader.store.has_instance(instance.instance_id):
                node.fetch(grader.store, instance.instance_id)
            return _grade(grader, instance, pred, out)
        with self.build.ensured(instance, node):
            return _grade(grader, instance, pred, out)


def evaluate(
    grader: Grader,
    instances: list[Instance],
    predictions: list[Prediction],
    run_id: str,
    *,
    root: Path = Path("."),
    report_dir: Path = Path("."),
    dataset_name: str = "",
    max_workers: int = 2,
    on_done: Callable[[PredictionOutcome], None] | None = None,
    executor: Executor | None = None,
    build: BuildWork | None = None,
) -> RunSummary:
    """Grade every prediction (bounded concurrency, on ``executor``: this process's threads by
    default), then write the run's summary files."""
    check_name(run_id, "run id")
    if not predictions:
        raise SweflowError("no predictions to evaluate")
    by_id = {i.instance_id: i for i in instances}
    root, report_dir = root.resolve(), report_dir.resolve()
    outcomes: list[PredictionOutcome | None] = []
    todo: list[int] = []
    for index, pred in enumerate(predictions):
        out = instance_dir(root, run_id, pred.model_name_or_path, pred.instance_id)
        settled = _settled(pred, out, grader.timeout_s)
        outcomes.append(settled)
        if settled is None:
            todo.append(index)
        elif on_done:
            on_done(settled)
    executor = executor or LocalExecutor(grader.store.root)
    graded = executor.map(
        GradeWork(grader, build),
        [(by_id[predictions[i].instance_id], predictions[i]) for i in todo],
        [
            instance_dir(
                root, run_id, predictions[i].model_name_or_path, predictions[i].instance_id
            )
            for i in todo
        ],
        keys=[predictions[i].instance_id for i in todo],
        max_workers=max_workers,
        on_done=on_done,
    )
    for index, outcome in zip(todo, graded, strict=True):
        outcomes[index] = outcome
    done = [o for o in outcomes if o is not None]
    report_path = _run_report(instances, predictions, run_id, root, report_dir, dataset_name)
    report = json.loads(report_path.read_text())
    markdown = report_path.with_suffix(".md")
    markdown.write_text(markdown_summary(run_id, report, done))
    return RunSummary(done, report_path, markdown, report, executor.retries())


def _graded_patch(out: Path) -> str | None:
    """The patch an earlier run graded in ``out`` (the Grader writes it as patch.diff)."""
    try:
        return (out / PATCH_FILE).read_text()
    except FileNotFoundError:
        return None


def _settled(pred: Prediction, out: Path, timeout_s: float) -> PredictionOutcome | None:
    """The outcome known without grading (an earlier run's report or kept verdict of this
    prediction, an empty patch), or None; the files of an earlier run that graded another
    prediction, or whose tests timed out under a shorter timeout than ``timeout_s``, are
    removed."""
    iid, model = pred.instance_id, pred.model_name_or_path
    report_file = out / LOG_REPORT
    same = _graded_patch(out) == pred.model_patch
    if same and report_file.exists():
        resolved = bool(json.loads(report_file.read_text()).get(iid, {}).get("resolved"))
        return PredictionOutcome(
            iid, model, "cached", resolved, f"report.json of an earlier run: {out}"
        )
    if same and (kept := _kept_verdict(out)) and (kept.timeout_s or timeout_s) >= timeout_s:
        return PredictionOutcome(
            iid, model, "cached", False, f"{kept.reason} (an earlier run's: {out})"
        )
    if out.exists():  # another prediction, or a shorter timeout, was graded here: stale files
        shutil.rmtree(out)
    if is_empty(pred.model_patch):
        return PredictionOutcome(
            iid, model, "empty", False, "empty patch: not run (as in the harness)"
        )
    return None


def _kept_verdict(out: Path) -> Verdict | None:
    """The verdict an earlier run kept without a report.json (``reward.VERDICT_FILE``)."""
    try:
        return Verdict.model_validate_json((out / VERDICT_FILE).read_text())
    except (FileNotFoundError, ValidationError):
        return None


def _grade(grader: Grader, instance: Instance, pred: Prediction, out: Path) -> PredictionOutcome:
    iid, model = pred.instance_id, pred.model_name_or_path
    try:
        result = grader.reward(instance, pred.model_patch, log_dir=out, model=model)
    except SweflowError as exc:  # not built, no eval script: this instance only
        log = RunLog(iid, out / LOG_INSTANCE)
        log.error(f"Error in evaluating model for {iid}: {exc}")
        log.close()
        return PredictionOutcome(iid, model, "error", False, str(exc))
    if result.report:
        status = "resolved" if result.resolved else "unresolved"
    else:
        status = "error"  # no report.json: the harness counts it an error instance too
    return PredictionOutcome(iid, model, status, result.resolved, result.reason, result)


def _run_report(instances, predictions, run_id, root, report_dir, dataset_name) -> Path:
    """swebench's run.json and make_run_report summary, written from ``root`` as the harness
    would from its working directory (its printout is swallowed: the CLI prints a table)."""
    from swebench.harness.reporting import make_run_report
    from swebench.harness.run_evaluation import write_run_metadata

    preds = {p.instance_id: p.to_row() for p in predictions}
    rows = [{"instance_id": i.instance_id, "image": i.image or ""} for i in instances]
    root.mkdir(parents=True, exist_ok=True)
    with _CWD_LOCK, contextlib.chdir(root), contextlib.redirect_stdout(io.StringIO()):
        write_run_metadata(run_id, dataset_name, "test", None)
        return Path(make_run_report(preds, rows, run_id, None, str(report_dir))).resolve()


def markdown_summary(run_id: str, report: dict, outcomes: list[PredictionOutcome]) -> str:
    """The summary as Markdown: the harness's counts, then a row per prediction."""
    counts = [
        ("total", report["total_instances"]),
        ("submitted", report["submitted_instances"]),
        ("completed", report["completed_instances"]),
        ("resolved", report["resolved_instances"]),
        ("unresolved", report["unresolved_instances"]),
        ("empty patch", report["empty_patch_instances"]),
        ("error", report["error_instances"]),
    ]
    lines = [
        f"# Evaluation {run_id}",
        "",
        "| " + " | ".join(name for name, _ in counts) + " |",
        "|" + " --- |" * len(counts),
        "| " + " | ".join(str(value) for _, value in counts) + " |",
        "",
        "| instance | model | status | F2P | P2P | seconds | reason |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for o in sorted(outcomes, key=lambda o: o.instance_id):
        r = o.result
        f2p = f"{r.f2p_passed}/{r.f2p_total}" if r else ""
        p2p = f"{r.p2p_passed}/{r.p2p_total}" if r else ""
        seconds = f"{r.duration_s:.2f}" if r else ""
        reason = o.reason.replace("|", "\\|").replace("\n", " ")[:200]
        lines.append(
            f"| {o.instance_id} | {o.model} | {o.status} | {f2p} | {p2p} | {seconds} | {reason} |"
        )
    return "\n".join(lines) + "\n"
