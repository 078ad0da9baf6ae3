"""SFT data from the trajectories people have: real rows of each public format (tests/data/
trajectories/*/SOURCE.md says where each came from) become conversations of the student's tool
mode that sweflow's own agent parses back to the same actions, pass the chat-template check, and
every row's fate is reported."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sweflow.agent.config import AgentConfig
from sweflow.agent.loop import parse_reply
from sweflow.training.sft.sources.episode import Refused
from sweflow.training.sft.sources.formats import detect
from sweflow.training.sft.sources.mix import gather
from sweflow.training.sft.sources.rows import SourceError, rows
from sweflow.training.sft.sources.spec import DataSource, parse_source

FIXTURES = Path(__file__).parents[1] / "data" / "trajectories"
FILES = {
    "swe-smith-tool": FIXTURES / "swe-smith" / "tool.jsonl",
    "swe-smith-xml": FIXTURES / "swe-smith" / "xml.jsonl",
    "swe-smith-ticks": FIXTURES / "swe-smith" / "ticks.jsonl",
    "swe-agent": FIXTURES / "swe-agent" / "nebius.jsonl",
    "openhands": FIXTURES / "openhands" / "swe-gym-sampled.jsonl",
}


def _mix(*paths: Path, mode: str = "tools", **options) -> tuple[list[dict], list]:
    sources = [DataSource(source=str(p), **options) for p in paths]
    return gather(sources, tool_mode=mode, agent=AgentConfig(tool_mode=mode))


def _actions(record: dict) -> list[tuple[str, dict]]:
    """What sweflow's agent reads from each reply (its own parser, the record's mode)."""
    replies = [m for m in record["messages"] if m["role"] == "assistant"]
    return [(a.tool, a.args) for m in replies for a in parse_reply(m, record["tool_mode"])]


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_format_is_detected_and_converted_whole(name: str) -> None:
    records, (report,) = _mix(FILES[name])
    assert report.rows and report.refused == 0, report.examples
    assert report.converted == report.rows == report.selected == len(records)
    assert set(report.formats) == {name.split("-tool")[0].split("-xml")[0].split("-ticks")[0]}
    for record in records:
        assert record["tools"] and record["messages"][0]["role"] == "system"
        actions = _actions(record)
        assert actions[-1] == ("submit", {}), record["instance_id"]
        observations = [m for m in record["messages"] if m["role"] == "tool"]
        assert len(observations) == len(actions) - 1  # submit ends the run, unanswered
        assert not any(m["content"].startswith("OBSERVATION:") for m in observations)


def test_ticks_and_tool_splits_of_one_run_give_the_same_actions() -> None:
    """The two fixtures are SWE-smith's own renderings of the same runs (SOURCE.md), so the ticks
    parser (SWE-agent's action strings) must recover exactly the tool calls."""
    tool, _ = _mix(FILES["swe-smith-tool"])
    ticks, _ = _mix(FILES["swe-smith-ticks"])
    for a, b in zip(tool, ticks, strict=True):
        assert _actions(a) == _actions(b), a["instance_id"]


def test_text_mode_replies_parse_back_to_the_tools_mode_actions() -> None:
    for path in FILES.values():
        tools, _ = _mix(path, mode="tools")
        text, report = _mix(path, mode="text")
        by_id = {r["instance_id"]: r for r in tools}
        for record in text:
            assert record["tool_mode"] == "text" and "tools" not in record
            assert _actions(record) == _actions(by_id[record["instance_id"]])
            assert not any(m["role"] == "tool" for m in record["messages"])


def test_a_text_mode_reply_holds_one_action_and_the_refusals_are_named() -> None:
    """Text mode has one fenced block a reply: two calls in one turn, or a thought that holds a
    block the agent would read as the action, cannot be taught in it."""
    _, (report,) = _mix(FILES["openhands"], mode="text")
    assert report.refused == 2 and report.selected == 0
    assert report.examples[0] == (
        "line 1 (python__mypy-15976): step 8 has 2 actions; a text-mode reply has one"
    )
    assert report.reasons["step N has N actions; a text-mode reply has one"] == 1
    assert "its thought holds a code block" in report.examples[1]


def test_the_xml_split_keeps_multiline_arguments_exactly() -> None:
    raw = json.loads(FILES["swe-smith-xml"].read_text().splitlines()[0])
    records, _ = _mix(FILES["swe-smith-xml"])
    edits = [args for tool, args in _actions(records[0]) if args.get("command") == "str_replace"]
    assert edits, "the row edits a file"
    for args in edits:  # each value verbatim in the row, between its <parameter> tags
        for key in ("old_str", "new_str"):
            assert f"<parameter={key}>\n{args[key]}\n</parameter>" in json.dumps(raw)[:0] or (
                f"<parameter={key}>\n{args[key]}\n</parameter>"
                in "".join(m["content"] for m in raw["messages"])
            )


def test_swe_agent_windows_and_edits_become_sweflow_editor_calls() -> None:
    records, _ = _mix(FILES["swe-agent"])
    plumbum = next(r for r in records if r["instance_id"] == "tomerfiliba__plumbum-366")
    assert _actions(plumbum) == [
        ("bash", {"command": "ls -F"}),
        ("bash", {"command": "find /plumbum/plumbum -type f -name image.py"}),
        (
            "str_replace_editor",
            {"command": "view", "path": "/plumbum/plumbum/cli/image.py", "view_range": [1, 99]},
        ),
        (
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": "/plumbum/plumbum/cli/image.py",
                "old_str": "import . as cli",
                "new_str": "import plumbum.cli as cli",
            },
        ),
        ("bash", {"command": 'python -c "import plumbum.cli.image"'}),
        ("submit", {}),
    ]
    outputs = [m["content"] for m in plumbum["messages"] if m["role"] == "tool"]
    assert outputs[1] == "/plumbum/plumbum/cli/image.py"
    assert outputs[2].startswith(
        "Here is the result of running `cat -n` on /plumbum/plumbum/cli/image.py:\n     1\tfrom"
    )
    assert outputs[3].startswith("The file /plumbum/plumbum/cli/image.py has been edited.")
    assert "     5\timport plumbum.cli as cli" in outputs[3]
    assert outputs[4] == ""  # "ran successfully and did not produce any output": bash prints none
    assert not any("(Open file:" in text or "bash-$" in text for text in outputs)
    task = plumbum["messages"][1]["content"]
    assert task.startswith("<issue>\nSyntaxError in plumbum/cli/image.py")
    assert "/plumbum" in plumbum["messages"][0]["content"]  # the folder the actions use


