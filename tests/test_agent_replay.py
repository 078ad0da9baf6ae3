"""The replay teacher on a real sandbox: an edit whose text is not unique in its file is widened
with the lines the replay's view showed, and a gold patch that cannot be read is refused up front.
(Replays of real rows in both tool modes: tests/test_agent_collect.py.) And the imitability check
that holds each step of a run to what the run had seen before it."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from sweflow.agent import AgentConfig, run_agent
from sweflow.agent.imitable import imitability
from sweflow.agent.replay import ReplayModel, quiet, replay_clients, replay_test_command
from sweflow.agent.trajectory import ActionRecord, StepRecord
from sweflow.instances import Instance

BLOCK = (
    "    total = 0\n    a = 1\n    b = 2\n    c = 3\n"
    "    for x in xs:\n        total += x\n    return total\n"
)
GIT = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


@pytest.fixture
def twin_layer(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose two functions share their body; the gold patch fixes the second."""
    layer = tmp_path / "layer"
    repo = layer / "testbed"
    repo.mkdir(parents=True)
    source = f"def first(xs):\n{BLOCK}\n\ndef second(xs):\n{BLOCK}"
    (repo / "calc.py").write_text(source)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    fixed = (
        source[: source.rindex("total += x")]
        + "total += 2 * x"
        + source[source.rindex("total += x") + len("total += x") :]
    )
    (repo / "calc.py").write_text(fixed)
    patch = git(repo, "diff")
    git(repo, "checkout", "-q", "--", "calc.py")
    return layer, patch


@pytest.mark.parametrize("mode", ["tools", "text"])
def test_an_edit_that_is_not_unique_is_widened(sandbox_spec, open_local, twin_layer, mode):
    layer, patch = twin_layer
    row = Instance(instance_id="demo__calc-1", repo="demo/calc", base_commit="HEAD",
                   problem_statement="second() must double", patch=patch)  # fmt: skip
    sandbox = open_local(sandbox_spec(layer))
    model = ReplayModel(row, mode, "python3 -c 'import calc; print(calc.second([1, 2]))'")
    traj = asyncio.run(run_agent(row, sandbox, model, AgentConfig(tool_mode=mode)))
    assert traj.exit_status == "submitted" and traj.source == "replay"
    thoughts = [s.thought for s in traj.steps]
    assert any("not unique" in t for t in thoughts), thoughts
    assert traj.patch == patch
    test_step = traj.steps[-2].actions[0]
    assert test_step.tool == "bash" and test_step.observation.strip() == "6"


def test_imitability_holds_each_step_to_what_was_seen_before_it() -> None:
    issue = (
        "- `tests/test_parse.py::test_precision`: ValueError: format spec '7f' not recognised\n"
        "```python\nimport parse\nparse.parse('{:7f}', '1')\n```\n"
    )
    hit = "./parse.py:400:        raise ValueError('format spec %r not recognised' % format)\n"

    def act(command: str, observation: str = "", **args: object) -> ActionRecord:
        if command.startswith(("view", "str_replace")):
            return ActionRecord(tool="str_replace_editor", args={"command": command, **args},
                                observation=observation)  # fmt: skip
        return ActionRecord(tool="bash", args={"command": command}, observation=observation)

    steps = [
        act("view", path="/testbed/parse.py"),  # the oracle's first step: only test_parse.py named
        act("python - <<'EOF'\nimport parse\nparse.parse('{:7f}', '1')\nEOF", "ValueError"),
        act("grep -rnF 'not recognised' --include='*.py' .", hit),
        act(r"grep -rnE '(def|class) compile\b' --include='*.py' ."),  # compile: seen nowhere
        act("view", path="/testbed/parse.py", view_range=[390, 410]),  # the hit named it
        act("python -m pytest -q tests/test_other.py"),  # a file nothing named
        act("python -m pytest -q"),  # names no file: not checked
        ActionRecord(tool="submit"),
    ]
    result = imitability(issue, [StepRecord(index=i, actions=[a]) for i, a in enumerate(steps)],
                         "/testbed")  # fmt: skip
    assert (result.checked, result.grounded) == (6, 3)
    assert result.ungrounded == [
        "step 0: view parse.py: not named before",
        "step 3: searches for 'compile': seen nowhere before",
        "step 5: runs with tests/test_other.py: not named before",
    ]
    together = StepRecord(index=0, actions=[steps[2], steps[4]])  # chosen before either answer
    assert imitability(issue, [together], "/testbed").grounded == 1


def test_rows_whose_gold_patch_cannot_be_read_are_named_and_skipped() -> None:
    rows = [
        Instance(instance_id="ok-1", repo="r", base_commit="HEAD", problem_statement="p",
                 patch="--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"),
        Instance(instance_id="empty-1", repo="r", base_commit="HEAD", problem_statement="p"),
        Instance(instance_id="bad-1", repo="r", base_commit="HEAD", problem_statement="p",
                 patch="--- a/x\n+++ b/x\n@@ -1,5 +1 @@\n-a\n"),
    ]  # fmt: skip
    _, skipped = replay_clients(rows, "text", None)
    assert set(skipped) == {"empty-1", "bad-1"}
    assert "empty-1: its gold patch is empty" in skipped["empty-1"]
    assert skipped["bad-1"].startswith("bad-1: its gold patch cannot be read")


def test_the_test_step_runs_visible_failing_tests_quietly() -> None:
    test_patch = (
        "diff --git a/tests/test_new.py b/tests/test_new.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/test_new.py\n@@ -0,0 +1 @@\n+x = 1\n"
    )
    failing = ["tests/test_old.py::test_a", "tests/test_new.py::test_b"]
    row = Instance(instance_id="r-1", repo="r", base_commit="HEAD", problem_statement="p",
                   test_patch=test_patch, FAIL_TO_PASS=failing)  # fmt: skip
    command = replay_test_command(row, "pytest -rA -p no:cacheprovider")
    assert command == "pytest -p no:cacheprovider -q --tb=short tests/test_old.py"
    assert quiet("./runtests.py --verbosity 2") == "./runtests.py --verbosity 2"
    assert replay_test_command(row, ["make test", "make check"]) == "make test && make check"
