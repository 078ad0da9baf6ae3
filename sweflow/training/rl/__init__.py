"""On-policy RL on sandboxed rewards: the policy plays the sweflow agent and the tests passing
is its reward. One episode contract (episode), trainers as a registry of backends (backends,
each an RLBackend of backend), one entry point (trainer.train).

Light to import: the trainers' stacks (TRL, torch, verl) load only when a run starts.
"""

from __future__ import annotations

from sweflow.lazy import lazy_exports

_EXPORTS = {
    "RLBackend": "backend",
    "RLRun": "backend",
    "RL_BACKENDS": "backends",
    "RLConfig": "config",
    "RLResult": "result",
    "train": "trainer",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
