"""The trajectory formats SFT reads, by name, and how a row of each becomes a student record.

A format is one entry of :data:`FORMATS`: its parser into an Episode (sweflow's own rows are
kept, or switched to the student's mode, by sweflow.training.sft.sources.native) and the field
that says whether the row's run resolved its task (rows that did not are refused: SFT imitates
resolved runs, as ``collect`` keeps only those). :func:`detect` names a row's format from its
fields when the source does not say.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sweflow.agent.config import AgentConfig
from sweflow.training.sft.data import record_problem
from sweflow.training.sft.sources import native, openhands, swe_agent, swe_smith
from sweflow.training.sft.sources.episode import Episode, Refused, conversation


@dataclass(frozen=True)
class Format:
    name: str
    parse: Callable[[dict[str, Any]], Episode] | None  # None: sweflow's own rows
    resolved: str | None  # the row's field saying its run resolved the task
    describes: str


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("sweflow", None, None, "sweflow's own sft.jsonl (collect)"),
        Format(
            "swe-smith",
            swe_smith.episode,
            "resolved",
            "SWE-smith-trajectories, splits tool, xml and ticks",
        ),
        Format(
            "swe-agent",
            swe_agent.episode,
            "target",
            "SWE-agent 0.x trajectories (nebius/SWE-agent-trajectories)",
        ),
        Format(
            "openhands",
            openhands.episode,
            "resolved",
            "OpenHands trajectories (SWE-Gym/OpenHands-Sampled-Trajectories)",
        ),
    )
}
OPENHANDS_TOOLS = ("execute_bash", "finish", "execute_ipython_cell")


def detect(row: dict[str, Any]) -> str:
    """The format a row is in, from the fields each format has; Refused when none fits. OpenAI
    messages (and tools) with none of the others' marks are sweflow's form (OpenAI's
    fine-tuning format, which collect writes)."""
    if isinstance(row.get("trajectory"), list):
        return "swe-agent"
    if "messages" not in row:
        raise Refused("neither messages nor trajectory: no trajectory format fits")
    if "tool_mode" in row:
        return "sweflow"
    text = str(row.get("messages"))[:200_000] + str(row.get("tools", ""))[:20_000]
    marks = [f'"{name}"' for name in OPENHANDS_TOOLS] + [f"'{name}'" for name in OPENHANDS_TOOLS]
    if "run_id" in row or any(mark in text for mark in marks) or "<function=execute_bash>" in text:
        return "openhands"
    if "traj_id" in row or isinstance(row["messages"], str) or "<uploaded_files>" in text:
        return "swe-smith"
    return "sweflow"


def student_record(
    row: dict[str, Any], name: str, tool_mode: str | None, agent: AgentConfig, resolved_only: bool
) -> tuple[dict[str, Any], bool]:
    """(the row as a record in the student's tool mode, whether it was converted). ``tool_mode``
    None keeps sweflow's rows in their own mode and renders others in tools mode."""
    fmt = FORMATS[name]
    if resolved_only and fmt.resolved and row.get(fmt.resolved) is False:
        raise Refused(f"its run did not resolve the task ({fmt.resolved}: false)")
    if fmt.parse is None:
        if why := record_problem(row):
            raise Refused(why)
        if tool_mode is None or native.mode_of(row) == tool_mode:
            return row, False
        return native.switched(row, tool_mode, agent), True
    episode = fmt.parse(row)
    if not episode.steps:
        raise Refused("no step with an action")
    return conversation(episode, tool_mode or "tools", agent), True
