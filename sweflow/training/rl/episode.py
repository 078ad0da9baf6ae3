"""One RL rollout, whatever the trainer: an episode of the sweflow agent in a fresh sandbox of the
task's cached environment, its patch graded by the harness-identical grader.

The policy is reached token in, token out. :class:`TokenStream` plays the model in the agent's
own loop (same tools, templates and limits as collect and infer): it keeps the episode as one
token sequence, appends exactly the tokens the policy generated (``mask`` 1) and, after each
turn, the chat template's framing of the observations (``mask`` 0), computed from the template,
never by re-encoding generated text. So the tokens trained are the tokens sampled.

Rewards: 1 when the task is resolved, else 0, minus the shaping of sweflow.training.rl.config
(the share of replies that parsed into no action, an episode that changed nothing); a patch the
tamper guard refuses is counted as refused. An episode the machinery failed (the sandbox would
not start or died, the model backend failed, the grading errored or ran past
``reward_timeout_s``) has no reward: it is retried up to ``infra_retries`` times, then reported
as an infrastructure failure, which the trainers drop from the batch (every token masked)
rather than train on as a 0.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweflow.agent.client import (
    Completion,
    ContextLengthError,
    ModelError,
    ModelUnavailableError,
)
from sweflow.agent.config import AgentConfig
from sweflow.agent.loop import run_agent
from sweflow.agent.trajectory import (
    CONTEXT_LIMIT,
    INFRA_FAILURES,
    STEP_LIMIT,
    TIME_LIMIT,
    TOKEN_LIMIT,
    Trajectory,
)
from sweflow.errors import SweflowError, is_infrastructure
from sweflow.grading.guard import REFUSALS
from sweflow.instances import Instance
from sweflow.sandbox import Sandbox
from sweflow.training.chat import ChatEncoder, DriftError
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.formulas import overlong_punishment

# (context token ids, most tokens to generate) -> (generated ids, their log-probabilities)
Generate = Callable[[list[int], int], Awaitable[tuple[list[int], list[float]]]]
HERMES_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
# the agent's exits on a limit (turns, tokens, time, context): what compact filtering masks
LIMITS = frozenset({STEP_LIMIT, TOKEN_LIMIT, TIME_LIMIT, CONTEXT_LIMIT})
# the exits on a length budget: what DAPO's overlong filtering (rl.objective.mask_truncated) masks
LENGTH_LIMITS = frozenset({TOKEN_LIMIT, CONTEXT_LIMIT})


class TokenStream:
    """The policy as the agent loop's model, for one episode (a ChatModel)."""

    source = "policy"

    def __init__(self, name: str, encoder: ChatEncoder, generate: Generate, rl: RLConfig) -> None:
        self.name, self.encoder, self.generate, self.rl = name, encoder, generate, rl
        self.prompt_ids: list[int] = []
        self.response_ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.generation_s = 0.0
        self._through: list[dict[str, Any]] = []  # the messages up to the last generated turn
        self._ended = True  # the last turn stopped on its end-of-turn token
        self._tools: list[dict[str, Any]] | None = None

    @property
    def generated_tokens(self) -> int:
        return sum(self.mask)

    async def prepare(self, sandbox: Sandbox, workdir: str) -> None:
        return None  # the policy reads nothing before its first turn

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> Completion:
        if not self.prompt_ids:
            self._tools = tools
            self.prompt_ids = self.encoder.prompt_tokens(messages, tools)
            if len(self.prompt_ids) > self.rl.max_prompt_length:
                raise ContextLengthError(
                    f"the first prompt has {len(self.prompt_ids)} tokens, over "
                    f"rl.max_prompt_length ({self.rl.max_prompt_length})"
                )
        else:
            later = messages[len(self._through) :]
            try:
                text = self.encoder.continuation(self._through, later, tools, ended=self._ended)
            except DriftError as exc:  # the episode cannot be kept token-exact: not trainable
                raise ModelError(str(exc)) from None
            self._append(self.encoder.tokenize(text), trained=False)
        budget = self.rl.max_response_length - len(self.response_ids)
        if budget <= 0:
            raise ContextLengthError("the episode used its rl.max_response_length tokens")
        context = self.prompt_ids + self.response_ids
        began = time.perf_counter()
        try:
            new, logprobs = await self.generate(context, min(self.rl.max_tokens_per_turn, budget))
        except SweflowError:
            raise
        except Exception as exc:  # the generation backend failed: an infrastructure failure
            raise ModelUnavailableError(f"policy generation failed: {exc}") from exc
        latency = time.perf_counter() - began
        self.generation_s += latency
        self._append(new, trained=True, logprobs=logprobs)
        eos = self.encoder.tokenizer.eos_token_id
        self._ended = bool(new) and new[-1] == eos
        text = self.encoder.tokenizer.decode(new[:-1] if self._ended else new)
        message = parse_reply(text, tools)
        self._through = [*messages, message]
        return Completion(
            message, len(context), len(new), latency, "stop" if self._ended else "length"
        )

    def _append(self, ids: list[int], *, trained: bool, logprobs: list[float] | None = None):
        self.response_ids += ids
        self.mask += [int(trained)] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)

    async def close(self) -> None:
        return None


def parse_reply(text: str, tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The assistant message of a generated text: with tools, its hermes-style
    ``<tool_call>{...}</tool_call>`` blocks become tool calls (as vLLM's parser makes them)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if not tools:
        return message
    calls = []
    for i, raw in enumerate(HERMES_CALL.findall(text)):
        try:
            call = json.loads(raw)
        except json.JSONDecodeError:
            continue
        arguments = call.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:8]}_{i}",
                "type": "function",
                "function": {"name": str(call.get("name", "")), "arguments": json.dumps(arguments)},
            }
        )
    if calls:
        message["content"] = HERMES_CALL.sub("", text).strip() or None
        message["tool_calls"] = calls
    return message


