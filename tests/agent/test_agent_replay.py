"""The replay teacher on a real sandbox: it reaches each place the gold patch changes only by
clues (the issue, a traceback, a search hit, a page it read), so that every file it opens or
edits was named before and every term it searches for was seen before; it declines a task no
clue leads through, with the reason; an edit whose text is not unique is widened with the lines
its views showed; a gold patch that cannot be read is refused up front. The whole demo set is
replayed in both tool modes and graded. (The imitability check itself: its own test below.)"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest
from unidiff import PatchSet

from sweflow.agent import AgentConfig, Batch, run_agent
from sweflow.agent.config import TeacherEdits
from sweflow.agent.runs.jobs import collect, replay_collect
from sweflow.agent.teacher.clues import names_path
from sweflow.agent.teacher.imitable import imitability
from sweflow.agent.teacher.replay import (
    Check,
    ReplayModel,
    line_edit,
    quiet,
    replay_check,
    replay_clients,
    smallest_edit,
)
from sweflow.agent.trajectory import ActionRecord, StepRecord, Trajectory
from sweflow.instances import Instance

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo" / "tasks.jsonl"

BLOCK = (
    "    total = 0\n    a = 1\n    b = 2\n    c = 3\n"
    "    for x in xs:\n        total += x\n    return total\n"
)
GIT = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT}
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    ).stdout


def fixed_layer(tmp_path: Path, source: str, fixed: str) -> tuple[Path, str]:
    """A layer whose repository holds calc.py as ``source`` (one commit), and the gold patch
    that makes it ``fixed``."""
    layer = tmp_path / "layer"
    repo = layer / "testbed"
    repo.mkdir(parents=True)
    (repo / "calc.py").write_text(source)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    (repo / "calc.py").write_text(fixed)
    patch = git(repo, "diff")
    git(repo, "checkout", "-q", "--", "calc.py")
    return layer, patch


@pytest.fixture
def twin_layer(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose two functions share their body; the gold patch fixes the second."""
    source = f"def first(xs):\n{BLOCK}\n\ndef second(xs):\n{BLOCK}"
    at = source.rindex("total += x")
    return fixed_layer(tmp_path, source, source[:at] + "total += 2 * x" + source[at + 10 :])


@pytest.mark.parametrize("mode", ["tools", "text"])
def test_an_edit_that_is_not_unique_is_widened(scratch, twin_layer, mode):
    layer, patch = twin_layer
    row = Instance(
        instance_id="demo__calc-1",
        repo="demo/calc",
        base_commit="HEAD",
        problem_statement="second() must double",
        patch=patch,
    )
    sandbox = scratch(layer)
    model = ReplayModel(row, mode, Check("python3 -c 'import calc; print(calc.second([1, 2]))'"))
    traj = asyncio.run(run_agent(row, sandbox, model, AgentConfig(tool_mode=mode)))
    assert traj.exit_status == "submitted" and traj.source == "replay"
    first = traj.steps[0].actions[0]
    assert first.args["command"] == r"grep -rnE '(def|class) second\b' --include='*.py' ."
    assert "./calc.py:11:def second(xs):" in first.observation
    thoughts = [s.thought for s in traj.steps]
    assert any("not unique" in t for t in thoughts), thoughts
    assert traj.patch == patch
    test_step = traj.steps[-2].actions[0]
    assert test_step.tool == "bash" and test_step.observation.strip() == "6"
    assert imitability(row.problem_statement, traj.steps, sandbox.spec.workdir).fraction == 1.0