def test_openhands_tools_map_and_the_shell_framing_goes() -> None:
    records, _ = _mix(FILES["openhands"])
    tools = {tool for r in records for tool, _ in _actions(r)}
    assert tools == {"bash", "str_replace_editor", "submit"}
    outputs = [m["content"] for r in records for m in r["messages"] if m["role"] == "tool"]
    assert not any("[Command finished" in o or "[Python Interpreter" in o for o in outputs)


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_every_refused_row_is_counted_with_why(tmp_path: Path) -> None:
    good = json.loads(FILES["openhands"].read_text().splitlines()[1])
    unresolved = {**good, "instance_id": "x__y-1", "resolved": False}
    ipython = json.loads(json.dumps(good))
    call = next(m for m in ipython["messages"] if m.get("tool_calls"))["tool_calls"][0]
    call["function"]["name"] = "execute_ipython_cell"
    ipython["instance_id"] = "x__y-2"
    data = _write(tmp_path / "mixed.jsonl", ["{not json", unresolved, ipython, good, {"a": 1}])
    records, (report,) = _mix(data)
    assert (report.rows, report.converted, report.refused) == (5, 1, 4)
    assert report.examples == [
        "line 1: not JSON (Expecting property name enclosed in double quotes)",
        "line 2 (x__y-1): its run did not resolve the task (resolved: false)",
        "line 3 (x__y-2): turn 1: tool 'execute_ipython_cell' has no sweflow equivalent",
        "line 5: neither messages nor trajectory: no trajectory format fits",
    ]
    everything, (kept_all,) = _mix(data, resolved_only=False)
    assert kept_all.converted == 2


def test_sweflow_rows_are_kept_or_switched_to_the_students_mode(tmp_path: Path) -> None:
    tools, _ = _mix(FILES["swe-agent"], mode="tools")
    native = [{**r, "source": "replay"} for r in tools]  # a sweflow tools-mode sft.jsonl
    data = _write(tmp_path / "sft.jsonl", native)
    kept, (report,) = gather([DataSource(source=str(data))], tool_mode=None, agent=AgentConfig())
    assert (report.kept, report.converted, report.formats) == (3, 0, {"sweflow": 3})
    assert kept[0]["messages"] == native[0]["messages"]
    text, (switched,) = _mix(data, mode="text")
    assert switched.converted == 3 and text[0]["tool_mode"] == "text"
    assert [_actions(r) for r in text] == [_actions(r) for r in native]
    assert "exactly ONE bash code block" in text[0]["messages"][0]["content"]


