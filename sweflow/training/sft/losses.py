"""The loss of a model folder on tokenized examples, through transformers: the number behind
"it learned" (held-out loss before and after), and the proof that a trained checkpoint loads."""

from __future__ import annotations

from pathlib import Path

from sweflow.training.sft.data import IGNORE, Example


def mean_loss(model: Path, examples: list[Example]) -> float:
    """Token-weighted cross-entropy over the trained (assistant) tokens of ``examples``."""
    import torch
    from transformers import AutoModelForCausalLM

    net = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32).eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for example in examples:
            ids = torch.tensor([example.tokens])
            labels = torch.tensor([example.labels[1:] + [IGNORE]])
            logits = net(ids).logits
            losses = torch.nn.functional.cross_entropy(
                logits.view(-1, logits.size(-1)),
                labels.view(-1),
                ignore_index=IGNORE,
                reduction="sum",
            )
            total += float(losses)
            count += int((labels != IGNORE).sum())
    return total / max(count, 1)
