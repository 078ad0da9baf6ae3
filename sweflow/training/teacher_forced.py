"""Teacher-forced accuracy: of the tokens a teacher trajectory's edits and views are written in,
how many a model predicts (its argmax) given everything before them.

Resolving a held-out task is all or nothing and a small model rarely gets there; this measure
moves first. Fed the teacher's own trajectory of a task, a model that has learned to write the
fix's text (the ``new_str`` of an edit) or to aim its views (the file and lines a ``view``
opens) predicts more of those tokens, long before a whole patch comes out right. Each assistant
turn that holds a target is scored on the last ``window`` tokens that end with it (the turns
before it, cut from the left when the conversation is longer), as the model would read them.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweflow.agent.actions import Action, FormatError, from_text, from_tool_calls
from sweflow.agent.tools import EDITOR
from sweflow.training.chat import ChatEncoder, ChatTemplateError, DriftError, Rendered, Turn

KINDS = ("edit", "view")  # what is scored: the edits' new text, the views' files and lines


@dataclass
class Accuracy:
    """Correct and scored tokens per kind, and the conversations that could not be scored."""

    correct: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    scored: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    conversations: int = 0
    skipped: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        """``edit_token_accuracy`` and ``view_token_accuracy`` (None where nothing was scored)
        with the token counts behind them."""
        out: dict[str, Any] = {}
        for kind in KINDS:
            n = self.scored[kind]
            out[f"{kind}_token_accuracy"] = round(self.correct[kind] / n, 4) if n else None
            out[f"{kind}_tokens"] = n
        return out | {"conversations": self.conversations, "skipped": self.skipped}


def targets(action: Action) -> Iterator[tuple[str, str]]:
    """(kind, value) of what ``action`` writes that is scored: an edit's new text, a view's
    path and line range."""
    if action.tool != EDITOR:
        return
    command = action.args.get("command")
    if command in ("str_replace", "insert") and action.args.get("new_str"):
        yield "edit", str(action.args["new_str"])
    elif command == "view":
        yield "view", str(action.args.get("path", ""))
        if action.args.get("view_range") is not None:
            yield "view", json.dumps(action.args["view_range"])


def actions_of(message: dict[str, Any]) -> list[Action]:
    """The assistant message's actions, from its tool calls or its one fenced block."""
    if message.get("tool_calls"):
        return from_tool_calls(message["tool_calls"])
    try:
        return [from_text(message.get("content") or "")]
    except FormatError:
        return []


def target_spans(
    rendered: Rendered, messages: list[dict[str, Any]]
) -> list[tuple[Turn, str, int, int]]:
    """(turn, kind, start, end): where in the rendered text each turn's targets are written,
    as a text-mode command line quotes them or a tool call's JSON escapes them."""
    spans = []
    for turn in rendered.turns:
        at = turn.start
        for action in actions_of(messages[turn.index]):
            for kind, value in targets(action):
                for form in (shlex.quote(value), json.dumps(value)[1:-1], value):
                    found = rendered.text.find(form, at, turn.end) if form else -1
                    if found >= 0:
                        spans.append((turn, kind, found, found + len(form)))
                        at = found + len(form)
                        break
    return spans


def token_accuracy(
    model: Path, records: Iterable[dict[str, Any]], window: int, encoder_model: Path | None = None
) -> Accuracy:
    """The teacher-forced accuracy of ``model`` (a transformers folder) on ``records``
    (OpenAI-format conversations: ``messages``, ``tools``), each target turn read through the
    last ``window`` tokens; rendered with ``encoder_model``'s template (default: the model's)."""
    import torch
    from transformers import AutoModelForCausalLM

    encoder = ChatEncoder(encoder_model or model)
    net = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32).eval()
    result = Accuracy()
    for record in records:
        name = str(record.get("instance_id", "?"))
        try:
            rendered = encoder.rendered(record["messages"], record.get("tools"))
        except (DriftError, ChatTemplateError) as exc:
            result.skipped.append(f"{name}: {exc}")
            continue
        by_turn: dict[int, list[tuple[str, list[int]]]] = {}  # a turn's last token: targets
        for turn, kind, start, end in target_spans(rendered, record["messages"]):
            positions = [i for i, (a, b) in enumerate(rendered.offsets) if a < end and b > start]
            last = max(i for i, (a, _) in enumerate(rendered.offsets) if a < turn.end)
            by_turn.setdefault(last, []).append((kind, positions))
        result.conversations += 1
        with torch.no_grad():
            for last, scored in sorted(by_turn.items()):
                first = max(0, last + 1 - window)
                ids = torch.tensor([rendered.tokens[first : last + 1]])
                hidden = net.base_model(ids).last_hidden_state[0]
                kept = [(kind, p) for kind, ps in scored for p in ps if p - 1 >= first]
                if not kept:  # every target's context was cut
                    continue
                rows = torch.tensor([p - 1 - first for _, p in kept])
                predicted = net.get_output_embeddings()(hidden[rows]).argmax(-1).tolist()
                for (kind, p), guess in zip(kept, predicted, strict=True):
                    result.scored[kind] += 1
                    result.correct[kind] += guess == rendered.tokens[p]
    return result
