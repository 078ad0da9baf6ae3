"""What every format's parser shares: an assistant turn as read, and turns made into steps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sweflow.agent.actions import Action
from sweflow.agent.tools import TOOLS_BY_NAME
from sweflow.training.sft.sources.episode import Refused, Step


@dataclass
class Turn:
    """An assistant turn as its format wrote it: the thought, the actions (none for a prose
    reply) and the observations that followed it."""

    thought: str
    actions: list[Action]
    observations: list[str] = field(default_factory=list)


def text_of(content: Any) -> str:
    """A message's text: a string, or OpenAI's list of ``{"type": "text", "text": ...}`` parts."""
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def steps_of(turns: list[Turn]) -> list[Step]:
    """The turns as the agent's steps. A turn without an action (prose, a "think") is no step of
    sweflow's agent, which would answer it with a format error: its thought joins the next
    turn's, and what followed it (a nudge to go on) is dropped. Trailing prose is dropped."""
    steps, carried = [], []
    for turn in turns:
        if not turn.actions:
            carried.append(turn.thought)
            continue
        thought = "\n\n".join(t for t in [*carried, turn.thought] if t)
        carried = []
        # one observation an action; submit ends the run and gets none (what followed it, the
        # source agent's diff or review prompt, is no part of sweflow's run)
        needed = sum(not TOOLS_BY_NAME[a.tool].ends_run for a in turn.actions)
        if len(turn.observations) < needed:
            where = f"step {len(steps) + 1}"
            raise Refused(
                f"{where}: {needed} action(s) but {len(turn.observations)} observation(s)"
            )
        steps.append(Step(thought, turn.actions, turn.observations[:needed]))
        if needed < len(turn.actions):
            break
    return steps
