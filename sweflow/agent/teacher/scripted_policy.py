"""The scripted policy: a baseline that needs no model, which a learning claim must beat.

It does what a routine would: run the issue's reproduction, view the deepest traceback frame
inside the repository outside its tests (the lines around it), and submit. A trained model
that localises no better than this has learned the routine, not the task (issue 59). It knows
nothing of the fix: every step follows from the issue and the sandbox's answers alone.
"""

from __future__ import annotations

import time
from typing import Any

from sweflow.agent.actions import Action
from sweflow.agent.client import Completion
from sweflow.agent.config import ToolMode
from sweflow.agent.teacher.clues import frames, reproduction
from sweflow.agent.teacher.replay import last_observation, reply_message, run_script
from sweflow.agent.tools import EDITOR, SUBMIT
from sweflow.grading.patches import is_test_path
from sweflow.instances import Instance
from sweflow.sandbox import Sandbox

LINES_AROUND = 15  # lines viewed above and below the frame's line


class ScriptedPolicy:
    """One run's policy (a ChatModel the agent loop talks to): reproduce, view, submit."""

    source = "scripted"
    name = "scripted"

    def __init__(self, instance: Instance, tool_mode: ToolMode) -> None:
        self.instance = instance
        self.tool_mode = tool_mode
        self.workdir = "/testbed"
        self._calls = 0

    async def prepare(self, sandbox: Sandbox, workdir: str) -> None:
        self.workdir = workdir

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        began = time.perf_counter()
        thought, action = self.next_step(self._calls, last_observation(messages))
        message = reply_message(thought, action, self.tool_mode, self._calls)
        self._calls += 1
        return Completion(
            message=message,
            prompt_tokens=0,
            completion_tokens=0,
            latency_s=time.perf_counter() - began,
            finish_reason="tool_calls" if self.tool_mode == "tools" else "stop",
        )

    def next_step(self, step: int, observation: str) -> tuple[str, Action]:
        """The step after ``step`` replies, given the last observation."""
        script = reproduction(self.instance.problem_statement or "")
        if step == 0 and script is not None:
            return "Run the issue's reproduction.", run_script(script)
        if step == 1 and script is not None and (frame := self.deepest_frame(observation)):
            path, line = frame
            span = [max(1, line - LINES_AROUND), line + LINES_AROUND]
            args = {"command": "view", "path": f"{self.workdir}/{path}", "view_range": span}
            return "View where the traceback ends in the repository.", Action(EDITOR, args)
        return "Submit.", Action(SUBMIT)

    def deepest_frame(self, observation: str) -> tuple[str, int] | None:
        """The innermost traceback frame in the repository's own code (not its tests)."""
        for frame in reversed(frames(observation, self.workdir)):
            if not is_test_path(frame.path):
                return frame.path, frame.line
        return None

    async def close(self) -> None:
        return None


def scripted_clients(tool_mode: ToolMode):
    """A RunPlan's ``client_for``: the scripted policy on each row."""

    def client_for(row: Instance) -> ScriptedPolicy:
        return ScriptedPolicy(row, tool_mode)

    return client_for
