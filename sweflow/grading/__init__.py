"""Grading: the reward (does a patch resolve a task?), evaluation runs, harness cross-checks.

from sweflow.grading import Grader
grader = Grader(store, specs)            # built instances of a layer store
result = grader.reward(instance, patch)  # RewardResult(resolved, f2p/p2p counts, apply_status...)
"""

from __future__ import annotations

from sweflow.grading.reward import Grader, GradingError, RewardResult, reward

__all__ = ["Grader", "GradingError", "RewardResult", "reward"]
