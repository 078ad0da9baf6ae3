"""What runs become: SFT datasets (OpenAI messages with tool calls, and SWE-smith's trajectory
styles ``tool``, ``xml`` and ``ticks``) and swebench-format predictions.

SWE-smith's styles (swesmith.train.traj_mgr): ``tool`` keeps the messages as they are; ``xml``
and ``ticks`` turn tool messages into user messages and each assistant action into text,
``<function=NAME><parameter=KEY>VALUE</parameter></function>`` or a fenced command.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from sweflow.agent.actions import Action, FormatError, thought_of
from sweflow.agent.loop import parse_reply
from sweflow.agent.trajectory import Trajectory
from sweflow.instances.write import _atomic_write

XML_BLOCK_KEYS = ("old_str", "new_str", "file_text")  # parameters SWE-smith puts on own lines


def sft_record(traj: Trajectory) -> dict[str, Any]:
    """One training sample: the conversation as sent (tool calls included), the tools, and what
    produced the replies (``source``: the model, or a teacher such as ``replay``)."""
    record: dict[str, Any] = {
        "instance_id": traj.instance_id,
        "source": traj.source,
        "tool_mode": traj.tool_mode,
        "messages": traj.messages,
    }
    if traj.tools:
        record["tools"] = traj.tools
    return record


def tool_style(traj: Trajectory) -> dict[str, Any]:
    return {"instance_id": traj.instance_id, "messages": traj.messages}


def xml_action(action: Action) -> str:
    lines = [f"<function={action.tool}>"]
    for key, value in action.args.items():
        text = json.dumps(value) if isinstance(value, list) else value
        if key in XML_BLOCK_KEYS:
            lines.append(f"<parameter={key}>\n{text}\n</parameter>")
        else:
            lines.append(f"<parameter={key}>{text}</parameter>")
    lines.append("</function>")
    return "\n".join(lines)


def ticks_action(action: Action) -> str:
    return f"```\n{action.command_line()}\n```"


def _text_style(render: Callable[[Action], str]) -> Callable[[Trajectory], dict[str, Any]]:
    def convert(traj: Trajectory) -> dict[str, Any]:
        messages = []
        for message in traj.messages:
            role, content = message["role"], message.get("content") or ""
            if role == "tool":
                role = "user"
            elif role == "assistant":
                try:
                    actions = parse_reply(message, traj.tool_mode)
                except FormatError:
                    actions = []
                if actions:
                    parts = [thought_of(content), *(render(a) for a in actions)]
                    content = "\n\n".join(p for p in parts if p)
            messages.append({"role": role, "content": content})
        return {"instance_id": traj.instance_id, "messages": messages}

    return convert


STYLES: dict[str, Callable[[Trajectory], dict[str, Any]]] = {
    "tool": tool_style,
    "xml": _text_style(xml_action),
    "ticks": _text_style(ticks_action),
}


def write_records(path: Path, records: Iterable[dict[str, Any]]) -> Path:
    """Write records atomically, one JSON object a line."""
    lines = b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)
    return _atomic_write(path, lambda fh: fh.write(lines))


def write_sft(trajectories: list[Trajectory], out_dir: Path) -> dict[str, Path]:
    """sft.jsonl (OpenAI messages + tools) and sft_<style>.jsonl for each SWE-smith style."""
    paths = {"openai": out_dir / "sft.jsonl"}
    write_records(paths["openai"], (sft_record(t) for t in trajectories))
    for style, convert in STYLES.items():
        paths[style] = out_dir / f"sft_{style}.jsonl"
        write_records(paths[style], (convert(t) for t in trajectories))
    return paths


def predictions(
    trajectories: Iterable[Trajectory],
    model_name: str,
    picks: Mapping[str, int | None] | None = None,
) -> list[dict[str, str]]:
    """swebench predictions: one per instance, in input order: the sample ``picks`` names for
    it (a selector's, sweflow.agent.runs.tts), else its first run."""
    runs: dict[str, dict[int, Trajectory]] = {}
    for traj in trajectories:
        runs.setdefault(traj.instance_id, {})[traj.run] = traj
    chosen = []
    for iid, by_run in runs.items():
        pick = (picks or {}).get(iid)
        traj = by_run[pick] if pick in by_run else by_run[min(by_run)]
        chosen.append(
            {"instance_id": iid, "model_name_or_path": model_name, "model_patch": traj.patch}
        )
    return chosen


def write_predictions(
    path: Path,
    trajectories: Iterable[Trajectory],
    model_name: str,
    picks: Mapping[str, int | None] | None = None,
) -> Path:
    data = json.dumps(predictions(trajectories, model_name, picks), indent=1).encode() + b"\n"
    return _atomic_write(path, lambda fh: fh.write(data))
