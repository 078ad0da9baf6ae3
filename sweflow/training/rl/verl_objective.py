"""The ``rl`` knobs papers ablate under verl 0.9.1's own names (read from its
trainer/config/actor/actor.yaml, model/hf_model.yaml and ppo/core_algos.py).

Two knobs have no verl key, because sweflow's agent loop (sweflow.training.rl.verl_loop)
returns each episode's ``reward_score`` and ``response_mask`` itself, so verl's reward manager
never runs: DAPO's overlong punishment (verl's ``reward.reward_kwargs.overlong_buffer_cfg``,
read only by its dapo reward manager) is in the episode's reward, as in the trl backend, and
overlong and compact filtering are in its response mask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sweflow.training.rl.config import RLConfig

ESTIMATORS = {"grpo": "grpo", "rloo": "rloo", "ppo": "gae"}  # rl.algorithm -> adv_estimator
KL_LOSS_TYPES = {"k1": "k1", "k2": "k2", "k3": "low_var_kl"}  # verl's k3 is its low_var_kl
ACTOR = "actor_rollout_ref.actor"
MODEL = "actor_rollout_ref.model"
_LORA = "rl.lora (rank, alpha, target_modules)"
VERL_OWNED = {  # the verl keys these knobs set -> the field that sets each (overrides refused)
    "algorithm.adv_estimator": "rl.algorithm",
    "algorithm.norm_adv_by_std_in_grpo": "rl.scale_advantages",
    "algorithm.use_kl_in_reward": "rl.kl_coef (GRPO's KL is a loss term)",
    f"{ACTOR}.clip_ratio": "rl.objective.epsilon",
    f"{ACTOR}.clip_ratio_low": "rl.objective.epsilon",
    f"{ACTOR}.clip_ratio_high": "rl.objective.epsilon_high",
    f"{ACTOR}.loss_agg_mode": "rl.objective.loss_aggregation",
    f"{ACTOR}.loss_scale_factor": "rl.max_response_length (Dr. GRPO's constant)",
    f"{ACTOR}.use_kl_loss": "rl.kl_coef",
    f"{ACTOR}.kl_loss_coef": "rl.kl_coef",
    f"{ACTOR}.kl_loss_type": "rl.objective.kl_estimator",
    f"{MODEL}.lora_rank": _LORA,
    f"{MODEL}.lora_alpha": _LORA,
    f"{MODEL}.target_modules": _LORA,
    f"{MODEL}.lora.merge": _LORA,
}


def verl_objective(rl: RLConfig) -> dict[str, object]:
    """verl's settings for the advantage estimator, clip range, loss aggregation, KL term and
    LoRA of ``rl`` (keys of verl's ppo_trainer config, values as Python objects)."""
    objective = rl.objective
    settings: dict[str, object] = {
        "algorithm.adv_estimator": ESTIMATORS[rl.algorithm],
        "algorithm.norm_adv_by_std_in_grpo": rl.scale_advantages == "group",
        "algorithm.use_kl_in_reward": False,  # GRPO's KL is a loss term, not a reward
        f"{ACTOR}.clip_ratio": objective.epsilon,
        f"{ACTOR}.clip_ratio_low": objective.epsilon,
        f"{ACTOR}.clip_ratio_high": objective.upper,
        f"{ACTOR}.loss_agg_mode": objective.loss_aggregation,
        f"{ACTOR}.use_kl_loss": rl.kl_coef > 0,
        f"{ACTOR}.kl_loss_coef": rl.kl_coef,
        f"{ACTOR}.kl_loss_type": KL_LOSS_TYPES[objective.kl_estimator],
        f"{MODEL}.lora_rank": rl.lora.rank,
    }
    if objective.loss_aggregation == "seq-mean-token-sum-norm":
        # Dr. GRPO's constant: verl's default is the batch's padded response width
        settings[f"{ACTOR}.loss_scale_factor"] = rl.max_response_length
    if rl.lora.enabled:
        settings[f"{MODEL}.lora_alpha"] = rl.lora.alpha
        settings[f"{MODEL}.target_modules"] = rl.lora.target_modules
        settings[f"{MODEL}.lora.merge"] = True  # vLLM gets merged weights, as in the trl backend
    return settings
