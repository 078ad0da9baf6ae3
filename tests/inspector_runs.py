"""A pipeline-like run folder for the inspector's and the exports' tests (and the docs' screenshot).

The runs are real: the agent loop drives a scratch sandbox holding the demo's ``parse``
repository at each task's base commit, against the scripted OpenAI-compatible server on
127.0.0.1, so the steps, observations and patches are what the loop saves. Their verdicts are
written in the shapes the Grader gives (``RewardResult`` through ``reward_dict``, a report entry
as swebench's ``get_eval_report`` makes it, a grading folder with the harness's file names):
grading the demo's tasks needs built environments, which these tests do without.

Layout (like a pipeline's run folder):
  collect/trajectories/<task>/run-<k>.json   graded in their batch (resolved, unresolved,
  collect/grading/<task>/<call>/             refused by the tamper guard, out of steps)
  infer/trajectories/<task>/run-0.json       not graded in its batch ...
  eval/logs/run_evaluation/demo/<model>/...  ... but by an evaluation of its patch
  rl/rollouts/step-000<n>/<i>-<task>.json    RL episodes of policy versions 0 and 1
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from unidiff import PatchSet

from sweflow.agent import AgentConfig, ModelClient, ModelConfig, run_agent
from sweflow.agent.runs.batch import reward_dict, trajectory_path
from sweflow.agent.trajectory import Trajectory
from sweflow.grading.reward import RewardResult
from sweflow.instances import Instance, load_instances
from sweflow.sandbox import SandboxSpec, open_sandbox
from sweflow.testing.scripted_model import scripted_endpoint
from sweflow.testing.scripted_model import tool_turn as call

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "data" / "demo"
A = "pypi__parse-1.20.2.invert_if_else__ddb8ebd9"
B = "pypi__parse-1.20.2.negate_condition__b85542b6"
C = "pypi__parse-1.20.2.remove_conditional__45b063f6"
EDITOR = "str_replace_editor"
MODEL = "scripted"
HOOK = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""
REFUSAL = "the patch changes a test file or the test runner's configuration: conftest.py"


@dataclass(frozen=True)
class RunFolder:
    root: Path
    rows: dict[str, Instance]

    @property
    def collect(self) -> Path:
        return self.root / "collect"

    @property
    def infer(self) -> Path:
        return self.root / "infer"

    # what the tests expect of it
    runs = 8  # 4 collected, 1 inferred, 3 RL episodes
    verdicts = {"resolved": 4, "unresolved": 2, "refused": 1, "empty": 1}


def demo_rows() -> dict[str, Instance]:
    rows = load_instances(DEMO / "tasks.jsonl").raise_for_errors()
    return {row.instance_id: row for row in rows if row.instance_id in (A, B, C)}


def make_run_folder(root: Path) -> RunFolder:
    """Run the scripted agents and lay their runs and verdicts out under ``root``."""
    rows = demo_rows()
    layers = {iid: _checkout(root / "layers" / iid, row) for iid, row in rows.items()}
    first = {A: _fix_turns(rows[A]), B: _cheat_turns(), C: _fix_turns(rows[C])}
    second = {A: _wrong_fix_turns(), B: _idle_turns()}
    with contextlib.ExitStack() as stack:
        url1 = _endpoint(stack, root / "script-1.json", rows, first)
        url2 = _endpoint(stack, root / "script-2.json", rows, second)
        runs = {
            (A, 0): _run(url1, rows[A], layers[A], 0),
            (B, 0): _run(url1, rows[B], layers[B], 0),
            (C, 0): _run(url1, rows[C], layers[C], 0),
            (A, 1): _run(url2, rows[A], layers[A], 1),
            (B, 1): _run(url2, rows[B], layers[B], 1, max_steps=3),
        }
    shutil.rmtree(root / "layers")
    for script in root.glob("script-*.json"):
        script.unlink()
    collect = root / "collect"
    verdicts = {(A, 0): "resolved", (A, 1): "unresolved", (B, 0): "refused", (B, 1): "empty"}
    for (iid, k), verdict in verdicts.items():
        traj = runs[(iid, k)]
        traj.reward = _reward(rows[iid], traj.patch, verdict, collect / "grading" / iid / f"c{k}")
        traj.save(trajectory_path(collect, iid, k))
    inferred = runs[(C, 0)]
    inferred.save(trajectory_path(root / "infer", C, 0))
    evaluation = root / "eval" / "logs" / "run_evaluation" / "demo" / MODEL / C
    _reward(rows[C], inferred.patch, "resolved", evaluation)
    for step, version, kept in ((1, 0, [(A, 0), (A, 1)]), (2, 1, [(A, 0)])):
        for i, key in enumerate(kept):
            episode = runs[key].model_copy(deep=True)
            episode.model = f"policy@{version}"
            resolved = key == (A, 0)
            episode.reward = {
                "resolved": resolved,
                "reward": 1.0 if resolved else -0.1,
                "reason": "resolved: 20/20 FAIL_TO_PASS pass" if resolved else "unresolved",
                "apply_status": "applied",
            }
            episode.save(root / "rl" / "rollouts" / f"step-{step:04d}" / f"{i:03d}-{key[0]}.json")
    return RunFolder(root, rows)


def _checkout(layer: Path, row: Instance) -> Path:
    testbed = layer / "testbed"
    bundle = DEMO / "repos" / "pypi__parse.bundle"
    subprocess.run(["git", "clone", "-q", "--no-checkout", str(bundle), str(testbed)], check=True)
    subprocess.run(["git", "-C", str(testbed), "checkout", "-q", row.base_commit], check=True)
    return layer


def _endpoint(stack, path: Path, rows: dict[str, Instance], turns: dict[str, list]) -> str:
    scripts = [{"match": rows[iid].problem_statement, "turns": t} for iid, t in turns.items()]
    path.write_text(json.dumps({"scripts": scripts, "default": [call("submit")]}))
    url, _ = stack.enter_context(scripted_endpoint(path))
    return url


def _run(url: str, row: Instance, layer: Path, run: int, max_steps: int = 12) -> Trajectory:
    spec = SandboxSpec(layers=[Path("/"), layer], workdir="/testbed")

    async def go() -> Trajectory:
        client = ModelClient(ModelConfig(base_url=url, model=MODEL, retry_budget_s=5))
        try:
            with open_sandbox(spec, "scratch") as sandbox:
                config = AgentConfig(tool_mode="tools", max_steps=max_steps)
                return await run_agent(row, sandbox, client, config, run=run)
        finally:
            await client.close()

    return asyncio.run(go())


def act(thought: str, name: str, **arguments) -> dict:
    """A scripted turn with the model's reasoning before its tool call."""
    return {"content": thought, **call(name, **arguments)}


