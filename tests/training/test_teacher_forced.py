"""Teacher-forced accuracy (sweflow.training.teacher_forced): the tokens scored are exactly the
edits' new text and the views' targets as the model reads them, the figure is the model's
argmax agreement there (checked against a whole-sequence forward pass), and it tells a model
that can copy a fix's text from one that cannot."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from sweflow.training.chat import ChatEncoder
from sweflow.training.teacher_forced import target_spans, token_accuracy

LINE = "    return sorted(set(values), key=values.index)  # keep the first of each"
NEW = LINE.replace("sorted(set(values), key=values.index)", "list(dict.fromkeys(values))")


def fenced(command: str) -> str:
    return f"I will do that.\n```bash\n{command}\n```"


def conversation() -> dict:
    """A text-mode teacher trajectory: a view, its observation, an edit, a submit."""
    view = "str_replace_editor view /testbed/pkg/unique.py --view_range '[1, 3]'"
    edit = (
        "str_replace_editor str_replace /testbed/pkg/unique.py "
        f"--old_str {shlex.quote(LINE)} --new_str {shlex.quote(NEW)}"
    )
    return {
        "instance_id": "pkg__unique-1",
        "messages": [
            {"role": "system", "content": "You fix bugs. Reply with one ```bash``` block."},
            {"role": "user", "content": "unique() is slow on long lists: use dict.fromkeys."},
            {"role": "assistant", "content": fenced(view)},
            {"role": "user", "content": f"1\tdef unique(values):\n2\t{LINE}\n3\t"},
            {"role": "assistant", "content": fenced(edit)},
            {"role": "user", "content": "The file was edited."},
            {"role": "assistant", "content": fenced("submit")},
        ],
    }


def test_the_scored_spans_are_the_edit_text_and_the_view_targets(smollm2: Path) -> None:
    record = conversation()
    rendered = ChatEncoder(smollm2).rendered(record["messages"])
    spans = [
        (kind, rendered.text[a:b]) for _, kind, a, b in target_spans(rendered, record["messages"])
    ]
    assert spans[:3] == [("view", "/testbed/pkg/unique.py"), ("view", "[1, 3]"), ("edit", NEW)]
    fixed = "".join(text for kind, text in spans[3:] if kind == "fix")  # what differs
    assert "list" in fixed and "dict.fromkeys" in fixed, fixed
    assert "return" not in fixed and "values" not in fixed and "keep the first" not in fixed


def test_a_quote_inside_the_new_text_is_scored_where_the_command_line_writes_it(smollm2) -> None:
    """shlex writes ' as '"'"' inside its quotes: the changed text is found past it."""
    old, new = "x = 'a'", "x = 'b'"
    edit = "str_replace_editor str_replace /testbed/a.py " + " ".join(
        ["--old_str", shlex.quote(old), "--new_str", shlex.quote(new)]
    )
    messages = [
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": fenced(edit)},
    ]
    rendered = ChatEncoder(smollm2).rendered(messages)
    spans = [(kind, rendered.text[a:b]) for _, kind, a, b in target_spans(rendered, messages)]
    assert spans == [("edit", "x = '\"'\"'b'\"'\"'"), ("fix", "b")]


def test_the_accuracy_is_the_argmax_agreement_of_a_whole_forward_pass(tiny_smollm2: Path) -> None:
    """Read through a window as long as the conversation, the figure is what one forward pass
    over it gives at the scored tokens; a short window scores only tokens whose context fits."""
    import torch
    from transformers import AutoModelForCausalLM

    record = conversation()
    rendered = ChatEncoder(tiny_smollm2).rendered(record["messages"])
    net = AutoModelForCausalLM.from_pretrained(str(tiny_smollm2), dtype=torch.float32).eval()
    with torch.no_grad():
        guess = net(torch.tensor([rendered.tokens])).logits[0].argmax(-1).tolist()
    tokens = {
        (kind, p)
        for _, kind, a, b in target_spans(rendered, record["messages"])
        for p, (s, e) in enumerate(rendered.offsets)
        if s < b and e > a
    }
    expected = {"edit": [0, 0], "fix": [0, 0], "view": [0, 0]}
    for kind, p in tokens:
        expected[kind][0] += guess[p - 1] == rendered.tokens[p]
        expected[kind][1] += 1
    whole = token_accuracy(tiny_smollm2, [record], window=len(rendered.tokens))
    assert whole.conversations == 1 and not whole.skipped
    for kind, (correct, scored) in expected.items():
        assert (whole.correct[kind], whole.scored[kind]) == (correct, scored), kind
        assert whole.figures()[f"{kind}_token_accuracy"] == pytest.approx(
            correct / scored, abs=1e-4
        )
    short = token_accuracy(tiny_smollm2, [record], window=10)
    assert 0 < short.scored["edit"] < whole.scored["edit"]


def test_it_tells_a_model_that_copies_the_fix_from_one_that_cannot(
    smollm2: Path, tiny_smollm2: Path
) -> None:
    """The edit's new text is mostly the line the view showed: SmolLM2 copies most of it, the
    same model cut to two layers almost none; the part that differs from the old line (the
    fix itself) is what copying cannot give, and it scores lower."""
    full = token_accuracy(smollm2, [conversation()], window=8192).figures()
    cut = token_accuracy(tiny_smollm2, [conversation()], window=8192).figures()
    assert full["edit_tokens"] == cut["edit_tokens"] > 10
    assert full["edit_token_accuracy"] > 0.5, full
    assert full["edit_token_accuracy"] > cut["edit_token_accuracy"] + 0.3, (full, cut)
    assert 0 < full["fix_tokens"] < full["edit_tokens"]
    assert full["fix_token_accuracy"] < full["edit_token_accuracy"], full