def test_the_issues_searches_go_in_its_order_and_views_are_plain_pages(scratch, twin_layer) -> None:
    """The first failing test's name defines nothing: the teacher still searches for it first
    (a student cannot know that beforehand), shows that nothing was found, and goes on to the
    next; its view is the page of 40 lines from the ``def`` line the hit names, not a range
    ending where the definition or the gold hunk ends (which only the teacher knows)."""
    layer, patch = twin_layer
    issue = (
        "- `tests/test_calc.py::test_totals`: AssertionError: 3 != 6\n"
        "- `tests/test_calc.py::test_second`: AssertionError: 3 != 6\n"
    )
    row = Instance(
        instance_id="demo__calc-3",
        repo="demo/calc",
        base_commit="HEAD",
        problem_statement=issue,
        patch=patch,
    )
    sandbox = scratch(layer)
    model = ReplayModel(row, "text", Check("python3 -c 'import calc; print(calc.second([1, 2]))'"))
    traj = asyncio.run(run_agent(row, sandbox, model, AgentConfig(tool_mode="text")))
    assert traj.exit_status == "submitted" and traj.patch == patch
    missed, found, view = (s.actions[0] for s in traj.steps[:3])
    assert missed.args["command"] == r"grep -rnE '(def|class) totals\b' --include='*.py' ."
    assert "./calc.py" not in missed.observation
    assert found.args["command"] == r"grep -rnE '(def|class) second\b' --include='*.py' ."
    assert view.args["path"] == f"{sandbox.spec.workdir}/calc.py"
    assert view.args["view_range"] == [11, 50]
    assert imitability(row.problem_statement, traj.steps, sandbox.spec.workdir).fraction == 1.0


def test_a_tracebacks_frames_are_read_from_where_it_ends_upwards(scratch, tmp_path) -> None:
    """The reproduction's traceback ends in ``check``, far below ``total``, which holds the bug:
    the teacher reads the frame it ends in first and then the one above, as a student would (it
    cannot know which frame holds the bug), not straight the frame the fix goes in."""
    repo = tmp_path / "layer" / "testbed"
    repo.mkdir(parents=True)
    filler = "".join(f"def f{i}():\n    return {i}\n\n\n" for i in range(20))
    check = "def check(n):\n    if n < 0:\n        raise ValueError('negative')\n    return n\n"
    total = "def total(xs):\n    t = 0\n    for x in xs:\n        t {} x\n    return check(t)\n\n\n"
    (repo / "calc.py").write_text(total.format("-=") + filler + check)
    bin_dir = tmp_path / "layer" / "usr" / "local" / "bin"  # the reproduction runs `python`
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to("/usr/bin/python3")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    (repo / "calc.py").write_text(total.format("+=") + filler + check)
    patch = git(repo, "diff")
    git(repo, "checkout", "-q", "--", "calc.py")
    issue = "Totals fail:\n\n```python\nfrom calc import total\ntotal([1, 2])\n```\n"
    row = Instance(
        instance_id="demo__calc-5",
        repo="demo/calc",
        base_commit="HEAD",
        problem_statement=issue,
        patch=patch,
    )
    sandbox = scratch(tmp_path / "layer")
    model = ReplayModel(row, "text", Check("python3 -c 'import calc; print(calc.total([1]))'"))
    traj = asyncio.run(run_agent(row, sandbox, model, AgentConfig(tool_mode="text")))
    assert traj.exit_status == "submitted" and traj.patch == patch
    reproduce, deepest, above = (s.actions[0] for s in traj.steps[:3])
    assert "ValueError: negative" in reproduce.observation
    assert deepest.args["view_range"][0] > 40 and "raise ValueError" in deepest.observation
    assert "The traceback ends in `check`" in traj.steps[1].thought
    assert above.args["view_range"][0] == 1 and "t -= x" in above.observation
    assert "Next up the traceback: `total`" in traj.steps[2].thought
    assert imitability(row.problem_statement, traj.steps, sandbox.spec.workdir).fraction == 1.0


def _student_run(scratch, layer: Path, row: Instance, commands: list[str]):
    """The agent's run of a scripted student that replies ``commands`` in turn (/testbed in
    them is the sandbox's workdir): (the run, that workdir)."""
    from sweflow.agent import ModelClient, ModelConfig
    from sweflow.testing.scripted_model import scripted_endpoint

    sandbox = scratch(layer)
    wd = sandbox.spec.workdir
    script = layer.parent / "student.json"
    turns = [
        {"content": f"THOUGHT: next.\n\n```bash\n{c.replace('/testbed', wd)}\n```"}
        for c in commands
    ]
    script.write_text(json.dumps({"default": turns, "scripts": []}))

    async def go(url: str) -> Trajectory:
        client = ModelClient(ModelConfig(base_url=url, model="student", retry_budget_s=5))
        try:
            return await run_agent(row, sandbox, client, AgentConfig(tool_mode="text"))
        finally:
            await client.close()

    with scripted_endpoint(script, port=0) as (url, _):
        return asyncio.run(go(url)), wd


