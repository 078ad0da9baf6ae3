"""A trajectory of any format as sweflow's agent would have lived it, and its conversation in the
student's tool mode.

Every format's parser (swe_smith, swe_agent, openhands, native) reads its rows into an
:class:`Episode`: the task (problem statement and the repository folder the actions use) and the
steps, each a thought, the sweflow actions it took (``bash``, ``str_replace_editor``, ``submit``:
sweflow.agent.tools) and what each action printed. :func:`conversation` renders an episode as the
student meets it at inference: sweflow's own system and task prompts (the public sets' prompts
describe their agents' tools, not the student's), each step as the agent's reply in the chosen
tool mode (native tool calls with the tools' schemas, or one fenced block) and each observation
as the tool (tools mode) or user (text mode) message the agent loop would append.

A row that cannot be read this way raises :class:`Refused` with the reason, which the report
counts; nothing is dropped silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sweflow.agent.actions import Action, FormatError
from sweflow.agent.config import AgentConfig
from sweflow.agent.editor import COMMANDS as EDITOR_COMMANDS
from sweflow.agent.loop import observation_message, parse_reply
from sweflow.agent.teacher.replay import reply_message
from sweflow.agent.templates import render, text_instructions, tools_instructions
from sweflow.agent.tools import EDITOR, TOOL_SPECS, TOOLS, TOOLS_BY_NAME
from sweflow.errors import SweflowError

# SWE-agent's observation template ("OBSERVATION:\n{observation}") and its older "Observation: "
OBSERVATION_PREFIX = re.compile(r"\A(?:OBSERVATION:[ \t]*\n|Observation: )")


class Refused(SweflowError):
    """A row that does not become a student conversation; the message says why."""


@dataclass
class Step:
    """One reply: its thought, its actions and each action's observation (an action that ends
    the run, submit, has none)."""

    thought: str
    actions: list[Action]
    observations: list[str] = field(default_factory=list)


@dataclass
class Episode:
    instance_id: str
    problem_statement: str
    workdir: str
    steps: list[Step]
    repo: str = ""


def observation_text(text: str) -> str:
    """What the tool printed, without the source agent's ``OBSERVATION:`` framing."""
    return OBSERVATION_PREFIX.sub("", text, count=1)


def checked_action(name: str, args: dict[str, Any], where: str) -> Action:
    """A sweflow action, or Refused naming what sweflow's tools cannot do."""
    tool = TOOLS_BY_NAME.get(name)
    if tool is None:
        raise Refused(f"{where}: tool {name!r} has no sweflow equivalent")
    known = set(tool.parameters.get("properties", {}))
    if unknown := sorted(set(args) - known):
        raise Refused(f"{where}: {name} has no argument {', '.join(unknown)} in sweflow")
    if name == EDITOR and args.get("command") not in EDITOR_COMMANDS:
        raise Refused(
            f"{where}: str_replace_editor {args.get('command')!r} has no sweflow equivalent"
        )
    return Action(name, args)


def conversation(episode: Episode, tool_mode: str, agent: AgentConfig) -> dict[str, Any]:
    """The episode as a sweflow SFT record (messages, tools) in ``tool_mode``."""
    fields = {
        "workdir": episode.workdir,
        "repo": episode.repo,
        "instance_id": episode.instance_id,
        "problem_statement": episode.problem_statement,
        "format_instructions": (
            tools_instructions(TOOLS) if tool_mode == "tools" else text_instructions(TOOLS)
        ),
    }
    messages = [
        {"role": "system", "content": render(agent.system_template, **fields)},
        {"role": "user", "content": render(agent.task_template, **fields)},
    ]
    calls = 0
    for number, step in enumerate(episode.steps, 1):
        if not step.actions:
            raise Refused(f"step {number} has no action")
        if tool_mode == "text" and len(step.actions) > 1:
            raise Refused(
                f"step {number} has {len(step.actions)} actions; a text-mode reply has one"
            )
        reply = reply_message(step.thought, step.actions[0], tool_mode, calls + 1)
        if tool_mode == "text" and _read_back(reply) != [
            (step.actions[0].tool, step.actions[0].args)
        ]:
            raise Refused(
                f"step {number}: its thought holds a code block sweflow's agent would read as "
                "the action (text mode)"
            )
        if tool_mode == "tools":
            reply["tool_calls"] = [
                reply_message(step.thought, action, tool_mode, calls + i + 1)["tool_calls"][0]
                for i, action in enumerate(step.actions)
            ]
            reply["content"] = step.thought or None
        messages.append(reply)
        ids = [c["id"] for c in reply.get("tool_calls", [])] or [None]
        for i, observation in enumerate(step.observations):
            messages.append(
                observation_message(observation, ids[i] if tool_mode == "tools" else None)
            )
        calls += len(step.actions)
        if any(TOOLS_BY_NAME[a.tool].ends_run for a in step.actions):
            break
    record: dict[str, Any] = {
        "instance_id": episode.instance_id,
        "tool_mode": tool_mode,
        "messages": messages,
    }
    if tool_mode == "tools":
        record["tools"] = TOOL_SPECS
    return record


def _read_back(reply: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The actions sweflow's agent reads from a text-mode reply (none if it cannot)."""
    try:
        return [(a.tool, a.args) for a in parse_reply(reply, "text")]
    except FormatError:
        return []