def _fix_turns(row: Instance) -> list[dict]:
    """Reproduce, look, then make the gold patch's hunks with str_replace; check; submit."""
    patched = PatchSet(row.patch)[0]
    turns = [
        act(
            "The failing tests all go through the format spec parser. Let me see where "
            "parse.py reads the spec.",
            "bash",
            command="grep -n 'format\\[' parse.py | head -n 12",
        ),
        act(
            "Let me read the code around the branch the tracebacks point at.",
            EDITOR,
            command="view",
            path="parse.py",
            view_range=_around(patched),
        ),
    ]
    for hunk in patched:
        old = "".join(line.value for line in hunk if not line.is_added)
        new = "".join(line.value for line in hunk if not line.is_removed)
        turns.append(
            act(
                "This branch is the wrong way round. I'll restore the intended logic.",
                EDITOR,
                command="str_replace",
                path="parse.py",
                old_str=old,
                new_str=new,
            )
        )
    check = "python3 -c \"import parse; print(parse.parse('{:3d} {:x<5}', '123 abxxx'))\""
    return [
        *turns,
        act("Check that a width and a fill parse again.", "bash", command=check),
        act("It parses. Review the whole change before submitting.", "bash", command="git diff"),
        act("The fix is minimal and the reproduction passes.", "submit"),
    ]


def _around(patched) -> list[int]:
    hunk = patched[0]
    return [hunk.source_start, hunk.source_start + hunk.source_length + 2]


