"""Conversations as the served model sees them, for training: tokens and an assistant-only mask.

The text a model is trained on must be the text the agent sends vLLM at inference, byte for
byte, or training teaches a format the model never meets. So a conversation is rendered with the
model's own chat template, the way vLLM's chat endpoint renders it (the same messages, the same
``tools`` when the agent sent tools, the generation prompt after each turn's prefix), and
tokenized as vLLM tokenizes a chat prompt (no extra special tokens). Each assistant turn is
trained from its first token through its end-of-turn token, exactly the tokens the model emits;
system, user and tool turns, and the template's own framing, are masked.

vLLM's chat endpoint does not hand the messages to the template as they arrive: a tool call's
``arguments`` (a JSON string in the OpenAI API) become a dict, and an empty ``tool_calls`` list is
dropped (vLLM 0.32, ``vllm/renderers/chat_utils.py``'s message post-processing). Rendering does
the same, so a template that writes the arguments with ``tojson`` (Qwen2.5's) sees an object, not
a string it would encode twice.

:meth:`ChatEncoder.encode` checks what it relies on: the prompt of every assistant turn, tokenized
on its own as vLLM would, is a prefix of the sequence's tokens. A conversation where that fails
(a template that rewrites earlier turns, a tokenization that merges across the boundary) is
refused with :class:`DriftError` rather than trained on a sequence the model never sees. And a
turn whose actions vanish in the template (SmolLM2's ignores ``tool_calls``) is refused with
:class:`ActionsLostError`, naming the model: training on it would teach replies with no action.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sweflow.errors import ConfigError, SweflowError

Messages = list[dict[str, Any]]


class DriftError(SweflowError):
    """The training tokens of a conversation would differ from what the served model receives."""


class ChatTemplateError(ConfigError):
    """The model folder has no chat template or tokenizer that can render the conversation."""


class ActionsLostError(ChatTemplateError):
    """The chat template drops an assistant turn's tool calls: the turn would train no action."""