def test_counts_weights_and_the_seeded_order(tmp_path: Path) -> None:
    a, b = FILES["swe-agent"], FILES["swe-smith-xml"]  # 3 and 2 usable rows
    sources = [DataSource(source=str(a), count=2), DataSource(source=str(b))]
    mix, reports = gather(sources, tool_mode="tools", agent=AgentConfig())
    assert [r.selected for r in reports] == [2, 2] and len(mix) == 4
    weighted = [DataSource(source=str(a), weight=1), DataSource(source=str(b), weight=2)]
    _, reports = gather(weighted, tool_mode="tools", agent=AgentConfig())
    assert [r.selected for r in reports] == [1, 2]  # b's 2 rows allow 1 of a at 1:2
    first = gather(sources, tool_mode="tools", agent=AgentConfig(), seed=3)[0]
    again = gather(sources, tool_mode="tools", agent=AgentConfig(), seed=3)[0]
    assert [r["instance_id"] for r in first] == [r["instance_id"] for r in again]
    assert all(r["dataset"] in (str(a), str(b)) for r in first)


@pytest.mark.parametrize(
    ("text", "hub"),
    [
        (
            "SWE-bench/SWE-smith-trajectories:tool",
            ("SWE-bench/SWE-smith-trajectories", None, "tool"),
        ),
        (
            "nebius/SWE-agent-trajectories@a8a64e5:train",
            ("nebius/SWE-agent-trajectories", "a8a64e5", "train"),
        ),
        (
            "SWE-Gym/OpenHands-Sampled-Trajectories",
            ("SWE-Gym/OpenHands-Sampled-Trajectories", None, None),
        ),
    ],
)
def test_hugging_face_ids_are_read_with_revision_and_split(text: str, hub: tuple) -> None:
    assert parse_source(text + ",count=10").hub() == hub


def test_bad_source_options_are_named_before_work() -> None:
    from sweflow.errors import ConfigError

    with pytest.raises(ConfigError, match="count or a weight, not both"):
        parse_source("a/b:tool,count=1,weight=2")
    with pytest.raises(ConfigError, match="'nope' is not key=value"):
        parse_source("a/b,nope")
    with pytest.raises(ConfigError, match="format: Input should be"):
        parse_source("a/b,format=sharegpt")
    with pytest.raises(ConfigError, match="no file .* and no Hugging Face dataset id"):
        parse_source("not an id")


def test_an_uncached_hub_dataset_offline_is_an_error_naming_it(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = DataSource(source="sweflow-tests/no-such-trajectories:train")
    with pytest.raises(
        SourceError,
        match="sweflow-tests/no-such-trajectories:train: not in the "
        "Hugging Face cache and HF_HUB_OFFLINE is set",
    ):
        list(rows(source))


def test_a_parquet_file_with_messages_as_json_strings(tmp_path: Path) -> None:
    """The datasets' own storage: parquet, ``messages`` a JSON string (SWE-smith's current
    revision)."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    raw = [json.loads(line) for line in FILES["swe-smith-tool"].read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(raw), tmp_path / "tool.parquet")
    records, (report,) = _mix(tmp_path / "tool.parquet")
    assert report.converted == 2 and isinstance(raw[0]["messages"], str)
    assert detect(raw[0]) == "swe-smith"
    with pytest.raises(Refused):
        detect({"text": "prose"})


@pytest.fixture
def qwen3_template_model(tiny_smollm2: Path, tmp_path: Path) -> Path:
    """SmolLM2's tokenizer with Qwen3's own chat template (TRL ships it byte for byte)."""
    import trl

    template = Path(trl.__file__).parent / "chat_templates" / "qwen3.jinja"
    folder = tmp_path / "qwen3-template"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tiny_smollm2 / name).exists():
            shutil.copy(tiny_smollm2 / name, folder / name)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = template.read_text()
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_converted_rows_pass_the_rendering_check_with_qwen3s_template(
    qwen3_template_model: Path,
) -> None:
    """Every converted conversation renders with Qwen3's template as vLLM renders it (tool-call
    arguments as objects in <tool_call>), no turn drifts and no action vanishes."""
    from sweflow.training.chat import ChatEncoder

    encoder = ChatEncoder(qwen3_template_model)
    for path in FILES.values():
        records, _ = _mix(path)
        for record in records:
            encoded = encoder.encode(record["messages"], record["tools"])
            assert encoded.trained_tokens > 0
    text = encoder.render(records[0]["messages"][:3], records[0]["tools"], prompt=False)
    call = records[0]["messages"][2]["tool_calls"][0]["function"]
    args = json.loads(call["arguments"])
    assert (
        f'<tool_call>\n{{"name": "{call["name"]}", "arguments": {json.dumps(args)}}}\n</tool_call>'
        in text
    )
