"""The agent loop on real sandboxes against a real (scripted) OpenAI-compatible HTTP server.

The sandboxes are scratch ones (a real bash, git and python on the host's files, no rootfs or
namespaces): what is tested is the loop, not isolation. Their workdir is a host path, so the
scripted model names files under the sandbox's own ``spec.workdir``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from sweflow.agent import AgentConfig, Batch, ModelClient, ModelConfig, run_agent
from sweflow.agent.loop import REPEATED
from sweflow.agent.trajectory import Trajectory
from sweflow.instances import Instance
from sweflow.testing.scripted_model import scripted_endpoint
from sweflow.testing.scripted_model import tool_turn as call

ISSUE = "hello() should greet the world"


def text(content: str) -> dict:
    return {"content": content}


def bash_block(command: str, thought: str = "THOUGHT: next step.") -> dict:
    return text(f"{thought}\n\n```bash\n{command}\n```")


@pytest.fixture
def endpoint(tmp_path: Path):
    """``endpoint(turns=..., scripts=..., port=0)`` -> (base URL, process); all stopped after."""
    stack = contextlib.ExitStack()

    def start(turns=None, scripts=None, port: int = 0, latency_s: float = 0.0, **extra):
        path = tmp_path / f"script-{len(stack._exit_callbacks)}.json"
        path.write_text(json.dumps({"default": turns or [], "scripts": scripts or [], **extra}))
        return stack.enter_context(scripted_endpoint(path, port=port, latency_s=latency_s))

    with stack:
        yield start


def instance(instance_id: str = "demo__hello-1", issue: str = ISSUE) -> Instance:
    return Instance(
        instance_id=instance_id, repo="demo/hello", base_commit="HEAD", problem_statement=issue
    )


def run(url: str, sandbox, *, mode: str = "tools", **limits) -> Trajectory:
    async def go() -> Trajectory:
        client = ModelClient(ModelConfig(base_url=url, model="scripted", retry_budget_s=5))
        try:
            config = AgentConfig(tool_mode=mode, **limits)
            return await run_agent(instance(), sandbox, client, config)
        finally:
            await client.close()

    return asyncio.run(go())


def test_tool_calls_view_edit_insert_create_and_submit(endpoint, scratch, git_layer):
    sandbox = scratch(git_layer)
    wd = sandbox.spec.workdir
    url, _ = endpoint(
        turns=[
            call("str_replace_editor", command="view", path=f"{wd}/hello.py"),
            call(
                "str_replace_editor",
                command="str_replace",
                path="hello.py",
                old_str="return 'hello'",
                new_str="return 'hello world'",
            ),
            call(
                "str_replace_editor",
                command="insert",
                path=f"{wd}/hello.py",
                insert_line=0,
                new_str='"""Greetings."""',
            ),
            call("str_replace_editor", command="create", path=f"{wd}/NOTES.md", file_text="ok\n"),
            call("bash", command="python3 -c 'import hello; print(hello.hello())'"),
            call("submit"),
        ]
    )
    traj = run(url, sandbox)
    assert traj.exit_status == "submitted", traj.error
    assert [s.actions[0].tool for s in traj.steps] == ["str_replace_editor"] * 4 + [
        "bash",
        "submit",
    ]
    assert "     1\tdef hello():" in traj.steps[0].actions[0].observation
    assert "has been edited" in traj.steps[1].actions[0].observation
    assert traj.steps[4].actions[0].observation.strip() == "hello world"
    assert '+"""Greetings."""' in traj.patch and "+    return 'hello world'" in traj.patch
    assert "new file mode" in traj.patch and "b/NOTES.md" in traj.patch
    # OpenAI format: every tool call is answered by a tool message with its id, before the next call
    roles = [m["role"] for m in traj.messages]
    assert roles == ["system", "user"] + ["assistant", "tool"] * 5 + ["assistant"]
    assert traj.messages[3]["tool_call_id"] == traj.messages[2]["tool_calls"][0]["id"]
    assert traj.tools and {t["function"]["name"] for t in traj.tools} == {
        "bash",
        "str_replace_editor",
        "submit",
    }
    assert traj.prompt_tokens > 0 and traj.completion_tokens > 0
    assert all(s.model_s > 0 and s.step_s >= s.model_s for s in traj.steps)


def test_editor_errors_go_back_to_the_model(endpoint, scratch, git_layer):
    sandbox = scratch(git_layer)
    wd = sandbox.spec.workdir
    url, _ = endpoint(
        turns=[
            call(
                "str_replace_editor",
                command="str_replace",
                path=f"{wd}/hello.py",
                old_str="nope",
                new_str="x",
            ),
            call("str_replace_editor", command="create", path=f"{wd}/hello.py", file_text="x"),
            call("str_replace_editor", command="view", path=f"{wd}/hello.py", view_range=[5, 9]),
            call("str_replace_editor", command="view", path=wd),
            call("str_replace_editor", command="view", path=f"{wd}/missing.py"),
            call("str_replace_editor", command="view", path=f"{wd}/hello.py", view_range=[1, 500]),
            call("str_replace_editor", command="view", path=f"{wd}/src/hello.py"),
            call(
                "str_replace_editor",
                command="create",
                path=f"{wd}/pkg/sub/__init__.py",
                file_text="x = 1\n",
            ),
            call(
                "str_replace_editor",
                command="str_replace",
                path=f"{wd}/pkg/sub.py",
                old_str="x = 1",
                new_str="x = 2",
            ),
            {"tool_calls": [{"name": "rm_rf", "arguments": {}}]},
            call(
                "str_replace_editor",
                command="str_replace",
                path=f"{wd}/hello.py",
                old_str="def hello():",
                new_str="def hello():",
            ),
            call("submit"),
        ]
    )
    traj = run(url, sandbox)
    obs = [s.actions[0].observation if s.actions else s.format_error for s in traj.steps]
    assert "not verbatim" in obs[0]
    assert "already exists" in obs[1]
    assert "outside the file" in obs[2]
    assert f"{wd}/hello.py" in obs[3] and "README.md" in obs[3]
    assert "missing.py" in obs[4] and "Did you mean" not in obs[4]
    assert "     1\t" in obs[5] and "(the file ends at line" in obs[5]  # an end past it: to its end
    # a path that is not there: the files it may have meant (a module without its package...)
    assert obs[6].endswith(f"Did you mean: {wd}/hello.py?")
    assert obs[8].endswith(f"Did you mean: {wd}/pkg/sub/__init__.py?")  # (a package as a module)
    assert "unknown tool 'rm_rf'" in obs[9]
    assert "new_str is the same as old_str" in obs[10]  # a line replaced by itself is no edit
    assert traj.messages[-2]["role"] == "tool"  # the bad call was answered too
    assert traj.exit_status == "submitted"
    assert traj.patch.count("diff --git") == 1 and "b/pkg/sub/__init__.py" in traj.patch


def test_text_mode_parses_one_bash_block(endpoint, scratch, git_layer):
    url, _ = endpoint(
        turns=[
            text("I will just think about it."),
            text("two blocks\n```bash\nls\n```\n```bash\npwd\n```"),
            bash_block("sed -i 's/hello/hi/' hello.py && cat hello.py"),
            bash_block("submit", "THOUGHT: done."),
        ]
    )
    traj = run(url, scratch(git_layer), mode="text")
    assert traj.exit_status == "submitted"
    assert "no bash code blocks" in traj.steps[0].format_error
    assert "found 2 bash code blocks" in traj.steps[1].format_error
    assert "return 'hi'" in traj.steps[2].actions[0].observation
    assert traj.steps[2].thought == "THOUGHT: next step."
    assert traj.tools is None and all(m["role"] != "tool" for m in traj.messages)
    assert "+    return 'hi'" in traj.patch


def test_text_mode_has_the_editor_as_a_command_line(endpoint, scratch, git_layer):
    from sweflow.agent.actions import Action

    sandbox = scratch(git_layer)
    wd = sandbox.spec.workdir
    edit = {
        "command": "str_replace",
        "path": f"{wd}/hello.py",
        "old_str": "    return 'hello'\n",
        "new_str": '    return "it\'s $HOME"\n',
    }
    url, _ = endpoint(
        turns=[
            bash_block(f"str_replace_editor view {wd}/hello.py --view_range '[1, 2]'"),
            bash_block(Action("str_replace_editor", edit).command_line()),
            bash_block(f"str_replace_editor view {wd}/hello.py --bogus 1"),
            bash_block("submit"),
        ]
    )
    traj = run(url, sandbox, mode="text")
    assert traj.exit_status == "submitted", traj.error
    tools = [s.actions[0].tool if s.actions else None for s in traj.steps]
    assert tools == ["str_replace_editor", "str_replace_editor", None, "submit"]
    assert "     1\tdef hello():" in traj.steps[0].actions[0].observation
    assert traj.steps[1].actions[0].args == edit
    assert "unexpected '--bogus'" in traj.steps[2].format_error
    assert '+    return "it\'s $HOME"' in traj.patch


def test_replace_lines_names_the_old_text_by_its_line_numbers(endpoint, scratch, git_layer):
    """The text form a small model writes: the lines a view numbered and their new text; a
    range outside the file, or new text equal to those lines, is refused and changes nothing."""
    sandbox = scratch(git_layer)
    wd = sandbox.spec.workdir

    def lines(first: int, last: int, new: str) -> dict:
        return bash_block(
            f"str_replace_editor replace_lines {wd}/hello.py --line_range '[{first}, {last}]' "
            f"--new_str {shlex.quote(new)}"
        )

    url, _ = endpoint(
        turns=[
            lines(2, 3, "    return 1"),
            lines(2, 2, "    return 'hello'"),
            lines(2, 2, "    greeting = 'hello world'\n    return greeting\n"),
            lines(1, 1, ""),
            bash_block("submit"),
        ]
    )
    traj = run(url, sandbox, mode="text")
    assert traj.exit_status == "submitted", traj.error
    obs = [s.actions[0].observation for s in traj.steps]
    assert "within the file's 1..2 lines" in obs[0]
    assert "new_str is the same as those lines" in obs[1]
    assert "     2\t    greeting = 'hello world'" in obs[2] and "has been edited" in obs[2]
    assert traj.steps[2].actions[0].args["line_range"] == [2, 2]
    # the def line deleted: the file is the two new lines, its last newline kept
    assert (
        "-def hello():\n-    return 'hello'\n+    greeting = 'hello world'\n+    return greeting\n"
        in traj.patch
    )


def test_three_format_errors_in_a_row_end_the_run(endpoint, scratch, git_layer):
    url, _ = endpoint(turns=[text("no idea")])
    traj = run(url, scratch(git_layer), mode="text")
    assert traj.exit_status == "format_error" and len(traj.steps) == 3


def test_limits_end_runs_with_their_status(endpoint, scratch, git_layer):
    sandbox = scratch(git_layer)
    url, _ = endpoint(turns=[call("bash", command="echo change >> hello.py; seq 1 100000")])
    steps = run(url, sandbox, max_steps=2, max_observation_chars=1000)
    assert steps.exit_status == "step_limit" and len(steps.steps) == 2
    observation = steps.steps[0].actions[0].observation
    assert len(observation) < 1100 and "characters cut" in observation
    assert observation.startswith("1\n2\n") and observation.endswith("100000\n")
    assert "+change" in steps.patch  # a run cut short still yields its diff
    tokens = run(url, sandbox, max_total_tokens=1)
    assert tokens.exit_status == "token_limit" and len(tokens.steps) == 1
    context = run(url, sandbox, max_context_tokens=10)
    assert context.exit_status == "context_limit" and len(context.steps) == 1
    # a server that refuses the grown prompt (HTTP 400, vLLM's words) ends the run the same way
    small_url, _ = endpoint(turns=[call("bash", command="seq 1 3000")], max_prompt_tokens=1500)
    refused = run(small_url, sandbox, repeat_guard=False)  # the same command grows the prompt
    assert refused.exit_status == "context_limit" and "maximum context length" in refused.error
    assert len(refused.steps) >= 1


def test_a_repeated_reply_is_not_run_again_and_the_model_is_told(endpoint, scratch, git_layer):
    """A small model repeats one action until its step limit (it has a side effect here)."""
    append = bash_block("echo again >> hello.py")
    url, _ = endpoint(
        turns=[
            append,
            append,
            append,
            bash_block("echo once more >> hello.py"),
            bash_block("submit"),
        ]
    )
    guarded = run(url, scratch(git_layer), mode="text")
    assert guarded.exit_status == "submitted" and len(guarded.steps) == 5
    assert [s.actions[0].observation == REPEATED for s in guarded.steps[:4]] == [
        False,
        True,
        True,
        False,
    ]
    assert guarded.patch.count("+again") == 1 and "+once more" in guarded.patch
    assert sum(m["content"] == REPEATED for m in guarded.messages if m["role"] == "user") == 2
    unguarded = run(url, scratch(git_layer), mode="text", repeat_guard=False)
    assert unguarded.patch.count("+again") == 3


SUITE = """import unittest
def test_a(): pass
def test_b(): assert 0
class T(unittest.TestCase):
    def test_u(self): pass