@dataclass
class Episode:
    """A finished rollout: its tokens, mask and log-probabilities, reward and what it cost."""

    instance_id: str
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    reward: float | None = None  # None: an infrastructure failure (dropped from the batch)
    resolved: bool = False
    refused: str = ""  # the tamper guard's reason, when it refused the patch
    infra_failure: str = ""
    masked: str = ""  # why the episode trains nothing though it was scored (dynamic sampling)
    exit_status: str = ""
    steps: int = 0
    valid_steps: int = 0
    generation_s: float = 0.0
    env_s: float = 0.0  # sandbox open, tool execution, diff, grading
    wall_s: float = 0.0
    attempts: int = 1
    policy_version: int = 0  # the updates the policy that generated it had had
    trajectory: Trajectory | None = None

    @property
    def hit_limit(self) -> bool:
        """It ended on a turn, token, time or context limit, not by submitting."""
        return self.exit_status in LIMITS

    @property
    def truncated(self) -> bool:
        """It ended because its tokens ran out (the token budget, or the context)."""
        return self.exit_status in LENGTH_LIMITS


@dataclass
class EpisodeEnv:
    """Where episodes run and how they are judged (sweflow.training.rl.trainer.episode_env
    makes one on an executor)."""

    open: Callable[[Instance], Sandbox]  # a fresh sandbox of the task's environment
    grade: Callable[[Instance, str], Awaitable[Any]]  # async: a RewardResult
    agent: AgentConfig


async def run_episode(
    instance: Instance,
    env: EpisodeEnv,
    encoder: ChatEncoder,
    generate: Generate,
    rl: RLConfig,
    name: str = "policy",
) -> Episode:
    """One rollout with retries of infrastructure failures; never raises for those."""
    episode = Episode(instance.instance_id)
    for attempt in range(rl.infra_retries + 1):
        episode = await _attempt(instance, env, encoder, generate, rl, name)
        episode.attempts = attempt + 1
        if not episode.infra_failure:
            break
    return episode


async def _attempt(instance, env, encoder, generate, rl, name) -> Episode:
    began = time.perf_counter()
    stream = TokenStream(name, encoder, generate, rl)
    episode = Episode(instance.instance_id)
    agent = env.agent.model_copy(update={"max_observation_chars": rl.max_observation_chars})
    try:
        sandbox = await asyncio.to_thread(env.open, instance)
    except SweflowError as exc:
        episode.infra_failure = f"sandbox: {exc}"
        return _finish(episode, stream, began)
    async with sandbox:
        traj = await run_agent(instance, sandbox, stream, agent)
    episode.trajectory = traj
    episode.exit_status = traj.exit_status
    episode.steps = len(traj.steps)
    episode.valid_steps = sum(not s.format_error for s in traj.steps)
    if traj.exit_status in INFRA_FAILURES:
        episode.infra_failure = f"{traj.exit_status}: {traj.error}"
        return _finish(episode, stream, began)
    try:
        result = await asyncio.wait_for(env.grade(instance, traj.patch), rl.reward_timeout_s)
    except TimeoutError:
        episode.infra_failure = f"grading ran past {rl.reward_timeout_s:.0f} s"
        return _finish(episode, stream, began)
    except Exception as exc:
        if not is_infrastructure(exc) and not isinstance(exc, SweflowError):
            raise
        episode.infra_failure = f"grading: {exc}"
        return _finish(episode, stream, began)
    if getattr(result, "infrastructure", False):
        episode.infra_failure = f"grading: {result.reason}"
        return _finish(episode, stream, began)
    episode.resolved = bool(result.resolved)
    episode.refused = result.apply_status if result.apply_status in REFUSALS else ""
    lost = shaping(rl, episode, traj.patch, len(stream.response_ids))
    episode.reward = float(episode.resolved) - lost
    traj.reward = {
        "resolved": episode.resolved,
        "reward": episode.reward,
        "reason": result.reason,
        "apply_status": result.apply_status,
    }
    return _finish(episode, stream, began)


def shaping(rl: RLConfig, episode: Episode, patch: str, response_tokens: int = 0) -> float:
    """What the episode loses besides the task: the share of its replies that were no action,
    changing nothing (see sweflow.training.rl.config), and DAPO's soft overlong punishment of
    its ``response_tokens`` (replies and observations: what rl.max_response_length bounds)."""
    invalid = (episode.steps - episode.valid_steps) / max(episode.steps, 1)
    empty = rl.empty_patch_penalty if not patch.strip() else 0.0
    objective = rl.objective
    overlong = overlong_punishment(
        response_tokens,
        rl.max_response_length,
        objective.overlong_buffer,
        objective.overlong_penalty,
    )
    return rl.format_error_penalty * invalid + empty - overlong


def _finish(episode: Episode, stream: TokenStream, began: float) -> Episode:
    episode.prompt_ids, episode.response_ids = stream.prompt_ids, stream.response_ids
    episode.mask, episode.logprobs = stream.mask, stream.logprobs
    episode.generation_s = stream.generation_s
    episode.wall_s = time.perf_counter() - began
    episode.env_s = max(0.0, episode.wall_s - episode.generation_s)
    return episode


def save_episodes(episodes: list[Episode], folder: Path) -> None:
    """The step's trajectories, each with its reward, for reading what the policy did."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, episode in enumerate(episodes):
        if episode.trajectory is not None:
            episode.trajectory.error = episode.trajectory.error or episode.infra_failure
            episode.trajectory.save(folder / f"{i:03d}-{episode.instance_id}.json")


__all__ = ["DriftError", "Episode", "EpisodeEnv", "Generate", "TokenStream", "run_episode"]