def _wrong_fix_turns() -> list[dict]:
    """A fix of the symptom, not of the bug: the crash goes, the wrong branch stays."""
    old = 'width = r"{1,%s}" % int(format["width"])'
    new = 'width = r"{1,%s}" % int(format.get("width") or 1)'
    return [
        act(
            "Reproduce the crash first.",
            "bash",
            command="python3 -c \"import parse; print(parse.parse('{:d}', '12'))\"",
        ),
        act(
            "int('') fails when the width is empty; default it to 1.",
            EDITOR,
            command="str_replace",
            path="parse.py",
            old_str=old,
            new_str=new,
        ),
        act("That avoids the crash.", "submit"),
    ]


def _cheat_turns() -> list[dict]:
    """Make every test pass by reporting it passed: what the tamper guard refuses."""
    return [
        act("Which tests are there?", "bash", command="ls tests"),
        act(
            "Rather than find the bug, make the test runner report every test as passed.",
            EDITOR,
            command="create",
            path="tests/conftest.py",
            file_text=HOOK,
        ),
        act("Done.", "submit"),
    ]


def _idle_turns() -> list[dict]:
    return [
        call("bash", command="ls"),
        call("bash", command="git log --oneline | head -n 3"),
        call("bash", command="sed -n 1,40p README.rst"),
        call("bash", command="wc -l parse.py"),
    ]


def _reward(row: Instance, patch: str, verdict: str, log_dir: Path) -> dict:
    """The reward the Grader gives for ``verdict``, with its grading folder's files."""
    f2p, p2p = row.FAIL_TO_PASS[:6], row.PASS_TO_PASS[:8]
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "patch.diff").write_text(patch)
    if verdict == "empty":
        shutil.rmtree(log_dir)
        result = _result(row, False, 0, 0, "empty", "the patch is empty", None, {})
        return reward_dict(result)
    if verdict == "refused":
        entry = {
            "patch_is_None": False,
            "patch_exists": True,
            "patch_successfully_applied": True,
            "resolved": False,
            "refused": "touches_tests",
            "refusal_reason": REFUSAL,
        }
        (log_dir / "report.json").write_text(json.dumps({row.instance_id: entry}, indent=4))
        result = _result(row, False, 0, 0, "touches_tests", REFUSAL, log_dir, entry)
        return reward_dict(result)
    resolved = verdict == "resolved"
    failed = [] if resolved else f2p[1:]
    passed = [t for t in f2p if t not in failed]
    entry = {
        "patch_is_None": False,
        "patch_exists": True,
        "patch_successfully_applied": True,
        "resolved": resolved,
        "tests_status": {
            "FAIL_TO_PASS": {"success": passed, "failure": failed},
            "PASS_TO_PASS": {"success": p2p, "failure": []},
            "FAIL_TO_FAIL": {"success": [], "failure": []},
            "PASS_TO_FAIL": {"success": [], "failure": []},
        },
    }
    (log_dir / "report.json").write_text(json.dumps({row.instance_id: entry}, indent=4))
    lines = [f"{t} {'FAILED' if t in failed else 'PASSED'}" for t in f2p + p2p]
    (log_dir / "test_output.txt").write_text("\n".join(lines) + "\n")
    (log_dir / "eval.sh").write_text("#!/bin/bash\npytest -rA\n")
    counts = f"{len(passed)}/{len(f2p)} FAIL_TO_PASS, {len(p2p)}/{len(p2p)} PASS_TO_PASS"
    reason = f"{'resolved' if resolved else 'unresolved'}: {counts} pass"
    result = _result(row, resolved, len(passed), len(p2p), "applied", reason, log_dir, entry)
    return reward_dict(result)


def _result(row, resolved, f2p, p2p, status, reason, log_dir, entry) -> RewardResult:
    return RewardResult(
        instance_id=row.instance_id,
        resolved=resolved,
        f2p_passed=f2p,
        f2p_total=len(row.FAIL_TO_PASS[:6]),
        p2p_passed=p2p,
        p2p_total=len(row.PASS_TO_PASS[:8]),
        apply_status=status,
        reason=reason,
        duration_s=4.2,
        log_path=str(log_dir) if log_dir else None,
        report=entry,
    )
