"""OpenHands trajectories (SWE-Gym's ``SWE-Gym/OpenHands-Sampled-Trajectories``, and sets in the
same form): OpenAI messages with native ``tool_calls`` to OpenHands' CodeAct tools and ``tools``
beside them, or the same calls written in text as ``<function=NAME><parameter=...>`` (OpenHands'
non-native function calling, which SWE-smith's xml split borrowed).

Its tools map onto sweflow's one to one where they do the same thing: ``execute_bash`` is
``bash``, ``str_replace_editor`` is sweflow's (``undo_edit`` has no counterpart and is refused),
``finish`` is ``submit``, and ``think`` records a thought (it joins the reply's thought). Any
other tool (``execute_ipython_cell``, the browser) is refused by name. A bash observation loses
the shell's framing OpenHands adds around the output: the echoed command, the
``[Python Interpreter: ...]`` marker and prompt line, and ``[Command finished with exit code N]``,
which becomes sweflow's ``[exit code N]`` note when N is not 0.
"""

from __future__ import annotations

import re
from typing import Any

from sweflow.training.sft.sources import swe_smith
from sweflow.training.sft.sources.episode import Episode

NAMES = {"execute_bash": "bash", "finish": "submit", "think": ""}
INTERPRETER = re.compile(r"\[Python Interpreter: [^\]]*\]\n?[^\n]*[#$] ?\n?")
EXIT = re.compile(r"\n?\[Command finished with exit code (-?\d+)\]\s*\Z")


def episode(row: dict[str, Any]) -> Episode:
    parsed = swe_smith.episode(row, NAMES)
    for step in parsed.steps:
        step.observations = [
            bash_output(text, action.args.get("command", "")) if action.tool == "bash" else text
            for action, text in zip(step.actions, step.observations, strict=False)
        ]
    return parsed


def bash_output(text: str, command: str) -> str:
    """The command's output as sweflow's bash tool reports it (OpenHands' framing removed)."""
    code = 0
    if found := EXIT.search(text):
        code, text = int(found.group(1)), text[: found.start()]
    text = INTERPRETER.sub("", text)
    if command and text.startswith(command):
        text = text[len(command) :].lstrip("\n")
    return text.rstrip("\n") + (f"\n[exit code {code}]" if code else "")
