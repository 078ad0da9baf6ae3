"""Trajectories into training data: SWE-smith's styles and swebench predictions."""

from __future__ import annotations

import json
from pathlib import Path

from sweflow.agent import STYLES, Trajectory, predictions, write_predictions, write_sft

SYSTEM = {"role": "system", "content": "sys"}
TASK = {"role": "user", "content": "fix it"}


def tool_traj() -> Trajectory:
    edit = {
        "id": "c1",
        "type": "function",
        "function": {
            "name": "str_replace_editor",
            "arguments": json.dumps(
                {"command": "str_replace", "path": "/testbed/a.py", "old_str": "x", "new_str": "y"}
            ),
        },
    }
    submit = {"id": "c2", "type": "function", "function": {"name": "submit", "arguments": "{}"}}
    return Trajectory(
        instance_id="o__r-1",
        tools=[{"type": "function", "function": {"name": "bash"}}],
        messages=[
            SYSTEM,
            TASK,
            {"role": "assistant", "content": "Edit a.py.", "tool_calls": [edit]},
            {"role": "tool", "tool_call_id": "c1", "content": "edited"},
            {"role": "assistant", "content": None, "tool_calls": [submit]},
        ],
        patch="diff --git a/a.py b/a.py\n",
    )


def text_traj() -> Trajectory:
    return Trajectory(
        instance_id="o__r-2",
        tool_mode="text",
        messages=[
            SYSTEM,
            TASK,
            {"role": "assistant", "content": "THOUGHT: list.\n\n```bash\nls -a\n```"},
            {"role": "user", "content": "a.py"},
            {"role": "assistant", "content": "no block at all"},
        ],
    )


def test_xml_style_renders_tool_calls_as_swe_smith_does() -> None:
    messages = STYLES["xml"](tool_traj())["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[2]["content"] == (
        "Edit a.py.\n\n<function=str_replace_editor>\n<parameter=command>str_replace</parameter>\n"
        "<parameter=path>/testbed/a.py</parameter>\n<parameter=old_str>\nx\n</parameter>\n"
        "<parameter=new_str>\ny\n</parameter>\n</function>"
    )
    assert messages[4]["content"] == "<function=submit>\n</function>"
    text = STYLES["xml"](text_traj())["messages"]
    assert text[2]["content"] == (
        "THOUGHT: list.\n\n<function=bash>\n<parameter=command>ls -a</parameter>\n</function>"
    )
    assert text[4]["content"] == "no block at all"  # an unparseable reply stays as it was


def test_ticks_style_and_tool_style() -> None:
    ticks = STYLES["ticks"](tool_traj())["messages"]
    assert ticks[2]["content"] == (
        "Edit a.py.\n\n```\nstr_replace_editor str_replace /testbed/a.py"
        " --old_str x --new_str y\n```"
    )
    assert ticks[4]["content"] == "```\nsubmit\n```"
    assert STYLES["tool"](tool_traj())["messages"] == tool_traj().messages


def test_sft_files_and_predictions(tmp_path: Path) -> None:
    trajs = [tool_traj(), text_traj(), tool_traj().model_copy(update={"run": 1, "patch": "2nd"})]
    paths = write_sft(trajs, tmp_path)
    assert sorted(p.name for p in paths.values()) == [
        "sft.jsonl",
        "sft_ticks.jsonl",
        "sft_tool.jsonl",
        "sft_xml.jsonl",
    ]
    rows = [json.loads(line) for line in paths["openai"].read_text().splitlines()]
    assert "tools" in rows[0] and "tools" not in rows[1] and len(rows) == 3
    preds = predictions(trajs, "m")
    assert preds == [
        {
            "instance_id": "o__r-1",
            "model_name_or_path": "m",
            "model_patch": "diff --git a/a.py b/a.py\n",
        },
        {"instance_id": "o__r-2", "model_name_or_path": "m", "model_patch": ""},
    ]
    written = write_predictions(tmp_path / "preds.json", trajs, "m")
    assert json.loads(written.read_text()) == preds