STUDENT_VIEW = "str_replace_editor view /testbed/calc.py --view_range '[1, 40]'"
STUDENT_EDIT = "str_replace_editor str_replace /testbed/calc.py --old_str 'a = 1' --new_str 'a = 2'"


@pytest.fixture
def calc_task(twin_layer) -> tuple[Path, Instance]:
    layer, patch = twin_layer
    issue = "- `tests/test_calc.py::test_totals`: AssertionError: 3 != 6\n- `test_second` too\n"
    row = Instance(
        instance_id="demo__calc-4",
        repo="demo/calc",
        base_commit="HEAD",
        problem_statement=issue,
        patch=patch,
    )
    return layer, row


def _corrections_of(
    run: Trajectory, layer: Path, row: Instance, workdir: str, edits: TeacherEdits = "str_replace"
) -> list[dict]:
    from sweflow.agent.teacher.corrections import corrections
    from sweflow.agent.teacher.source_map import SourceMap

    source = SourceMap({"calc.py": (layer / "testbed" / "calc.py").read_text()})
    return corrections(run, row, source, workdir, edits)


@pytest.mark.parametrize("edits", ["str_replace", "replace_lines"])
def test_the_teacher_corrects_the_students_own_states_until_its_first_edit(
    scratch, calc_task, edits: TeacherEdits
) -> None:
    """DAgger: a (scripted) student's run, labelled by the teacher. Where the student did what
    the teacher would (its first search), nothing is kept; where it did not, the conversation
    so far with the student's replies untrained, plus the teacher's reply from that state, is
    an SFT record: the search it should have made, then (once the student's own view showed
    the place) the edit, made with the editor command the golden runs use; after the student's
    own edit, nothing more."""
    layer, row = calc_task
    student = [
        r"grep -rnE '(def|class) totals\b' --include='*.py' .",  # as the teacher would
        "cat calc.py",
        STUDENT_VIEW,
        STUDENT_EDIT,
        "submit",
    ]
    run, wd = _student_run(scratch, layer, row, student)
    assert [s.actions[0].args.get("command", "submit")[:4] for s in run.steps] == [
        "grep",
        "cat ",
        "view",
        "str_",
        "subm",
    ]
    records = _corrections_of(run, layer, row, wd, edits)
    replies = [r["messages"][-1]["content"] for r in records]
    assert len(records) == 3, replies
    assert all("grep -rnE '(def|class) second\\b'" in reply for reply in replies[:2])
    assert f"str_replace_editor {edits} {wd}/calc.py" in replies[2]
    assert "total += 2 * x" in replies[2]
    if edits == "replace_lines":  # the gold hunk's changed line, as the student's view numbered it
        first, last, _ = line_edit(PatchSet(row.patch)[0][0])
        assert f"--line_range '[{first}, {last}]'" in replies[2] and first == last
    for record in records:
        context = record["messages"][:-1]
        assert record["source"] == "correction" and context[0] == run.messages[0]
        before = run.messages[: len(context)]
        assert [m["content"] for m in context] == [m["content"] for m in before]
        assert all(m["weight"] == 0 for m in context if m["role"] == "assistant")


def test_a_student_that_repeats_itself_is_corrected_at_the_repeat_and_no_further(
    scratch, calc_task
) -> None:
    """A student that comes back to an action it took before (here ``cat``, then ``ls``, then
    ``cat`` again, which the repeat guard does not catch: it compares a reply with the one
    before it only) is corrected at that reply; the
    states after it, whose history holds the loop, are not labelled (trained on, they taught
    the full learning run's model to loop)."""
    layer, row = calc_task
    student = ["cat calc.py", "ls", "cat calc.py", STUDENT_VIEW, STUDENT_EDIT, "submit"]
    run, wd = _student_run(scratch, layer, row, student)
    records = _corrections_of(run, layer, row, wd)
    assert len(records) == 3, [r["messages"][-1]["content"] for r in records]
    repeated = [m["content"] for m in records[-1]["messages"] if m["role"] == "assistant"]
    assert len(repeated) == 3 and "cat calc.py" not in repeated[-1]


