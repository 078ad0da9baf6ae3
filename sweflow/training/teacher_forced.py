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
import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any

from sweflow.agent.actions import Action, FormatError, from_text, from_tool_calls
from sweflow.agent.tools import EDITOR
from sweflow.training.chat import ChatEncoder, ChatTemplateError, DriftError, Rendered, Turn

WORD = re.compile(r"\w+|\s+|[^\w\s]")
KINDS = ("edit", "fix", "view")  # the edits' new text, its changed part, the views' targets


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


def targets(action: Action) -> Iterator[tuple[str, str, list[tuple[int, int]]]]:
    """(kind, value, ranges) of what ``action`` writes that is scored, ``ranges`` the parts of
    ``value`` that count: an edit's new text (``edit``), of which the characters that differ
    from the text it replaces (``fix``: what copying the old text cannot give), and a view's
    path and line range (``view``)."""
    if action.tool != EDITOR:
        return
    command = action.args.get("command")
    if command in ("str_replace", "replace_lines", "insert") and action.args.get("new_str"):
        new = str(action.args["new_str"])
        yield "edit", new, [(0, len(new))]
        # replace_lines names the old text by number: all of its new text counts as the fix
        old = str(action.args.get("old_str") or "") if command == "str_replace" else ""
        yield "fix", new, changed_ranges(old, new)
    elif command == "view":
        path = str(action.args.get("path", ""))
        yield "view", path, [(0, len(path))]
        if action.args.get("view_range") is not None:
            lines = json.dumps(action.args["view_range"])
            yield "view", lines, [(0, len(lines))]


def changed_ranges(old: str, new: str) -> list[tuple[int, int]]:
    """The character ranges of ``new`` that differ from ``old``, compared word by word (a word,
    a run of spaces or one other character), so a renamed call is one change, not letters
    the two names happen to share."""
    old_words, new_words = WORD.findall(old), WORD.findall(new)
    starts = [0]
    for word in new_words:
        starts.append(starts[-1] + len(word))
    matcher = SequenceMatcher(None, old_words, new_words, autojunk=False)
    return [
        (starts[j1], starts[j2])
        for tag, _, _, j1, j2 in matcher.get_opcodes()
        if tag != "equal" and j2 > j1
    ]


def written_forms(value: str) -> list[tuple[str, list[int]]]:
    """The ways a value can be written in a rendered turn, each with where every character of
    ``value`` starts in it (and, last, where it ends): quoted as a text-mode command line
    quotes it, escaped as a tool call's JSON escapes it, or as it is."""

    def form(prefix: str, pieces: list[str], suffix: str = "") -> tuple[str, list[int]]:
        starts = [len(prefix)]
        for piece in pieces:
            starts.append(starts[-1] + len(piece))
        return prefix + "".join(pieces) + suffix, starts

    forms = []
    if shlex.quote(value) != value:  # shlex.quote's own rule: in quotes, ' written '"'"'
        forms.append(form("'", [c if c != "'" else "'\"'\"'" for c in value], "'"))
    forms.append(form("", [json.dumps(c)[1:-1] for c in value]))
    forms.append(form("", list(value)))
    return forms


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
            if old := action.args.get("old_str"):  # written before the new text: not scored
                at = _written(rendered.text, str(old), at, turn.end)[1]
            for kind, value, ranges in targets(action):
                found, end, starts = _written(rendered.text, value, at, turn.end)
                if found >= 0:
                    spans += [(turn, kind, found + starts[a], found + starts[b]) for a, b in ranges]
                    if kind != "edit":  # fix scores the same text again: search on after it
                        at = end
    return spans


def _written(text: str, value: str, start: int, end: int) -> tuple[int, int, list[int]]:
    """(where, where it ends, its characters' starts) of ``value``'s first written form in
    ``text[start:end]``; where is -1 (and the end ``start``) when none is there."""
    for form, starts in written_forms(value):
        found = text.find(form, start, end) if form else -1
        if found >= 0:
            return found, found + len(form), starts
    return -1, start, []


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
        by_turn: dict[int, set[tuple[str, int]]] = {}  # a turn's last token: (kind, token)
        for turn, kind, start, end in target_spans(rendered, record["messages"]):
            last = max(i for i, (a, _) in enumerate(rendered.offsets) if a < turn.end)
            by_turn.setdefault(last, set()).update(
                (kind, i) for i, (a, b) in enumerate(rendered.offsets) if a < end and b > start
            )
        result.conversations += 1
        with torch.no_grad():
            for last, scored in sorted(by_turn.items()):
                first = max(0, last + 1 - window)
                ids = torch.tensor([rendered.tokens[first : last + 1]])
                hidden = net.base_model(ids).last_hidden_state[0]
                kept = sorted((kind, p) for kind, p in scored if p - 1 >= first)
                if not kept:  # every target's context was cut
                    continue
                rows = torch.tensor([p - 1 - first for _, p in kept])
                predicted = net.get_output_embeddings()(hidden[rows]).argmax(-1).tolist()
                for (kind, p), guess in zip(kept, predicted, strict=True):
                    result.scored[kind] += 1
                    result.correct[kind] += guess == rendered.tokens[p]
    return result
