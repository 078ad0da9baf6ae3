"""sweflow's own SFT rows (``collect``'s sft.jsonl): kept as they are, or switched to the student's
tool mode when they were collected in the other one.

A switch replays the row's actions through the agent's own parser (sweflow.agent.loop.
parse_reply) and renders them in the other mode, as the agent would have sent and received them;
the system prompt's format instructions are swapped for the other mode's, which needs the default
instructions to be there (a custom prompt is refused: its other-mode wording is unknown).
"""

from __future__ import annotations

from typing import Any

from sweflow.agent.actions import FormatError, thought_of
from sweflow.agent.config import AgentConfig
from sweflow.agent.loop import parse_reply
from sweflow.agent.templates import text_instructions, tools_instructions
from sweflow.agent.tools import TOOLS
from sweflow.training.sft.sources.episode import Episode, Refused, conversation
from sweflow.training.sft.sources.turns import Turn, steps_of, text_of

INSTRUCTIONS = {"tools": tools_instructions(TOOLS), "text": text_instructions(TOOLS)}


def mode_of(row: dict[str, Any]) -> str:
    return "tools" if row.get("tool_mode", "tools") == "tools" else "text"


def switched(row: dict[str, Any], tool_mode: str, agent: AgentConfig) -> dict[str, Any]:
    """The row in ``tool_mode`` (the other mode than it was collected in)."""
    messages = row.get("messages")
    if not isinstance(messages, list) or len(messages) < 3:
        raise Refused("no conversation")
    system, task = messages[0], messages[1]
    old = INSTRUCTIONS[mode_of(row)]
    if system.get("role") != "system" or old not in text_of(system.get("content")):
        raise Refused("the system prompt is not sweflow's default: its tool mode cannot switch")
    turns: list[Turn] = []
    for message in messages[2:]:
        if message.get("role") == "assistant":
            try:
                actions = parse_reply(message, mode_of(row))
            except FormatError:
                actions = []  # a reply the agent answered with a format error
            turns.append(Turn(thought_of(text_of(message.get("content"))), actions))
        elif turns:
            turns[-1].observations.append(text_of(message.get("content")))
    episode = Episode(str(row.get("instance_id", "")), "", "", steps_of(turns))
    record = conversation(episode, tool_mode, agent)
    new_system = text_of(system.get("content")).replace(old, INSTRUCTIONS[tool_mode])
    record["messages"][:2] = [{"role": "system", "content": new_system}, task]
    return {**row, **record}
