"""The reward on real environments: more-itertools releases, its real test suite, real sandboxes.

Every verdict comes from a fresh local sandbox running the real eval script; wrong patches are
made from the gold ones (sweflow.grading.variants).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sweflow.grading import Grader, GradingError, RewardResult, reward
from sweflow.grading.variants import variant_predictions


@pytest.fixture(scope="module")
def grader(grading_data, grading_store, tmp_path_factory) -> Grader:
    return Grader(grading_store, grading_data.specs, log_dir=tmp_path_factory.mktemp("logs"))


@pytest.fixture(scope="module")
def instance(grading_data):
    return grading_data.rows[0]


def _variant(store, instance, name: str) -> str:
    made = variant_predictions(store, [instance], [name])[name]
    assert made, f"{name} does not fit {instance.instance_id}"
    return made[0].model_patch


def test_gold_patch_resolves_with_the_harness_files(grader, instance) -> None:
    result = grader.reward(instance, instance.patch)
    assert result.resolved, result.reason
    assert result.apply_status == "applied"
    assert (result.f2p_passed, result.p2p_passed) == (result.f2p_total, result.p2p_total)
    assert result.f2p_total == len(instance.FAIL_TO_PASS) > 0
    files = Path(result.log_path)
    names = {"report.json", "test_output.txt", "patch.diff", "eval.sh", "run_instance.log"}
    assert {p.name for p in files.iterdir()} == names
    report = json.loads((files / "report.json").read_text())
    assert report == {instance.instance_id: result.report}
    assert result.report["resolved"] and result.report["patch_successfully_applied"]
    assert (files / "patch.diff").read_text() == instance.patch
    log = (files / "test_output.txt").read_text()
    assert ">>>>> Start Test Output" in log and ">>>>> Test Exit Code: 0" in log
    assert " - INFO - >>>>> Applied Patch:" in (files / "run_instance.log").read_text()


@pytest.mark.parametrize(
    ("variant", "status"),
    [
        ("empty", "empty"),
        ("malformed", "malformed"),
        ("stale", "failed"),
        ("break", "applied"),
        ("revert_hunk", "applied"),
    ],
)
def test_wrong_patches_are_unresolved_with_a_reason(grader, instance, variant, status) -> None:
    result = grader.reward(instance, _variant(grader.store.root, instance, variant))
    assert not result.resolved
    assert result.apply_status == status, result.reason
    assert result.reason
    if status == "applied":  # graded: swebench's report names what failed
        assert result.report["patch_exists"] and result.f2p_passed < result.f2p_total
    else:
        assert result.report == {} and result.f2p_passed == 0


def test_patches_touching_tests_are_refused_by_the_tamper_guard(
    grading_data, grading_store, instance
) -> None:
    guarded = Grader(grading_store, grading_data.specs, tamper_guard=True)
    result = guarded.reward(instance, instance.patch + instance.test_patch)
    assert (result.resolved, result.apply_status) == (False, "touches_tests")
    assert "tests/" in result.reason and result.log_path is None
    assert guarded.reward(instance, instance.patch).resolved  # the gold patch edits no test


def test_a_hanging_eval_script_times_out(grading_store, instance) -> None:
    hanging = instance.model_copy(update={"eval_script": "#!/bin/bash\nsleep 600\n"})
    quick = Grader(grading_store, timeout_s=2)
    result = quick.reward(hanging, instance.patch)
    assert (result.resolved, result.apply_status) == (False, "timeout")
    assert result.duration_s < 30


def test_an_unbuilt_instance_is_an_error_naming_it(grading_data, grading_store, instance) -> None:
    ghost = instance.model_copy(update={"instance_id": "ghost__repo-1"})
    with pytest.raises(GradingError, match="ghost__repo-1: not built"):
        reward(ghost, instance.patch, store=grading_store, specs=grading_data.specs)
    no_specs = Grader(grading_store)
    with pytest.raises(GradingError, match="no eval_script and no environment specs"):
        no_specs.reward(instance, instance.patch)


def _grade_in_child(args) -> tuple[bool, str | None]:
    store, specs, log_dir, instance = args
    result = Grader(store, specs, log_dir=log_dir).reward(instance, instance.patch)
    return result.resolved, result.log_path


def test_threads_processes_and_asyncio_at_once(
    grading_data, grading_store, grader, instance
) -> None:
    """Six gradings of one instance at once: threads, processes and asyncio, own log dirs."""
    patches = [instance.patch, "", instance.patch]
    with ThreadPoolExecutor(3) as pool:
        threaded = list(pool.map(lambda p: grader.reward(instance, p), patches))
    context = multiprocessing.get_context("spawn")
    args = (grading_store, grading_data.specs, grader.log_dir, instance)
    with context.Pool(2) as pool:
        in_processes = pool.map(_grade_in_child, [args, args])

    async def gather() -> list[RewardResult]:
        return await asyncio.gather(*(grader.areward(instance, instance.patch) for _ in range(2)))

    awaited = asyncio.run(gather())
    assert [r.resolved for r in threaded] == [True, False, True]
    assert [r for r, _ in in_processes] == [True, True]
    assert all(r.resolved for r in awaited)
    paths = [r.log_path for r in threaded + awaited if r.log_path] + [p for _, p in in_processes]
    assert len(paths) == len(set(paths)) == 6