"""


def test_durations_are_cut_from_test_runs_when_asked(endpoint, scratch, git_layer):
    """pytest's and unittest's durations, the text two runs of one replay differ by, are cut
    from the observation with ``hide_durations``; the counts stay."""
    runners = (
        f"{sys.executable} -m pytest -p no:cacheprovider -q test_suite.py; "
        f"{sys.executable} -m pytest -p no:cacheprovider test_suite.py; "
        f"{sys.executable} -m unittest test_suite"
    )
    command = f"printf %s {shlex.quote(SUITE)} > test_suite.py && {runners}"
    url, _ = endpoint(turns=[call("bash", command=command), call("submit")])
    kept = run(url, scratch(git_layer)).steps[0].actions[0].observation
    cut = run(url, scratch(git_layer), hide_durations=True).steps[0].actions[0].observation
    assert len(re.findall(r" in \d+\.\d+s\b", kept)) == 3, kept
    assert not re.search(r" in \d+\.\d+s\b", cut), cut
    assert "\n1 failed, 2 passed\n" in cut and "\n=== 1 failed, 2 passed ===\n" in cut, cut
    assert "\nRan 1 test\n" in cut and "FAILED test_suite.py::test_b" in cut


def test_command_and_wall_time_limits(endpoint, scratch, git_layer):
    sandbox = scratch(git_layer)
    url, _ = endpoint(turns=[call("bash", command="sleep 30"), call("submit")])
    killed = run(url, sandbox, command_timeout_s=1)
    assert "was killed" in killed.steps[0].actions[0].observation
    assert killed.exit_status == "submitted" and killed.steps[0].exec_s < 10
    slow_url, _ = endpoint(turns=[call("submit")], latency_s=5)
    timed = run(slow_url, sandbox, max_wall_s=1)
    assert timed.exit_status == "time_limit" and timed.wall_s < 4


def test_unusable_endpoint_is_a_model_error(endpoint, scratch, git_layer):
    url, _ = endpoint(turns=[call("submit")])
    traj = run(url.removesuffix("/v1") + "/nope", scratch(git_layer))
    assert traj.exit_status == "model_error" and "404" in traj.error


def test_batch_outlives_a_server_restart_and_resumes(endpoint, scratch_spec, git_layer, tmp_path):
    turns = [call("bash", command="echo more >> README.md"), call("submit")]
    url, proc = endpoint(turns=turns)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    proc.terminate()
    proc.wait()
    rows = [instance(f"demo__hello-{i}") for i in range(3)]
    out = tmp_path / "out"
    seen: list[tuple[str, int, bool]] = []

    async def batch() -> list[Trajectory]:
        client = ModelClient(ModelConfig(base_url=url, model="scripted", retry_budget_s=60))
        try:
            return await Batch(
                client,
                AgentConfig(),
                out,
                lambda _row: scratch_spec(git_layer),
                rollouts=2,
                max_open_sandboxes=2,
                backend="scratch",
                on_done=lambda t, resumed: seen.append((t.instance_id, t.run, resumed)),
            ).run(rows)
        finally:
            await client.close()

    async def restart_later() -> list[Trajectory]:
        task = asyncio.create_task(batch())
        await asyncio.sleep(2.0)  # every run is retrying against a closed port by now
        with scripted_endpoint(tmp_path / "script-0.json", port=port):
            return await task

    trajs = asyncio.run(restart_later())
    assert [(t.instance_id, t.run) for t in trajs] == [
        (r.instance_id, k) for r in rows for k in (0, 1)
    ]
    assert all(t.exit_status == "submitted" and "+more" in t.patch for t in trajs)
    assert max(t.steps[0].retries for t in trajs) > 0
    assert {resumed for *_, resumed in seen} == {False}
    # resume: one run lost, one ended on an infrastructure failure -> only those two run again
    (out / "trajectories" / "demo__hello-0" / "run-1.json").unlink()
    failed = Trajectory.load(out / "trajectories" / "demo__hello-2" / "run-0.json")
    failed.exit_status = "model_error"
    failed.save(out / "trajectories" / "demo__hello-2" / "run-0.json")
    seen.clear()
    with scripted_endpoint(tmp_path / "script-0.json", port=port):
        asyncio.run(batch())
    rerun = sorted((i, k) for i, k, resumed in seen if not resumed)
    assert rerun == [("demo__hello-0", 1), ("demo__hello-2", 0)] and len(seen) == 6
