"""The knobs RL papers ablate: the ``rl.objective`` and ``rl.lora`` sections.

The advantage estimator is ``rl.algorithm`` (grpo, rloo) with ``rl.scale_advantages`` (none:
Dr. GRPO's unscaled advantage), the KL coefficient ``rl.kl_coef``; the rest lives here so that
one section says how a step's episodes become a loss:

- ``epsilon`` / ``epsilon_high``: PPO's clip range of the importance ratio, [1 - epsilon,
  1 + epsilon_high]; a higher upper bound is DAPO's clip-higher.
- ``loss_aggregation``: how per-token losses become one number (token-mean: DAPO's, each token
  weighs the same; seq-mean-token-mean: GRPO's, each episode weighs the same; seq-mean-token-sum;
  seq-mean-token-sum-norm: Dr. GRPO's, token sums over a constant, ``rl.max_response_length``).
- ``kl_estimator``: Schulman's k1, k2 or k3 estimate of KL(policy || reference), weighted by
  ``rl.kl_coef`` in the loss (GRPO's KL term; k3 is verl's low_var_kl, clamped to [-10, 10]).
- ``mask_truncated``: DAPO's overlong filtering, episodes cut by the token or context budget
  train nothing (``rl.compact_filtering``, DeepSWE's, also masks turn and time limits).
- ``overlong_buffer`` / ``overlong_penalty``: DAPO's soft overlong punishment, a reward that
  falls linearly from 0 to ``-overlong_penalty`` over the last ``overlong_buffer`` tokens of
  ``rl.max_response_length``.

``rl.lora`` trains a LoRA adapter (peft) instead of every weight. Values that cannot work are
refused here, naming the field, before anything runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from sweflow.configfile import ConfigModel

if TYPE_CHECKING:
    from sweflow.training.rl.config import RLConfig

LossAggregation = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]
KLEstimator = Literal["k1", "k2", "k3"]


class ObjectiveSettings(ConfigModel):
    """How the policy loss is made from a step's episodes (``rl.objective``)."""

    epsilon: float = Field(
        0.2, gt=0, lt=1, description="the ratio is clipped below at 1 - epsilon (PPO)"
    )
    epsilon_high: float | None = Field(
        None,
        gt=0,
        description="the ratio is clipped above at 1 + epsilon_high; DAPO's clip-higher uses "
        "0.28; None: epsilon",
    )
    loss_aggregation: LossAggregation = Field(
        "token-mean",
        description="token-mean (DAPO), seq-mean-token-mean (GRPO), seq-mean-token-sum, "
        "seq-mean-token-sum-norm (Dr. GRPO: token sums over rl.max_response_length)",
    )
    kl_estimator: KLEstimator = Field(
        "k3", description="estimate of KL(policy || reference) weighted by rl.kl_coef"
    )
    mask_truncated: bool = Field(
        False,
        description="DAPO's overlong filtering: episodes cut by the token or context budget "
        "train nothing",
    )
    overlong_buffer: int = Field(
        0,
        ge=0,
        description="DAPO's soft overlong punishment over the last this many tokens of "
        "rl.max_response_length; 0: off",
    )
    overlong_penalty: float = Field(
        1.0, gt=0, description="the punishment at rl.max_response_length tokens and past it"
    )

    @model_validator(mode="after")
    def _fits(self) -> ObjectiveSettings:
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise ValueError(
                f"epsilon_high ({self.epsilon_high}) is below epsilon ({self.epsilon}): "
                "clip-higher raises the upper bound; leave epsilon_high unset for PPO's "
                "symmetric range"
            )
        return self

    @property
    def upper(self) -> float:
        """The upper clip range: ``epsilon_high``, else ``epsilon``."""
        return self.epsilon if self.epsilon_high is None else self.epsilon_high


class LoraSettings(ConfigModel):
    """A LoRA adapter trained in place of every weight (``rl.lora``; peft)."""

    rank: int = Field(0, ge=0, description="the adapter's rank; 0: train every weight")
    alpha: int = Field(16, ge=1, description="the adapter's scale is alpha / rank")
    target_modules: str | list[str] = Field(
        "all-linear",
        min_length=1,
        description="the modules that get an adapter: all-linear, or their names",
    )

    @property
    def enabled(self) -> bool:
        return self.rank > 0


def check_objective(rl: RLConfig) -> None:
    """The checks that need fields outside ``rl.objective`` (RLConfig calls it)."""
    objective = rl.objective
    if rl.algorithm == "rloo" and rl.scale_advantages == "group":
        raise ValueError(
            "algorithm rloo's leave-one-out advantage is never divided by the group's reward "
            "spread (that is GRPO's): set scale_advantages: none"
        )
    if objective.overlong_buffer >= rl.max_response_length:
        raise ValueError(
            f"objective.overlong_buffer ({objective.overlong_buffer}) must be below "
            f"max_response_length ({rl.max_response_length}): the punishment starts that many "
            "tokens before the limit"
        )