def test_a_replay_longer_than_the_agents_step_limit_is_declined(scratch, twin_layer) -> None:
    """Cut by ``max_steps``, a replay would be kept without its submit (a golden run that
    teaches running out of steps): the teacher declines at the last step instead."""
    layer, patch = twin_layer
    row = Instance(
        instance_id="demo__calc-5",
        repo="demo/calc",
        base_commit="HEAD",
        problem_statement="second() must double",
        patch=patch,
    )
    sandbox = scratch(layer)
    model = ReplayModel(row, "text", Check("true"), max_steps=3)
    traj = asyncio.run(run_agent(row, sandbox, model, AgentConfig(tool_mode="text", max_steps=3)))
    assert traj.exit_status == "declined" and len(traj.steps) == 2, traj.exit_status
    assert traj.error == "the replay needs more than the agent's 3 steps"


def test_a_task_no_clue_leads_to_is_declined_with_its_reason(
    scratch_spec, twin_layer, tmp_path
) -> None:
    layer, patch = twin_layer
    row = Instance(
        instance_id="demo__calc-2",
        repo="demo/calc",
        base_commit="HEAD",
        problem_statement="The totals are wrong.",
        patch=patch,
    )
    graded = []

    async def grade(instance: Instance, patch: str) -> dict:
        graded.append(instance.instance_id)
        return {"resolved": False}

    client_for, skipped = replay_clients([row], "text", None)
    agent = AgentConfig(tool_mode="text")
    batch = Batch(
        client=None,
        client_for=client_for,
        agent=agent,
        out_dir=tmp_path,
        spec_for=lambda _: scratch_spec(layer),
        backend="scratch",
        grade=grade,
    )
    summary = asyncio.run(collect([row], batch))
    assert skipped == {} and graded == [] and summary.kept == 0
    why = summary.skipped["demo__calc-2"]
    assert why.startswith("no clue leads to calc.py lines"), why
    traj = Trajectory.load(tmp_path / "trajectories" / "demo__calc-2" / "run-0.json")
    assert traj.exit_status == "declined" and traj.steps == [] and traj.patch == ""


def test_imitability_holds_each_step_to_what_was_seen_before_it() -> None:
    issue = (
        "- `tests/test_parse.py::test_precision`: ValueError: format spec '7f' not recognised\n"
        "```python\nimport parse\nparse.parse('{:7f}', '1')\n```\n"
    )
    hit = "./parse.py:400:        raise ValueError('format spec %r not recognised' % format)\n"

    def act(command: str, observation: str = "", **args: object) -> ActionRecord:
        if command.startswith(("view", "str_replace")):
            return ActionRecord(
                tool="str_replace_editor",
                args={"command": command, **args},
                observation=observation,
            )
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
    result = imitability(
        issue, [StepRecord(index=i, actions=[a]) for i, a in enumerate(steps)], "/testbed"
    )
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
        Instance(
            instance_id="ok-1",
            repo="r",
            base_commit="HEAD",
            problem_statement="p",
            patch="--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
        ),
        Instance(instance_id="empty-1", repo="r", base_commit="HEAD", problem_statement="p"),
        Instance(
            instance_id="bad-1",
            repo="r",
            base_commit="HEAD",
            problem_statement="p",
            patch="--- a/x\n+++ b/x\n@@ -1,5 +1 @@\n-a\n",
        ),
    ]
    _, skipped = replay_clients(rows, "text", None)
    assert set(skipped) == {"empty-1", "bad-1"}
    assert "empty-1: its gold patch is empty" in skipped["empty-1"]
    assert skipped["bad-1"].startswith("bad-1: its gold patch cannot be read")


