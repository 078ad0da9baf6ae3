"""The agent loop: prompt, ask the model, run its action in the sandbox, feed back the output.

One run owns one open sandbox; it ends on submit, on a limit, or on an infrastructure failure,
and its submission is always the sandbox's diff (whatever the exit status), so a run cut short
still yields the patch it had made.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any

from sweflow.agent.actions import (
    Action,
    FormatError,
    from_text,
    from_tool_calls,
    same_actions,
    thought_of,
)
from sweflow.agent.client import ChatModel, ContextLengthError, Declined, ModelError
from sweflow.agent.config import AgentConfig
from sweflow.agent.templates import render, text_instructions, tools_instructions
from sweflow.agent.tools import TOOL_SPECS, TOOLS, TOOLS_BY_NAME, ToolContext
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
    StepRecord,
    Trajectory,
)
from sweflow.instances import Instance
from sweflow.sandbox import Sandbox, SandboxError


def initial_messages(instance: Instance, config: AgentConfig, workdir: str) -> list[dict[str, Any]]:
    """The system and task messages of a run."""
    fields = {
        "workdir": workdir,
        "repo": instance.repo,
        "instance_id": instance.instance_id,
        "problem_statement": instance.problem_statement,
        "format_instructions": (
            tools_instructions(TOOLS) if config.tool_mode == "tools" else text_instructions(TOOLS)
        ),
    }
    return [
        {"role": "system", "content": render(config.system_template, **fields)},
        {"role": "user", "content": render(config.task_template, **fields)},
    ]


def parse_reply(message: dict[str, Any], tool_mode: str) -> list[Action]:
    """Actions of a reply: its tool calls, else (any mode) its one fenced bash block."""
    if tool_mode == "tools" and message.get("tool_calls"):
        return from_tool_calls(message["tool_calls"])
    return [from_text(message.get("content") or "")]


REPEATED = (
    "You ran exactly this in your previous reply and nothing has changed since, so it was not "
    "run again: its output would be the same as above. Do something different: look at another "
    "place, edit the code, or submit."
)


def observation_message(text: str, call_id: str | None) -> dict[str, Any]:
    """A tool message answering a tool call, or a user message for a text-format action."""
    if call_id is None:
        return {"role": "user", "content": text}
    return {"role": "tool", "tool_call_id": call_id, "content": text}


class AgentRun:
    """The state of one run; ``await AgentRun(...).run()`` returns its trajectory."""

    def __init__(
        self,
        instance: Instance,
        sandbox: Sandbox,
        client: ChatModel,
        config: AgentConfig,
        *,
        run: int = 0,
    ) -> None:
        self.instance, self.sandbox, self.client, self.config = instance, sandbox, client, config
        self.tools = TOOL_SPECS if config.tool_mode == "tools" else None
        self.workdir = sandbox.spec.workdir
        self.traj = Trajectory(
            instance_id=instance.instance_id,
            run=run,
            model=client.name,
            source=client.source,
            tool_mode=config.tool_mode,
            config=config.model_dump(),
            tools=self.tools,
            messages=initial_messages(instance, config, self.workdir),
            started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        )
        self.started = time.perf_counter()

    def remaining_s(self) -> float:
        return self.config.max_wall_s - (time.perf_counter() - self.started)

    def limit_reached(self) -> str | None:
        """The exit status of a limit that stops the run before its next model call."""
        traj, limits = self.traj, self.config
        if self.remaining_s() <= 0:
            return TIME_LIMIT
        if limits.max_total_tokens and traj.total_tokens >= limits.max_total_tokens:
            return TOKEN_LIMIT
        last = traj.steps[-1] if traj.steps else None
        if limits.max_context_tokens and last:
            if last.prompt_tokens + last.completion_tokens >= limits.max_context_tokens:
                return CONTEXT_LIMIT
        return None

    async def run(self) -> Trajectory:
        traj = self.traj
        try:
            traj.exit_status = await self._loop()
        except SandboxError as exc:
            traj.exit_status, traj.error = SANDBOX_ERROR, str(exc)
        try:
            traj.patch = await self.sandbox.adiff()
        except SandboxError as exc:
            traj.exit_status = SANDBOX_ERROR
            traj.error = traj.error or f"diff failed: {exc}"
        traj.wall_s = time.perf_counter() - self.started
        return traj

    async def _loop(self) -> str:
        traj, format_errors = self.traj, 0
        await self.client.prepare(self.sandbox, self.workdir)
        for index in range(self.config.max_steps):
            if status := self.limit_reached():
                return status
            step_started = time.perf_counter()
            try:
                completion = await asyncio.wait_for(
                    self.client.complete(traj.messages, self.tools), self.remaining_s()
                )
            except TimeoutError:
                return TIME_LIMIT
            except Declined as exc:
                traj.error = str(exc)
                return DECLINED
            except ContextLengthError as exc:
                traj.error = str(exc)
                return CONTEXT_LIMIT
            except ModelError as exc:
                traj.error = str(exc)
                return MODEL_ERROR
            message = completion.message
            traj.messages.append(message)
            traj.prompt_tokens += completion.prompt_tokens
            traj.completion_tokens += completion.completion_tokens
            step = StepRecord(
                index=index,
                thought=thought_of(message.get("content")),
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                finish_reason=completion.finish_reason,
                retries=completion.retries,
                model_s=completion.latency_s,
            )
            traj.steps.append(step)
            try:
                actions = parse_reply(message, self.config.tool_mode)
            except FormatError as exc:
                step.format_error = str(exc)
                calls = [c.get("id") for c in message.get("tool_calls") or []] or [None]
                traj.messages.extend(observation_message(str(exc), c) for c in calls)
                step.step_s = time.perf_counter() - step_started
                format_errors += 1
                if format_errors >= self.config.max_format_errors:
                    return FORMAT_ERROR
                continue
            format_errors = 0
            previous = traj.steps[-2].actions if len(traj.steps) > 1 else []
            if self.config.repeat_guard and same_actions(actions, previous):
                self._refuse_repeat(step, actions)
                step.step_s = time.perf_counter() - step_started
                continue
            submitted = await self._act(step, actions)
            step.step_s = time.perf_counter() - step_started
            if submitted:
                return SUBMITTED
        return STEP_LIMIT

    def _refuse_repeat(self, step: StepRecord, actions: list[Action]) -> None:
        """Answer each action of a repeated reply with :data:`REPEATED`, running none."""
        for action in actions:
            record = ActionRecord(tool=action.tool, args=action.args, call_id=action.call_id)
            record.observation = REPEATED
            step.actions.append(record)
            self.traj.messages.append(observation_message(REPEATED, action.call_id))

    async def _act(self, step: StepRecord, actions: list[Action]) -> bool:
        """Run the step's actions in order; True once one of them ends the run (submit)."""
        for action in actions:
            record = ActionRecord(tool=action.tool, args=action.args, call_id=action.call_id)
            step.actions.append(record)
            tool = TOOLS_BY_NAME[action.tool]  # parsing refused unknown tools
            if tool.run is None:
                return True
            began = time.perf_counter()
            context = ToolContext(
                sandbox=self.sandbox,
                workdir=self.workdir,
                timeout_s=max(1.0, min(self.config.command_timeout_s, self.remaining_s())),
                max_chars=self.config.max_observation_chars,
                hide_durations=self.config.hide_durations,
            )
            record.observation = await tool.run(action.args, context)
            record.exec_s = time.perf_counter() - began
            step.exec_s += record.exec_s
            self.traj.messages.append(observation_message(record.observation, action.call_id))
        return False


async def run_agent(
    instance: Instance, sandbox: Sandbox, client: ChatModel, config: AgentConfig, *, run: int = 0
) -> Trajectory:
    """Run the agent on ``instance`` in an open ``sandbox``; returns the (unsaved) trajectory."""
    return await AgentRun(instance, sandbox, client, config, run=run).run()
