"""The official harness on sweflow's environments: images, a run of it, verdicts compared.

The cross-check asks swebench 5's own ``python -m swebench.harness.run_evaluation`` to grade the
same predictions on the same environments. Each instance's cached layers become a docker image
(the docker backend's image of that layer stack, plus the sandbox's environment variables and
/testbed as working directory), tagged with the instance's ``image`` name. The harness looks the
image up locally (``client.images.get``) and only pulls when that fails, so with every image
present it needs no registry and no network. The dataset it reads carries the same eval script
the Grader runs, so both sides execute identical bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from swebench.harness.constants import LOG_INSTANCE, LOG_REPORT

from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.envcache.store import LayerStore
from sweflow.grading.evaluate import instance_dir
from sweflow.grading.predictions import Prediction
from sweflow.grading.reward import Grader
from sweflow.harness.evalscript import DEFAULT_EVAL_TYPE, DEFAULT_LOG_PARSER
from sweflow.instances import Instance

IMAGE_LABEL = "sweflow.harness.source"  # the layer image and environment an image was made of
OFFLINE_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1"}


def harness_image_name(instance_id: str) -> str:
    """The ``image`` an instance gets for the harness (docker names are lower case)."""
    return f"sweflow/sweb.eval.{instance_id.lower()}:latest"


def export_instance_image(client, store: LayerStore, instance_id: str, name: str) -> str:
    """Tag an image of the instance's layers as ``name`` (made once; kept while unchanged)."""
    import docker.errors

    from sweflow.sandbox.docker import ensure_image

    spec = instance_sandbox_spec(store, instance_id)
    layers_tag = ensure_image(client, spec.layers)
    env = [f"{k}={v}" for k, v in sorted(spec.shell_env().items())]
    source = json.dumps({"layers": layers_tag, "env": env, "workdir": spec.workdir})
    try:
        if client.images.get(name).labels.get(IMAGE_LABEL) == source:
            return name
    except docker.errors.ImageNotFound:
        pass
    container = client.containers.create(layers_tag, command=["/bin/true"], network_mode="none")
    try:
        repository, _, tag = name.rpartition(":")
        conf = {"Env": env, "WorkingDir": spec.workdir, "Labels": {IMAGE_LABEL: source}}
        container.commit(repository=repository, tag=tag, conf=conf)
    finally:
        container.remove(force=True)
    return name


def harness_rows(grader: Grader, instances: list[Instance]) -> list[Instance]:
    """The instances as the harness needs them: image, eval script, log parser, eval type."""
    return [
        i.model_copy(
            update={
                "image": harness_image_name(i.instance_id),
                "eval_script": grader.eval_script(i),
                "log_parser": i.log_parser or DEFAULT_LOG_PARSER,
                "eval_type": i.eval_type or DEFAULT_EVAL_TYPE,
                "version": i.version or "",
            }
        )
        for i in instances
    ]


def harness_dataset(client, grader: Grader, instances: list[Instance], path: Path) -> Path:
    """Everything the harness needs to grade ``instances``: an image of each instance's layers,
    named as its ``image``, and the rows written to ``path`` (JSONL)."""
    from sweflow.instances import write_jsonl

    for i in instances:
        name = harness_image_name(i.instance_id)
        export_instance_image(client, grader.store, i.instance_id, name)
    return write_jsonl(harness_rows(grader, instances), path)


@dataclass
class HarnessRun:
    root: Path
    returncode: int
    output: str
    seconds: float


def run_harness(
    dataset: Path,
    predictions: list[Prediction],
    run_id: str,
    root: Path,
    *,
    docker_host: str,
    max_workers: int = 2,
    timeout: int = 1800,
) -> HarnessRun:
    """``python -m swebench.harness.run_evaluation`` in ``root`` against ``docker_host``."""
    if not predictions:
        raise ValueError(f"run {run_id}: no predictions to evaluate")
    root.mkdir(parents=True, exist_ok=True)
    preds_file = root / f"predictions.{run_id}.{predictions[0].model_name_or_path}.jsonl"
    preds_file.write_text("".join(json.dumps(p.to_row()) + "\n" for p in predictions))
    argv = [
        sys.executable,
        "-m",
        "swebench.harness.run_evaluation",
        "--dataset_name",
        str(dataset.resolve()),
        "--predictions_path",
        str(preds_file.resolve()),
        "--run_id",
        run_id,
        "--max_workers",
        str(max_workers),
        "--timeout",
        str(timeout),
        "--report_dir",
        str(root.resolve()),
    ]
    env = {**os.environ, **OFFLINE_ENV, "DOCKER_HOST": docker_host}
    start = time.monotonic()
    done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
    return HarnessRun(root, done.returncode, done.stdout + done.stderr, time.monotonic() - start)


def reports(root: Path, run_id: str, predictions: list[Prediction]) -> dict[str, dict | None]:
    """Per instance, the report.json entry a run under ``root`` wrote (None: it wrote none)."""
    out: dict[str, dict | None] = {}
    for p in predictions:
        report = instance_dir(root, run_id, p.model_name_or_path, p.instance_id) / LOG_REPORT
        out[p.instance_id] = (
            json.loads(report.read_text()).get(p.instance_id) if report.exists() else None
        )
    return out


def verdicts(root: Path, run_id: str, predictions: list[Prediction]) -> dict[str, bool]:
    """Per instance, resolved or not: no report.json (empty patch, error) is unresolved."""
    return {k: bool(v and v.get("resolved")) for k, v in reports(root, run_id, predictions).items()}


def instance_seconds(root: Path, run_id: str, prediction: Prediction) -> float | None:
    """Wall time of one harness instance, first to last line of its run_instance.log (container
    created ... container removed): the harness's own cost, without its process start."""
    log = instance_dir(root, run_id, prediction.model_name_or_path, prediction.instance_id)
    stamps = []
    for line in (log / LOG_INSTANCE).read_text(errors="replace").splitlines():
        try:
            stamps.append(datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f"))
        except ValueError:
            continue
    return (stamps[-1] - stamps[0]).total_seconds() if len(stamps) > 1 else None


def agreement_table(results: dict[str, dict[str, dict[str, bool]]]) -> tuple[str, int]:
    """Markdown table of verdicts per (variant, instance) across graders, and the number of rows
    where they disagree. ``results[grader][variant][instance_id] -> resolved``."""
    graders = list(results)
    keys = sorted({(v, i) for g in graders for v in results[g] for i in results[g][v]})
    lines = [
        "| variant | instance | " + " | ".join(graders) + " | agree |",
        "| --- | --- |" + " --- |" * (len(graders) + 1),
    ]
    disagreements = 0
    for variant, iid in keys:
        seen = [results[g].get(variant, {}).get(iid) for g in graders]
        agree = len(set(seen)) == 1
        disagreements += not agree
        cells = " | ".join({True: "resolved", False: "-", None: "missing"}[s] for s in seen)
        lines.append(f"| {variant} | {iid} | {cells} | {'yes' if agree else 'NO'} |")
    total = len(keys)
    lines.append(f"\nagreement: {total - disagreements}/{total} rows")
    return "\n".join(lines) + "\n", disagreements