def test_the_test_step_runs_the_visible_failing_tests_it_knows_of_quietly() -> None:
    test_patch = (
        "diff --git a/tests/test_new.py b/tests/test_new.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/test_new.py\n@@ -0,0 +1 @@\n+x = 1\n"
    )
    failing = ["tests/test_old.py::test_a", "tests/test_new.py::test_b"]
    row = Instance(
        instance_id="r-1",
        repo="r",
        base_commit="HEAD",
        problem_statement="p",
        test_patch=test_patch,
        FAIL_TO_PASS=failing,
    )
    check = replay_check(row, "pytest -rA -p no:cacheprovider")
    assert check == Check("pytest -p no:cacheprovider -q --tb=short", ("tests/test_old.py",))
    named = "the test `tests/test_old.py::test_a` fails"
    assert (
        check.line(named, "/testbed")
        == "pytest -p no:cacheprovider -q --tb=short tests/test_old.py"
    )
    assert check.line("nothing named", "/testbed") == "pytest -p no:cacheprovider -q --tb=short"
    assert quiet("./runtests.py --verbosity 2") == "./runtests.py --verbosity 2"
    assert replay_check(row, ["make test", "make check"]) == Check("make test && make check")


@pytest.mark.parametrize(
    ("mode", "edits"),
    [  # the first builds the demo's 36 environments
        pytest.param("text", "str_replace", marks=pytest.mark.slow(minutes=6)),
        pytest.param("tools", "str_replace", marks=pytest.mark.slow(minutes=5)),
        pytest.param("text", "replace_lines", marks=pytest.mark.slow(minutes=5)),
    ],
)
def test_every_demo_replay_is_imitable_and_resolves(grading_dataset, tmp_path, mode, edits):
    """Every view, edit and run of each kept replay rests on the issue or an earlier observation
    (the old oracle's first step, a view of the gold file at the gold line, did not), every task
    is either resolved or declined with its reason, and nothing is kept that is not resolved;
    with either editor command for the edits."""
    data, store = grading_dataset(DEMO)
    rows = {row.instance_id: row for row in data.rows}
    summary = replay_collect(
        list(rows.values()),
        store=store,
        specs=data.specs,
        out_dir=tmp_path,
        agent=AgentConfig(tool_mode=mode),
        edits=edits,
    )
    assert summary.runs == len(rows) == summary.kept + len(summary.skipped)
    assert summary.kept >= 30 and summary.imitable_fraction == 1.0, summary
    for instance_id, row in rows.items():
        traj = Trajectory.load(tmp_path / "trajectories" / instance_id / "run-0.json")
        assert traj.tool_mode == mode and traj.source == "replay"
        if instance_id in summary.skipped:
            assert traj.exit_status == "declined" and traj.reward is None
            assert summary.skipped[instance_id] == traj.error and "no clue leads to" in traj.error
            continue
        assert traj.resolved, (instance_id, traj.reward)
        check = imitability(row.problem_statement, traj.steps, "/testbed")
        assert check.ungrounded == [] and check.checked >= 3, (instance_id, check)
        seen, gold = row.problem_statement, {f.path for f in PatchSet(row.patch)}
        for step in traj.steps:
            for action in step.actions:
                if action.tool == "str_replace_editor":
                    assert action.args["command"] in ("view", "create", edits), instance_id
                    path = action.args["path"].removeprefix("/testbed/")
                    assert names_path(seen, path, "/testbed"), (instance_id, step.index)
                    assert path in gold or action.args["command"] == "view", instance_id
            seen += "".join("\n" + a.observation for a in step.actions)
    print(
        f"{mode}: {summary.kept} kept, {len(summary.skipped)} skipped, imitable fraction "
        f"{summary.imitable_fraction}; skipped: {summary.skipped}"
    )


