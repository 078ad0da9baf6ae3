"""The success path end to end on real instances: a scripted model replays each gold patch
through the tools (tools mode) or as a `git apply` (text mode); collect grades and keeps the
runs, infer writes preds.json, and `sweflow eval` resolves it.

The server is a real OpenAI-compatible HTTP server on 127.0.0.1 (sweflow.testing.scripted_model);
environments are real more-itertools builds (tests/data/envcache), made offline.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner
from unidiff import PatchSet

from sweflow.agent.trajectory import Trajectory
from sweflow.cli import app
from sweflow.instances import Instance, load_instances
from sweflow.testing.scripted_model import scripted_endpoint
from sweflow.testing.scripted_model import tool_turn as call

DATA = Path(__file__).parents[1] / "data" / "envcache"
REPLAYED = ["more-itertools__more-itertools-1101", "more-itertools__more-itertools-1010"]
IDLE = "more-itertools__more-itertools-1110"  # its model submits at once: never resolved
EDITOR = "str_replace_editor"


def tool_turns(instance: Instance, original) -> list[dict]:
    """The gold patch as editor actions: view each file, one str_replace per hunk (a bash
    `git apply` of the file's diff where a hunk's text is not unique), create new files."""
    turns = [call("bash", command="git status --short && ls")]
    for patched in PatchSet(instance.patch):
        path = f"/testbed/{patched.path}"
        if patched.is_added_file:
            body = "".join(line.value for hunk in patched for line in hunk if line.is_added)
            turns.append(call(EDITOR, command="create", path=path, file_text=body))
            continue
        text = original(patched.path)
        turns.append(call(EDITOR, command="view", path=path))
        olds = ["".join(ln.value for ln in h if not ln.is_added) for h in patched]
        if not all(text.count(old) == 1 for old in olds):
            turns.append(call("bash", command=f"git apply <<'EOF'\n{patched}EOF"))
            continue
        for hunk, old in zip(patched, olds, strict=True):
            new = "".join(line.value for line in hunk if not line.is_removed)
            turns.append(call(EDITOR, command="str_replace", path=path, old_str=old, new_str=new))
    return [*turns, call("bash", command="git diff --stat"), call("submit")]


def text_turns(instance: Instance) -> list[dict]:
    apply = f"git apply <<'EOF'\n{instance.patch}EOF\ngit diff --stat"
    return [
        {"content": "THOUGHT: look first.\n\n```bash\ngit log --oneline | head -3\n```"},
        {"content": f"THOUGHT: apply the fix.\n\n```bash\n{apply}\n```"},
        {"content": "THOUGHT: done.\n\n```bash\nsubmit\n```"},
    ]


@pytest.fixture(scope="module")
def rows() -> dict[str, Instance]:
    found = load_instances(DATA / "instances.jsonl").raise_for_errors()
    return {row.instance_id: row for row in found if row.instance_id in [*REPLAYED, IDLE]}


@pytest.fixture(scope="module")
def env_args(tmp_path_factory, more_itertools_mirror: Path, wheelhouse: Path) -> list[str]:
    """CLI options that build the instances offline into a fresh store."""
    store = tmp_path_factory.mktemp("store")
    args = ["--dataset", str(DATA / "instances.jsonl"), "--store", str(store)]
    return [
        *args,
        "--repo-mirror",
        str(more_itertools_mirror),
        "--wheelhouse",
        str(wheelhouse),
    ]


def ids_args(ids: list[str]) -> list[str]:
    return [arg for i in ids for arg in ("-i", i)]


def script_file(path: Path, scripts: dict[str, list[dict]], rows) -> Path:
    entries = [{"match": rows[i].problem_statement, "turns": t} for i, t in scripts.items()]
    path.write_text(json.dumps({"scripts": entries, "default": [call("submit")]}))
    return path


def invoke(args: list[str]):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_collect_keeps_the_resolved_replays(
    rows, more_itertools_mirror, env_args, tmp_path
) -> None:
    def original(instance: Instance, path: str) -> str:
        git = [
            "git",
            "--git-dir",
            str(more_itertools_mirror / "more-itertools__more-itertools.git"),
        ]
        return subprocess.run(
            [*git, "show", f"{instance.base_commit}:{path}"], capture_output=True, text=True
        ).stdout

    scripts = {i: tool_turns(rows[i], lambda p, r=rows[i]: original(r, p)) for i in REPLAYED}
    out = tmp_path / "collect"
    with scripted_endpoint(script_file(tmp_path / "s.json", scripts, rows)) as (url, _):
        result = invoke(
            [
                "collect",
                *env_args,
                *ids_args([*REPLAYED, IDLE]),
                "--model-url",
                url,
                "--model",
                "scripted",
                "--rollouts",
                "2",
                "--out",
                str(out),
                "-c",
                "4",
            ]
        )
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["tasks"], summary["runs"], summary["resolved"], summary["kept"]) == (3, 6, 4, 4)
    assert "sweflow collect" in result.output
    for instance_id in REPLAYED:
        traj = Trajectory.load(out / "trajectories" / instance_id / "run-1.json")
        assert traj.exit_status == "submitted" and traj.resolved, traj.reward
        assert traj.reward["f2p_passed"] == traj.reward["f2p_total"] > 0
        tools = {a.tool for s in traj.steps for a in s.actions}
        assert {"bash", EDITOR, "submit"} <= tools
    idle = Trajectory.load(out / "trajectories" / IDLE / "run-0.json")
    assert idle.patch == "" and idle.reward is not None and not idle.resolved
    sft = read_jsonl(out / "sft.jsonl")
    assert sorted(r["instance_id"] for r in sft) == sorted(REPLAYED * 2)
    first = sft[0]
    assert {t["function"]["name"] for t in first["tools"]} == {"bash", EDITOR, "submit"}
    assert any(m.get("tool_calls") for m in first["messages"])
    assert all("tool_call_id" in m for m in first["messages"] if m["role"] == "tool")
    xml = read_jsonl(out / "sft_xml.jsonl")
    assert len(xml) == 4 and all(m["role"] != "tool" for r in xml for m in r["messages"])
    assert any(
        "<function=str_replace_editor>\n<parameter=command>str_replace" in m["content"]
        for r in xml
        for m in r["messages"]
    )
    ticks = read_jsonl(out / "sft_ticks.jsonl")
    assert any(
        m["content"].startswith("```\nstr_replace_editor view /testbed/")
        for r in ticks
        for m in r["messages"]
    )
    assert read_jsonl(out / "sft_tool.jsonl")[0]["messages"] == first["messages"]
    # a second collect resumes: nothing runs again, the same figures come back
    again = invoke(
        [
            "collect",
            *env_args,
            *ids_args([*REPLAYED, IDLE]),
            "--model-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "scripted",
            "--rollouts",
            "2",
            "--out",
            str(out),
        ]
    )
    assert json.loads((out / "summary.json").read_text())["kept"] == 4, again.output


def test_infer_text_mode_then_eval_resolves(rows, env_args, tmp_path, monkeypatch) -> None:
    scripts = {i: text_turns(rows[i]) for i in REPLAYED}
    out = tmp_path / "infer"
    with scripted_endpoint(script_file(tmp_path / "s.json", scripts, rows)) as (url, _):
        invoke(
            [
                "infer",
                *env_args,
                *ids_args([*REPLAYED, IDLE]),
                "--model-url",
                url,
                "--model",
                "scripted-text",
                "--tool-mode",
                "text",
                "--out",
                str(out),
            ]
        )
    preds = json.loads((out / "preds.json").read_text())
    assert [p["instance_id"] for p in preds] == [rows[i].instance_id for i in rows]
    assert all(p["model_name_or_path"] == "scripted-text" for p in preds)
    by_id = {p["instance_id"]: p["model_patch"] for p in preds}
    assert by_id[IDLE] == ""
    for instance_id in REPLAYED:
        changed = {f.path for f in PatchSet(by_id[instance_id])}
        assert changed == {f.path for f in PatchSet(rows[instance_id].patch)}
        traj = Trajectory.load(out / "trajectories" / instance_id / "run-0.json")
        assert traj.tool_mode == "text" and traj.exit_status == "submitted"
    store = env_args[env_args.index("--store") + 1]
    monkeypatch.chdir(tmp_path)  # the harness layout (logs/run_evaluation/...) goes to the cwd
    invoke(
        [
            "eval",
            "--dataset",
            str(DATA / "instances.jsonl"),
            "--predictions",
            str(out / "preds.json"),
            "--run-id",
            "agent-test",
            "--store",
            store,
            "--report-dir",
            str(tmp_path),
            *ids_args(list(by_id)),
        ]
    )
    report = json.loads((tmp_path / "scripted-text.agent-test.json").read_text())
    assert sorted(report["resolved_ids"]) == sorted(REPLAYED)
    assert report["empty_patch_ids"] == [IDLE]


@pytest.mark.parametrize("mode", ["tools", "text"])
def test_the_replay_teacher_declines_rows_no_clue_leads_through(
    rows, env_args, tmp_path, mode
) -> None:
    """These rows are whole releases: their gold patches also change the changelog, the README
    or CI files, which nothing in their issue leads into. The teacher declines each, naming the
    file, and nothing is graded or kept. (Replays that resolve, in both tool modes, on every
    demo task: tests/agent/test_agent_replay.py.)"""
    out = tmp_path / "replay"
    args = [*env_args, *ids_args([*REPLAYED, IDLE]), "--teacher", "replay", "--out", str(out)]
    result = invoke(["collect", *args, "--tool-mode", mode])
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["runs"], summary["graded"], summary["kept"]) == (3, 0, 0), summary
    assert summary["exit_statuses"] == {"declined": 3} and summary["imitable_fraction"] is None
    assert sorted(summary["skipped"]) == sorted([*REPLAYED, IDLE])
    for instance_id, why in summary["skipped"].items():
        assert why.startswith("no clue leads into ") and "not Python source" in why, why
        assert instance_id in result.output
    assert "skipped (no imitable path)" in result.output
    assert (out / "sft.jsonl").read_text() == ""


def test_collect_refuses_a_teacher_it_cannot_run(env_args) -> None:
    result = CliRunner().invoke(app, ["collect", *env_args, "--out", "x"])
    assert result.exit_code == 2 and "--model-url" in result.output
    result = CliRunner().invoke(app, ["collect", *env_args, "--teacher", "nope", "--out", "x"])
    assert result.exit_code == 2 and "choose endpoint or replay" in result.output
    edits = ["--teacher", "replay", "--teacher-edits", "edit"]
    wide = {"COLUMNS": "200"}  # the whole message on one line of the error box
    result = CliRunner().invoke(app, ["collect", *env_args, *edits, "--out", "x"], env=wide)
    assert result.exit_code == 2 and "choose str_replace or replace_lines" in result.output


HOOK = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, "
    "call):\n    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)


def test_collect_never_keeps_a_run_that_hacks_the_tests(rows, env_args, tmp_path) -> None:
    """A teacher whose 'fix' is a conftest hook that marks failures passed: refused by the tamper
    guard (on by default), so nothing becomes SFT data; the harness alone would keep it."""
    hack = [
        call(EDITOR, command="create", path="/testbed/conftest.py", file_text=HOOK),
        call("submit"),
    ]
    script = script_file(tmp_path / "s.json", {REPLAYED[0]: hack}, rows)
    figures = {}
    for guard in ("--tamper-guard", "--no-tamper-guard"):
        out = tmp_path / guard
        with scripted_endpoint(script) as (url, _):
            invoke(
                [
                    "collect",
                    *env_args,
                    *ids_args([REPLAYED[0]]),
                    "--model-url",
                    url,
                    "--model",
                    "scripted",
                    "--out",
                    str(out),
                    guard,
                ]
            )
        run = Trajectory.load(out / "trajectories" / REPLAYED[0] / "run-0.json")
        figures[guard] = (
            run.resolved,
            run.reward["apply_status"],
            len(read_jsonl(out / "sft.jsonl")),
        )
    assert figures["--tamper-guard"] == (False, "touches_tests", 0)
    assert figures["--no-tamper-guard"] == (True, "applied", 1)
