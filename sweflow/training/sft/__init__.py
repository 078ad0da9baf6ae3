"""Supervised fine-tuning with torchtune's own recipes: golden trajectories -> a model folder.

Light to import: torch and torchtune load only when a fine-tune runs.
"""

from __future__ import annotations

from sweflow.lazy import lazy_exports

_EXPORTS = {
    "SFTConfig": "config",
    "SFTResult": "train",
    "train_sft": "train",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