@pytest.mark.slow(minutes=3)
def test_two_replays_without_durations_write_the_same_sft_data(grading_dataset, tmp_path):
    """The golden trajectories of a seed repeat: two replays of the same tasks differ only by
    the test runs' durations (``3 passed in 0.61s``), which ``hide_durations`` cuts."""
    data, store = grading_dataset(DEMO, sample=8)
    rows = data.sample(8)

    def sft_text(name: str, hide_durations: bool) -> str:
        summary = replay_collect(
            rows,
            store=store,
            specs=data.specs,
            out_dir=tmp_path / name,
            agent=AgentConfig(tool_mode="text", hide_durations=hide_durations),
            edits="replace_lines",
        )
        assert summary.kept >= 5, summary
        return Path(summary.outputs["openai"]).read_text()

    first, second = sft_text("first", True), sft_text("second", True)
    assert first == second
    assert " passed in " in sft_text("kept", False) and " passed in " not in first


def test_an_edit_is_the_changed_lines_widened_only_until_unique() -> None:
    source = "def f(x):\n    y = 1\n    y = 1\n    if x:\n        return y\n    return 0\n"
    fixed = source.replace("    if x:", "    if not x:")
    hunk = _diff("m.py", source, fixed)
    assert smallest_edit(hunk, source) == ("    if x:\n", "    if not x:\n")
    # "    y = 1" twice: a change to the second is widened a line each side, which is unique
    twice = source.replace("    y = 1\n    if", "    y = 2\n    if")
    assert smallest_edit(_diff("m.py", source, twice), source) == (
        "    y = 1\n    y = 1\n    if x:\n",
        "    y = 1\n    y = 2\n    if x:\n",
    )


def test_a_line_edit_is_the_changed_lines_and_an_insertion_takes_the_line_above() -> None:
    source = "".join(f"line {n}\n" for n in range(1, 21))
    changed = source.replace("line 9\nline 10\n", "line nine\nline ten\n")
    assert line_edit(_diff("m.py", source, changed)) == (9, 10, "line nine\nline ten\n")
    deleted = source.replace("line 12\n", "")
    assert line_edit(_diff("m.py", source, deleted)) == (12, 12, "")
    # lines only added: the range names the line above them, which the new text keeps
    added = source.replace("line 5\n", "line 5\nline 5.5\n")
    assert line_edit(_diff("m.py", source, added)) == (5, 5, "line 5\nline 5.5\n")
    # at the top of the file there is no line above: the one below
    top = "# header\n" + source
    assert line_edit(_diff("m.py", source, top)) == (1, 1, "# header\nline 1\n")


@pytest.mark.parametrize("mode", ["tools", "text"])
def test_line_edits_name_the_viewed_lines_and_go_bottom_up(scratch, tmp_path, mode) -> None:
    """A two-hunk fix made with ``replace_lines``: each edit names lines as the views numbered
    them, the lower hunk first so that the upper one's numbers still hold; the patch is the
    gold patch and every step rests on what the run had seen."""
    body = "".join(f"    v{n} = {n}\n" for n in range(30))
    source = f"def first(xs):\n{body}    return sum(xs)\n\n\ndef second(xs):\n{body}    return xs\n"
    fixed = source.replace("    return sum(xs)\n", "    return sum(xs) + 1\n").replace(
        "    return xs\n", "    xs = sorted(xs)\n    return xs\n"
    )
    layer, patch = fixed_layer(tmp_path, source, fixed)
    row = Instance(
        instance_id="demo__calc-2",
        repo="demo/calc",
        base_commit="HEAD",
        problem_statement="first() is off by one and second() must sort",
        patch=patch,
    )
    sandbox = scratch(layer)
    check = Check("python3 -c 'import calc; print(calc.first([1]), calc.second([2, 1]))'")
    model = ReplayModel(row, mode, check, edits="replace_lines")
    traj = asyncio.run(run_agent(row, sandbox, model, AgentConfig(tool_mode=mode)))
    assert traj.exit_status == "submitted", traj.error
    edits = [
        a.args for s in traj.steps for a in s.actions if a.args.get("command") == "replace_lines"
    ]
    assert [e["line_range"] for e in edits] == [[65, 65], [32, 32]]  # second's, then first's
    # an insertion before `return xs` replaces the line above it with itself and the new line
    assert edits[0]["new_str"] == "    v29 = 29\n    xs = sorted(xs)\n"
    assert traj.patch == patch
    assert traj.steps[-2].actions[0].observation.strip() == "2 [1, 2]"
    assert imitability(row.problem_statement, traj.steps, sandbox.spec.workdir).fraction == 1.0