def as_vllm_renders(messages: Messages) -> Messages:
    """The messages as vLLM's chat endpoint hands them to the template: tool-call arguments
    parsed from their JSON string into a dict, an empty ``tool_calls`` list dropped."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") != "assistant" or calls is None:
            out.append(message)
            continue
        message = {k: v for k, v in message.items() if k != "tool_calls"}
        if calls:
            message["tool_calls"] = [_parsed_arguments(call) for call in calls]
        out.append(message)
    return out


def _parsed_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return call  # vLLM passes what it cannot parse as it came
        return {**call, "function": {**function, "arguments": arguments}}
    return call


@dataclass(frozen=True)
class Encoded:
    """One conversation: its tokens, which of them are trained, and where each assistant turn's
    prompt ends (the token count vLLM receives before that turn)."""

    tokens: list[int]
    trained: list[bool]
    prompt_lengths: list[int]

    @property
    def trained_tokens(self) -> int:
        return sum(self.trained)


@dataclass(frozen=True)
class Turn:
    """Where assistant message ``index`` runs in a rendered conversation (characters)."""

    index: int
    start: int
    end: int


@dataclass(frozen=True)
class Rendered:
    """A conversation as its template renders it: the text, its tokens and each token's
    character span in it, and the assistant turns."""

    text: str
    tokens: list[int]
    offsets: list[tuple[int, int]]
    turns: list[Turn]


class ChatEncoder:
    """Renders and tokenizes conversations with a model folder's tokenizer and chat template."""

    def __init__(self, model: Path) -> None:
        from transformers import AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(model))
        except (OSError, ValueError) as exc:
            raise ChatTemplateError(f"{model}: no usable tokenizer: {exc}") from None
        if not getattr(self.tokenizer, "chat_template", None):
            raise ChatTemplateError(f"{model}: the tokenizer has no chat template")
        if not self.tokenizer.is_fast:
            raise ChatTemplateError(f"{model}: a fast tokenizer (tokenizer.json) is needed")
        self.model = Path(model)
        self.end_of_turn = self.tokenizer.eos_token or ""

    def render(self, messages: Messages, tools: Messages | None, *, prompt: bool) -> str:
        """The template's text; ``prompt`` adds the generation prompt (what vLLM continues)."""
        kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": prompt}
        if tools:
            kwargs["tools"] = tools
        try:
            return self.tokenizer.apply_chat_template(as_vllm_renders(messages), **kwargs)
        except Exception as exc:  # jinja errors: a role or a None content the template refuses
            why = f"the chat template cannot render this conversation: {exc}"
            raise ChatTemplateError(why) from None

    def tokenize(self, text: str) -> list[int]:
        """Tokens of rendered text, as vLLM tokenizes a chat prompt."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prompt_tokens(self, messages: Messages, tools: Messages | None = None) -> list[int]:
        """What the served model receives to produce the next assistant turn."""
        return self.tokenize(self.render(messages, tools, prompt=True))

    def encode(self, messages: Messages, tools: Messages | None = None) -> Encoded:
        """The whole conversation's tokens with its assistant turns marked as trained, but for
        those of ``weight`` 0 (OpenAI's fine-tuning format: a turn that is context only)."""
        rendered = self.rendered(messages, tools)
        spans = [(t.start, t.end) for t in rendered.turns if messages[t.index].get("weight", 1)]
        trained = [any(a <= s and e <= b for a, b in spans) for s, e in rendered.offsets]
        tokens = rendered.tokens
        lengths = []
        for prefix in (rendered.text[: t.start] for t in rendered.turns):
            alone = self.tokenize(prefix)
            if tokens[: len(alone)] != alone:
                raise DriftError(
                    f"a prompt of {len(alone)} tokens is not a prefix of the training sequence"
                )
            lengths.append(len(alone))
        return Encoded(tokens, trained, lengths)

    def rendered(self, messages: Messages, tools: Messages | None = None) -> Rendered:
        """The conversation's text, its tokens with their character spans, and where in the
        text each assistant turn runs (checked: in context as when prompted, actions shown)."""
        text = self.render(messages, tools, prompt=False)
        turns = []
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            prefix = self.render(messages[:i], tools, prompt=True)
            if not text.startswith(prefix):
                raise DriftError(f"the chat template renders turn {i} differently in context")
            end = self._end_in_context(text, prefix, messages[: i + 1], tools)
            self._check_actions(message, text[len(prefix) : end], i)
            turns.append(Turn(i, len(prefix), end))
        encoding = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return Rendered(text, encoding["input_ids"], encoding["offset_mapping"], turns)

    def _check_actions(self, message: dict[str, Any], rendered: str, turn: int) -> None:
        """Every tool call of an assistant turn shows in the turn's rendered text (its name, and
        its arguments' values), or training would teach the turn without its action."""
        content = message.get("content")
        if isinstance(content, str) and content:
            rendered = rendered.replace(content, "")  # a thought may name the tool it calls
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            arguments = _parsed_arguments(call)["function"].get("arguments")
            values = arguments.values() if isinstance(arguments, dict) else [arguments]
            shown = [str(function.get("name", ""))]  # and the values no template escapes
            shown += [
                v
                for v in values
                if isinstance(v, str) and v and v.isprintable() and not set(v) & set("\"'\\<>&")
            ]
            if not all(value in rendered for value in shown):
                raise ActionsLostError(
                    f"{self.model}: the chat template drops the tool calls of assistant turn "
                    f"{turn} (tools mode): {function.get('name')!r} does not appear in the "
                    "rendered text, so the turn would be trained without its action; collect in "
                    "text mode (--tool-mode text) for this model"
                )

    def continuation(
        self, through: Messages, later: Messages, tools: Messages | None, *, ended: bool
    ) -> str:
        """The text that follows an assistant turn's generated tokens up to the next generation
        prompt: the template's framing of ``later`` (observations). Only framing and new text;
        the turn's own tokens are what the model generated, never rendered again. ``ended``
        says the generation stopped on the end-of-turn token (else the framing adds it)."""
        rendered = self.render(through, tools, prompt=False)
        end = self._turn_end(rendered, 0)
        eos_at = end - len(self.end_of_turn) if rendered[:end].endswith(self.end_of_turn) else end
        following = self.render([*through, *later], tools, prompt=True)
        if not following.startswith(rendered[:end]):
            raise DriftError("the chat template renders the assistant turn differently in context")
        return following[end:] if ended else following[eos_at:]

    def _end_in_context(
        self, text: str, prefix: str, through: Messages, tools: Messages | None
    ) -> int:
        """Where an assistant turn that starts after ``prefix`` ends in the whole conversation:
        at its first end-of-turn token. The turn is taken as the conversation renders it, not
        as it renders when last: Qwen3's template gives the last assistant turn an empty
        ``<think></think>`` block that it drops once more turns follow, and the prompt of the
        next turn (checked against ``text`` too) is what the model is sent after this one."""
        if self.end_of_turn and (at := text.find(self.end_of_turn, len(prefix))) >= 0:
            return at + len(self.end_of_turn)
        rendered = self.render(through, tools, prompt=False)
        if not text.startswith(rendered):
            raise DriftError("the chat template renders an assistant turn differently in context")
        return self._turn_end(rendered, len(prefix))

    def _turn_end(self, through: str, start: int) -> int:
        """Where the assistant turn's emitted text ends: after its end-of-turn token, before the
        whitespace the template adds between turns."""
        if self.end_of_turn:
            at = through.rfind(self.end_of_turn, start)
            if at >= 0:
                return at + len(self.end_of_turn)
        return len(through.rstrip())
