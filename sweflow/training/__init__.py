"""Training: SFT with torchtune (sweflow.training.sft) and on-policy RL (sweflow.training.rl).

Heavy stacks (torch, torchtune, TRL, transformers) load only when a training function runs;
the configs load without them.
"""

from __future__ import annotations

from sweflow.lazy import lazy_exports

_EXPORTS = {
    "SFTConfig": "config",
    "SFTResult": "sft",
    "train_sft": "sft",
    "ChatEncoder": "chat",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
