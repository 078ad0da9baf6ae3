"""On-policy RL on sandboxed rewards: the policy plays the sweflow agent and the tests passing
is its reward. One episode contract (episode), trainers as a registry of backends (backends).

Light to import: the trainers' stacks (TRL, torch, verl) load only when a run starts.
"""

from __future__ import annotations

from sweflow.lazy import lazy_exports

_EXPORTS = {
    "RLConfig": "config",
    "RLResult": "trainer",
    "train": "trainer",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
