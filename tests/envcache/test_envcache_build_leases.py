"""A build and its user against gc and against a second build: real builds, processes, flocks.

``env gc --grace 0`` beside ``eval`` removed what eval had just built (its gradings said "error:
not built", eval exited 0), and two builds of one instance at once built it twice (issue 54).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sweflow.cluster.environments import BuildWork
from sweflow.envcache.builder import EnvBuilder
from sweflow.envcache.dataset import Dataset
from sweflow.grading import Grader
from sweflow.grading.evaluate import RunSummary, evaluate
from sweflow.grading.predictions import gold_predictions

pytestmark = pytest.mark.timeout(600)

DATASET = Path(__file__).parents[1] / "data" / "envcache" / "instances.jsonl"
# One build of an instance in a process of its own: its status.
BUILD = """
import sys
from pathlib import Path
from sweflow.envcache.dataset import Dataset
data = Dataset.load(Path(sys.argv[1]), instances=[sys.argv[4]])
builder = data.builder(Path(sys.argv[2]), wheelhouse=Path(sys.argv[3]))
print(builder.build_one(data.rows[0]).status, flush=True)
"""
# gc of every instance (none is kept), trusting no lease that is not held: what it kept.
GC = """
import json, sys
from pathlib import Path
from sweflow.envcache.cleanup import gc
from sweflow.envcache.store import LayerStore
report = gc(LayerStore(Path(sys.argv[1])), set(), grace_s=0)
print(json.dumps({"kept": report.in_use_instances, "removed": report.manifests}), flush=True)
"""


@pytest.fixture(scope="module")
def data() -> Dataset:
    """The more-itertools instances."""
    return Dataset.load(DATASET)


@pytest.fixture(scope="module")
def builder(data: Dataset, tmp_path_factory, wheelhouse: Path, bookworm_rootfs: Path) -> EnvBuilder:
    """``data``'s builder on a store where nothing is built yet."""
    return data.builder(tmp_path_factory.mktemp("store"), wheelhouse=wheelhouse)


def test_two_builds_of_one_instance_build_it_once(
    data: Dataset, builder: EnvBuilder, wheelhouse: Path
) -> None:
    instance = data.rows[0]
    argv = [
        sys.executable,
        "-c",
        BUILD,
        str(DATASET),
        str(builder.options.store),
        str(wheelhouse),
        instance.instance_id,
    ]
    builds = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    statuses = sorted(build.communicate(timeout=500)[0].strip() for build in builds)
    assert statuses == ["built", "cached"], statuses
    assert builder.store.has_instance(instance.instance_id)


def test_gc_with_no_grace_beside_an_eval_keeps_what_it_builds(
    data: Dataset, builder: EnvBuilder, tmp_path: Path
) -> None:
    """The gc waits for the build's commits, then runs between the build and the grading's
    sandbox: it must find the instance's lease held there."""
    instance = data.rows[1]
    grader = Grader(builder.options.store, data.specs, timeout_s=300)
    build = BuildWork(data.specs, builder.options)
    log = builder.log_path(instance.instance_id)
    summary: list[RunSummary] = []
    run = threading.Thread(
        target=lambda: summary.append(
            evaluate(
                grader,
                [instance],
                gold_predictions([instance]),
                "busy",
                root=tmp_path,
                report_dir=tmp_path,
                build=build,
            )
        )
    )
    run.start()
    deadline = time.monotonic() + 300
    while not log.exists() and time.monotonic() < deadline:  # the build has begun
        time.sleep(0.05)
    cleaned = subprocess.run(
        [sys.executable, "-c", GC, str(builder.options.store)],
        capture_output=True,
        text=True,
        check=True,
        timeout=500,
    )
    run.join()
    [outcome] = summary[0].outcomes
    assert outcome.status == "resolved", outcome
    assert instance.instance_id not in json.loads(cleaned.stdout)["removed"], cleaned.stdout
