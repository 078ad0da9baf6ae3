"""Runs as SWE-agent trajectories (``.traj``): what SWE-agent's inspector, its replay and the
SWE-bench leaderboard's ``trajs/`` folder read.

The format, read from SWE-agent's sources (sweagent/types.py, sweagent/agent/agents.py
``get_trajectory_data``): one JSON object with ``trajectory`` (a step per model call:
``action``, ``observation``, ``response``, ``thought``, ``execution_time``, ``state``,
``query`` -- the messages the model was sent for that step -- and ``extra_info``),
``history`` (the conversation, each message with ``agent`` and ``message_type``; an
assistant message carries ``thought`` and ``action``, a tool message its ``tool_call_ids``),
``info`` (``exit_status``, ``submission``, ``model_stats`` with ``instance_cost``,
``tokens_sent``, ``tokens_received``, ``api_calls``), ``replay_config`` and ``environment``.
SWE-agent's inspector names the task by the file's stem: ``<instance_id>.traj``.

A run that ended on a limit with changes made is ``submitted (exit_cost)``, as SWE-agent
autosubmits; sweflow's own figures (source, run, reward, imitability) ride in ``info.sweflow``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from sweflow.agent.actions import FormatError
from sweflow.agent.loop import parse_reply
from sweflow.agent.runs.folder import FoundRun
from sweflow.agent.tools import TOOLS_BY_NAME
from sweflow.agent.trajectory import (
    CONTEXT_LIMIT,
    DECLINED,
    FORMAT_ERROR,
    MODEL_ERROR,
    SANDBOX_ERROR,
    STEP_LIMIT,
    SUBMITTED,
    TIME_LIMIT,
    TOKEN_LIMIT,
    ActionRecord,
    Trajectory,
)
from sweflow.files import write_atomic

AGENT = "main"  # SWE-agent's name for the one agent of a run
EXIT_STATUSES = {  # sweflow's exit status -> SWE-agent's
    SUBMITTED: "submitted",
    STEP_LIMIT: "exit_cost",  # SWE-agent's call and cost limits both end as exit_cost
    TOKEN_LIMIT: "exit_cost",
    TIME_LIMIT: "exit_total_execution_time",
    CONTEXT_LIMIT: "exit_context",
    FORMAT_ERROR: "exit_format",
    MODEL_ERROR: "exit_api",
    SANDBOX_ERROR: "exit_environment_error",
    DECLINED: "exit_forfeit",
}


def swe_agent_traj(traj: Trajectory) -> dict[str, Any]:
    """``traj`` as the object SWE-agent saves in ``<instance_id>.traj``."""
    assistant_at = [i for i, m in enumerate(traj.messages) if m.get("role") == "assistant"]
    steps = []
    for n, step in enumerate(traj.steps):
        at = assistant_at[n] if n < len(assistant_at) else len(traj.messages)
        reply = traj.messages[at] if at < len(traj.messages) else {}
        steps.append(
            {
                "action": "\n".join(_line(a) for a in step.actions),
                "observation": "\n".join(a.observation for a in step.actions)
                or (step.format_error or ""),
                "response": reply.get("content") or step.thought,
                "thought": step.thought,
                "execution_time": step.exec_s,
                "state": {},
                "query": [_plain(m) for m in traj.messages[:at]],
                "extra_info": {
                    "prompt_tokens": step.prompt_tokens,
                    "completion_tokens": step.completion_tokens,
                    "model_s": step.model_s,
                    "format_error": step.format_error,
                },
            }
        )
    return {
        "environment": "sweflow",
        "trajectory": steps,
        "history": [_history_item(m, traj.tool_mode) for m in traj.messages],
        "info": _info(traj),
        "replay_config": None,
    }


def exit_status(traj: Trajectory) -> str:
    """SWE-agent's exit status of the run (``submitted (exit_...)`` when it autosubmits)."""
    status = EXIT_STATUSES.get(traj.exit_status, f"exit_{traj.exit_status or 'unknown'}")
    if status != "submitted" and traj.patch.strip():
        return f"submitted ({status})"
    return status


def _info(traj: Trajectory) -> dict[str, Any]:
    return {
        "exit_status": exit_status(traj),
        "submission": traj.patch if traj.patch.strip() else None,
        "model_stats": {
            "instance_cost": 0.0,  # a served model's calls cost nothing per token here
            "tokens_sent": traj.prompt_tokens,
            "tokens_received": traj.completion_tokens,
            "api_calls": len(traj.steps),
        },
        "sweflow": {
            "instance_id": traj.instance_id,
            "run": traj.run,
            "model": traj.model,
            "source": traj.source,
            "tool_mode": traj.tool_mode,
            "exit_status": traj.exit_status,
            "error": traj.error,
            "reward": traj.reward,
            "wall_s": traj.wall_s,
        },
    }


def _history_item(message: dict[str, Any], tool_mode: str) -> dict[str, Any]:
    role = message.get("role", "")
    item: dict[str, Any] = {"role": role, "content": message.get("content") or "", "agent": AGENT}
    if role == "system":
        item["message_type"] = "system_prompt"
    elif role == "assistant":
        item["message_type"] = "action"
        try:
            actions = parse_reply(message, tool_mode)
        except FormatError:
            actions = []
        item["thought"] = item["content"]
        item["action"] = "\n".join(TOOLS_BY_NAME[a.tool].command_line(a.args) for a in actions)
        if message.get("tool_calls"):
            item["tool_calls"] = message["tool_calls"]
    else:
        item["message_type"] = "observation"
        if message.get("tool_call_id"):
            item["tool_call_ids"] = [message["tool_call_id"]]
    return item


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """A message of a step's query as the chat API got it."""
    return {k: v for k, v in message.items() if v is not None}


def _line(action: ActionRecord) -> str:
    tool = TOOLS_BY_NAME.get(action.tool)
    return tool.command_line(action.args) if tool else f"{action.tool} {json.dumps(action.args)}"


def write_traj(traj: Trajectory, path: Path) -> Path:
    """Write ``traj`` as a ``.traj`` file (atomically)."""
    data = json.dumps(swe_agent_traj(traj), indent=2, ensure_ascii=False).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(path, data)


def traj_paths(runs: list[FoundRun], out: Path) -> list[Path]:
    """Where each run's ``.traj`` goes under ``out``: ``<instance_id>/<instance_id>.traj`` as
    SWE-agent lays a run out, under the run's source folder when there are several, and under
    ``run-<k>`` when a source holds more than one run of a task."""
    sources = {r.source for r in runs}
    per_task = Counter((r.source, r.trajectory.instance_id) for r in runs)
    paths = []
    for r in runs:
        iid, folder = r.trajectory.instance_id, out
        if len(sources) > 1:
            folder = folder / r.source
        if per_task[(r.source, iid)] > 1:
            episode = r.path.stem.split("-", 1)[0]  # an RL episode's index in its step
            stem = f"episode-{episode}" if r.rl_step is not None else f"run-{r.trajectory.run}"
            folder = folder / stem
        paths.append(folder / iid / f"{iid}.traj")
    return paths


def write_trajs(runs: list[FoundRun], out: Path) -> list[Path]:
    """Every run as a ``.traj`` file under ``out`` (``traj_paths``)."""
    paths = traj_paths(runs, out)
    return [write_traj(r.trajectory, path) for r, path in zip(runs, paths, strict=True)]
