"""The formulas the ``rl.objective`` knobs choose between, as the papers define them.

Kept apart from any trainer so that each can be checked by hand on a small batch, and shared by
the trainer (sweflow.training.rl.trl_loss) and the episodes' reward (its overlong punishment,
which the verl backend's episodes get the same way).

- :func:`group_advantages`: GRPO (DeepSeekMath, arXiv 2402.03300: (r - mean) / std of the
  group), Dr. GRPO (arXiv 2503.20783: r - mean, no division), RLOO (Ahmadian et al., arXiv
  2402.14740: r minus the mean of the group's other rewards).
- :func:`kl_estimate`: Schulman's k1, k2, k3 (http://joschu.net/blog/kl-approx.html) of
  KL(policy || reference) per token; k3 clamped as verl's ``low_var_kl``.
- :func:`aggregate`: per-token values to one micro-batch's share of the step's loss, for each
  ``loss_aggregation``.
- :func:`overlong_punishment`: DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

STD_EPS = 1e-4  # added to GRPO's group std before dividing (TRL's; verl adds 1e-6)
K3_CLAMP = 10.0  # verl's low_var_kl clamps k3 to [-10, 10]


def group_advantages(
    rewards: Sequence[float | None], group: int, algorithm: str, scale: bool
) -> list[float]:
    """Each episode's advantage within its group (``group`` consecutive episodes). An episode
    without a reward (an infrastructure failure) gets 0 and is left out of its group's
    baseline; a group with one scored episode compares it with nothing (0).

    grpo: ``r - mean``, divided by the group's sample std when ``scale`` (Dr. GRPO does not);
    rloo: ``r - mean of the others``, equal to ``n / (n - 1) * (r - mean)``, never divided."""
    if len(rewards) % group:
        raise ValueError(f"{len(rewards)} rewards do not make groups of {group}")
    out: list[float] = []
    for start in range(0, len(rewards), group):
        chunk = rewards[start : start + group]
        scored = [r for r in chunk if r is not None]
        n = len(scored)
        if n < 2:
            out += [0.0] * len(chunk)
            continue
        total, mean = sum(scored), sum(scored) / n
        spread = statistics.stdev(scored) + STD_EPS if scale else 1.0
        for r in chunk:
            if r is None:
                out.append(0.0)
            elif algorithm == "rloo":
                out.append(r - (total - r) / (n - 1))
            else:
                out.append((r - mean) / spread)
    return out


def kl_estimate(logps: Any, ref_logps: Any, estimator: str) -> Any:
    """Per-token estimate of KL(policy || reference) from the sampled tokens' log-probabilities
    under the policy (``logps``) and the reference (``ref_logps``); tensors of one shape.

    k1 = log(pi / ref); k2 = (log(pi / ref))^2 / 2; k3 = ref / pi - log(ref / pi) - 1, clamped to
    [-10, 10] like verl's low_var_kl (its log-ratio to [-20, 20] first)."""
    import torch

    log_ratio = logps - ref_logps
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    if estimator == "k3":
        back = torch.clamp(-log_ratio, min=-20.0, max=20.0)
        return torch.clamp(torch.exp(back) - back - 1.0, min=-K3_CLAMP, max=K3_CLAMP)
    raise ValueError(f"unknown kl_estimator {estimator!r}: k1, k2 or k3")


def aggregate(
    values: Any, mask: Any, mode: str, *, episodes: int, step_tokens: Any, horizon: int
) -> Any:
    """A micro-batch's share of the step's loss from its per-token ``values`` (rows: episodes)
    under ``mask``; summed over the step's micro-batches it is:

    token-mean: the mean over every trained token of the step (``step_tokens`` of them);
    seq-mean-token-mean: the mean over the step's ``episodes`` of each one's token mean;
    seq-mean-token-sum: the mean over the episodes of each one's token sum;
    seq-mean-token-sum-norm: the same divided by ``horizon`` (rl.max_response_length).

    An episode whose every token is masked adds 0 and still counts among ``episodes``, as in
    TRL's grpo, luspo and dr_grpo losses (verl leaves it out of the mean)."""
    kept = values * mask
    if mode == "token-mean":
        return kept.sum() / max(float(step_tokens), 1.0)
    sums = kept.sum(-1)
    if mode == "seq-mean-token-mean":
        sums = sums / mask.sum(-1).clamp(min=1.0)
    elif mode == "seq-mean-token-sum-norm":
        sums = sums / horizon
    elif mode != "seq-mean-token-sum":
        raise ValueError(f"unknown loss_aggregation {mode!r}")
    return sums.sum() / episodes


def overlong_punishment(length: int, limit: int, buffer: int, penalty: float) -> float:
    """DAPO's soft overlong punishment of a response of ``length`` tokens: 0 up to ``limit -
    buffer``, then falling linearly to ``-penalty`` at ``limit``, and ``-penalty`` past it
    (``buffer`` 0: none)."""
    if buffer <= 0:
        return 0.0
    over = min(max(length - (limit - buffer), 0), buffer)
    return -penalty * over / buffer