def _diff(name: str, before: str, after: str):
    import difflib

    text = "".join(
        difflib.unified_diff(
            before.splitlines(True), after.splitlines(True), f"a/{name}", f"b/{name}"
        )
    )
    return PatchSet(text)[0][0]


def test_sweflow_correct_writes_the_corrections_of_a_runs_folder(
    demo_replays, wheelhouse, tmp_path
) -> None:
    """The command over a student's runs folder: its table and corrections.jsonl; a file in the
    folder that is not a saved run is named, and nothing is written."""
    from typer.testing import CliRunner

    from sweflow.cli import app

    gold = demo_replays.collected
    golden = Trajectory.load(next((gold / "trajectories").glob("*/run-0.json")))
    student = golden.model_copy(deep=True)
    student.steps[0].actions = [ActionRecord(tool="bash", args={"command": "ls"}, observation="")]
    runs = tmp_path / "student"
    student.save(runs / "trajectories" / student.instance_id / "run-0.json")
    argv = [
        "correct",
        str(runs),
        "-d",
        str(DEMO),
        "-s",
        str(demo_replays.store),
        "--wheelhouse",
        str(wheelhouse),
        "-o",
        str(tmp_path / "out"),
    ]
    result = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "corrections" in result.output and "sweflow correct" in result.output
    records = (tmp_path / "out" / "corrections.jsonl").read_text().splitlines()
    assert records and json.loads(records[0])["instance_id"] == student.instance_id
    broken = runs / "trajectories" / student.instance_id / "run-1.json"
    broken.write_text("{not json")
    result = CliRunner().invoke(app, [*argv[:-1], str(tmp_path / "again")], env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "run-1.json: not a saved agent run" in result.output
    assert not (tmp_path / "again").exists()


def test_sweflow_correct_refuses_an_unknown_editor_command_before_any_work(tmp_path) -> None:
    from typer.testing import CliRunner

    from sweflow.cli import app

    out = tmp_path / "out"
    argv = [
        "correct",
        str(tmp_path),
        "-d",
        str(DEMO),
        "-s",
        str(tmp_path / "store"),
        "-o",
        str(out),
    ]
    result = CliRunner().invoke(app, [*argv, "--teacher-edits", "edit"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "choose str_replace or replace_lines" in result.output
    assert not out.exists() and not (tmp_path / "store").exists()


def test_corrections_of_runs_on_built_tasks_read_each_tasks_source(demo_replays, tmp_path):
    """The job: a student run that started with `ls` where the teacher would not gets, at its
    first state, the teacher's own first step (read from the task's sandbox), and is written
    as SFT data; the teacher's own golden runs get no correction; a run of a task the dataset
    does not have is refused by name."""
    from sweflow.agent.runs.jobs import replay_corrections
    from sweflow.agent.teacher.replay import ReplayError

    store, gold = demo_replays.store, demo_replays.collected
    golden = Trajectory.load(next((gold / "trajectories").glob("*/run-0.json")))
    student = golden.model_copy(deep=True)
    student.steps[0].actions = [ActionRecord(tool="bash", args={"command": "ls"}, observation="")]
    out = tmp_path / "corrections.jsonl"
    rows = demo_replays.data.rows
    assert replay_corrections([student], rows, store=store, out=out) >= 1
    first = json.loads(out.read_text().splitlines()[0])
    assert first["instance_id"] == golden.instance_id and first["source"] == "correction"
    teacher = next(m for m in golden.messages if m["role"] == "assistant")
    assert first["messages"][-1] == teacher
    teachers = [Trajectory.load(p) for p in sorted((gold / "trajectories").glob("*/run-0.json"))]
    assert replay_corrections(teachers, rows, store=store, out=out) == 0
    assert out.read_text() == ""  # the teacher's own runs, run as the student, need none
    stranger = golden.model_copy(update={"instance_id": "nobody__nothing-1"})
    with pytest.raises(ReplayError, match="nobody__nothing-1"):
        replay_corrections([stranger], rows, store=store, out=out)
