"""Training: SFT with torchtune (sweflow.training.sft) and on-policy RL (sweflow.training.rl),
with what both use in modules of their own here (chat rendering, model publishing).

Heavy stacks (torch, torchtune, TRL, transformers) load only when a training function runs;
the configs load without them.
"""

from __future__ import annotations

from sweflow.lazy import lazy_exports

_EXPORTS = {
    "SFTConfig": "sft.config",
    "SFTResult": "sft.train",
    "train_sft": "sft.train",
    "ChatEncoder": "chat",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
