"""The model client: the ``openai`` AsyncOpenAI client against any OpenAI-compatible URL.

It retries what a restart or an overload looks like (no connection, timeouts, 429, 5xx) with
exponential backoff for up to ``retry_budget_s``, so a batch outlives a model server that goes
away for a couple of minutes; anything else (a bad request, an unknown model) fails at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Protocol

import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion

from sweflow.agent.config import ModelConfig
from sweflow.errors import InfrastructureError, SweflowError
from sweflow.sandbox import Sandbox

log = logging.getLogger(__name__)
RETRIABLE = (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)
CONTEXT_WORDS = (
    "context length",
    "context_length",
    "maximum context",
    "model length",
    "too many tokens",
)


class ModelError(SweflowError):
    """The model endpoint failed for good (after retries, or with a non-retriable error)."""


class ContextLengthError(ModelError):
    """The server refused the prompt as longer than the model's context."""


class ModelUnavailableError(ModelError, InfrastructureError):
    """The endpoint stayed unreachable or overloaded for the whole retry budget."""


@dataclass(frozen=True)
class Completion:
    """One assistant reply, what it cost, and how long the endpoint took."""

    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str | None
    retries: int = 0
    # per generated token, when asked (``top_logprobs``): (token, {alternative: logprob})
    logprobs: list[tuple[str, dict[str, float]]] | None = None


class ChatModel(Protocol):
    """What the agent loop talks to: a served model (:class:`ModelClient`) or a teacher that
    plays one (sweflow.agent.teacher.replay). ``source`` marks the trajectories it produces."""

    name: str
    source: str

    async def prepare(self, sandbox: Sandbox, workdir: str) -> None:
        """Called once before the run's first :meth:`complete`, with the run's open sandbox: a
        teacher reads the repository here (the replay teacher plans its route; every step it
        then takes is a real, recorded action); a served model has nothing to do."""
        ...

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> Completion: ...

    async def close(self) -> None: ...


class Declined(SweflowError):
    """A teacher will not do the task: it sees no way that a student could follow (the message
    says why). The run ends with exit status ``declined``; it is not graded or kept."""


class ModelClient:
    """Chat completions with retries; one instance is shared by every run of a batch (or its
    :meth:`sampled` views, one per sample, share its connections)."""

    source = "model"

    def __init__(
        self, config: ModelConfig, *, seed: int | None = None, _shared: AsyncOpenAI | None = None
    ) -> None:
        self.config = config
        self.name = config.model
        self.seed = seed  # sent with every call: the server's sampler seeded per request
        self._owns = _shared is None
        self._client = _shared or AsyncOpenAI(
            base_url=config.base_url,
            api_key=config.api_key,
            timeout=config.request_timeout_s,
            max_retries=0,  # our own backoff below has a time budget, not a count
        )

    def sampled(self, temperature: float, seed: int) -> ModelClient:
        """This endpoint drawing one sample: its own temperature and seed, this client's
        connections (closing the view leaves them open)."""
        config = self.config.model_copy(update={"temperature": temperature})
        return ModelClient(config, seed=seed, _shared=self._client)

    async def prepare(self, sandbox: Sandbox, workdir: str) -> None:
        return None  # a served model reads nothing before its first reply

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        top_logprobs: int | None = None,
    ) -> Completion:
        """One reply; with ``top_logprobs`` the reply's tokens come with that many likeliest
        alternatives each (a verifier reads its YES and NO from them)."""
        cfg = self.config
        kwargs: dict[str, Any] = {"model": cfg.model, "messages": messages}
        kwargs["temperature"] = cfg.temperature
        if cfg.top_p is not None:
            kwargs["top_p"] = cfg.top_p
        if cfg.max_tokens is not None:
            kwargs["max_tokens"] = cfg.max_tokens
        if self.seed is not None:
            kwargs["seed"] = self.seed
        if top_logprobs is not None:
            kwargs.update(logprobs=True, top_logprobs=top_logprobs)
        if tools:
            kwargs["tools"] = tools
        deadline = time.monotonic() + cfg.retry_budget_s
        delay, retries = cfg.retry_initial_s, 0
        started = time.perf_counter()  # the latency includes retries: it is all model time
        while True:
            try:
                # post(), not chat.completions.create(): create() walks every message through its
                # TypedDict transform, ~0.3 ms a message and growing with the conversation; our
                # messages are plain JSON already. Errors, retries and parsing are the same.
                response = await self._client.post(
                    "/chat/completions", body=kwargs, cast_to=ChatCompletion
                )
                break
            except RETRIABLE as exc:
                if time.monotonic() + delay > deadline:
                    msg = f"{cfg.base_url}: gave up after {retries} retries: {exc}"
                    raise ModelUnavailableError(msg) from None
                log.info("model endpoint: %s; retrying in %.1f s", exc, delay)
            except openai.APIStatusError as exc:
                text = str(exc)
                if exc.status_code == 400 and any(w in text.lower() for w in CONTEXT_WORDS):
                    raise ContextLengthError(text) from None
                raise ModelError(f"{cfg.base_url}: {text}") from None
            except openai.OpenAIError as exc:  # a reply that is no chat completion, and the like
                raise ModelError(f"{cfg.base_url}: {type(exc).__name__}: {exc}") from None
            await asyncio.sleep(delay * (0.75 + random.random() / 2))
            delay = min(delay * 2, cfg.retry_max_s)
            retries += 1
        latency = time.perf_counter() - started
        if not response.choices:
            raise ModelError(f"{cfg.base_url}: a reply without choices")
        choice = response.choices[0]
        message = choice.message.model_dump(exclude_none=True, exclude_unset=True)
        message = {k: message[k] for k in ("role", "content", "tool_calls") if k in message}
        message["role"] = "assistant"
        message.setdefault("content", None)
        usage = response.usage
        return Completion(
            message=message,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            latency_s=latency,
            finish_reason=choice.finish_reason,
            retries=retries,
            logprobs=_token_logprobs(choice) if top_logprobs is not None else None,
        )

    async def close(self) -> None:
        if self._owns:
            await self._client.close()


def _token_logprobs(choice: Any) -> list[tuple[str, dict[str, float]]]:
    """The reply's tokens, each with its alternatives' logprobs (itself included)."""
    content = choice.logprobs.content if choice.logprobs else None
    return [
        (t.token, {alt.token: alt.logprob for alt in t.top_logprobs} | {t.token: t.logprob})
        for t in content or []
    ]
