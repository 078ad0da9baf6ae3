"""SkyRL's settings as sweflow writes them (keys of skyrl-train 0.3.1's ``ppo_base_config``,
read from its skyrl_train/config/ppo_base_config.yaml, utils/utils.py validate_cfg and
utils/ppo_utils.py), and the checks of ``rl.skyrl`` that need no SkyRL installed.

sweflow sets some of SkyRL's keys from the ``rl`` section (:func:`trainer_settings`) and some for
its own machinery (the generator, its logs, its resume); :data:`OWNED` says which field sets each
one, so an override of one is refused naming that field. Any other key is the user's, in Hydra's
override syntax; SkyRL's own Hydra and validate_cfg judge them when the config is composed,
before training starts (sweflow.training.rl.skyrl_generator ``compose``; ``--dry-run`` too).

Two knobs have no SkyRL key, because sweflow's generator returns each episode's reward and loss
mask itself: DAPO's overlong punishment is in the episode's reward and overlong and compact
filtering in its mask, as in the other backends. SkyRL's Dr. GRPO constant
(``seq_mean_token_sum_norm``) is its ``max_seq_len``, which validate_cfg sets to
``generator.max_input_length + sampling_params.max_generate_length``, here
``rl.max_prompt_length + rl.max_response_length + rl.max_tokens_per_turn``: a constant, as the
paper asks, but not sweflow's ``rl.max_response_length``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sweflow.training.rl.verl_schema import parse

if TYPE_CHECKING:
    from sweflow.training.rl.config import RLConfig

ESTIMATORS = {"grpo": "grpo", "rloo": "rloo", "ppo": "gae"}  # rl.algorithm -> SkyRL's
LOSS_REDUCTIONS = {  # rl.objective.loss_aggregation -> trainer.algorithm.loss_reduction
    "token-mean": "token_mean",
    "seq-mean-token-mean": "sequence_mean",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
}
ALGORITHM = "trainer.algorithm"
PLACEMENT = "trainer.placement"
_VALIDATION = "rl.validation (tasks, every, samples, temperature, before_train)"
_GPUS = "rl.skyrl (gpus_per_node, nodes)"
_MACHINERY = {
    "data.train_data": "the train tasks' parquet sweflow writes",
    "environment.env_class": "sweflow's generator runs the episodes",
    "generator.batched": "each episode is a conversation of its own",
    "generator.max_input_length": "the episode's whole context",
    "generator.max_turns": "the agent's max_steps",
    "trainer.epochs": "one pass over the steps' rows sweflow writes",
    "trainer.ckpt_path": "checkpoints go to the run folder, where resume finds them",
    "trainer.export_path": "the trained model is exported to the run folder",
    "trainer.hf_save_interval": "the trained model is exported once, at the end",
    "trainer.resume_mode": "sweflow resumes a run whose inputs are unchanged",
    "trainer.logger": "sweflow's file logger is where it reads SkyRL's per-step metrics",
    "sweflow": "the rollout context and the metrics file",
}
OWNED: dict[str, str] = {  # SkyRL key -> what sets it instead of an override
    f"{ALGORITHM}.advantage_estimator": "rl.algorithm",
    f"{ALGORITHM}.grpo_norm_by_std": "rl.scale_advantages",
    f"{ALGORITHM}.use_kl_in_reward": "rl.kl_coef (GRPO's KL is a loss term)",
    f"{ALGORITHM}.use_kl_loss": "rl.kl_coef",
    f"{ALGORITHM}.kl_loss_coef": "rl.kl_coef",
    f"{ALGORITHM}.kl_estimator_type": "rl.objective.kl_estimator",
    f"{ALGORITHM}.eps_clip_low": "rl.objective.epsilon",
    f"{ALGORITHM}.eps_clip_high": "rl.objective.epsilon_high",
    f"{ALGORITHM}.loss_reduction": "rl.objective.loss_aggregation",
    "trainer.policy.model.path": "rl.model",
    "trainer.policy.model.lora.rank": "rl.lora.rank",
    "trainer.policy.model.lora.alpha": "rl.lora.alpha",
    "trainer.policy.model.lora.target_modules": "rl.lora.target_modules",
    "trainer.policy.optimizer_config.lr": "rl.learning_rate",
    "trainer.critic.model.path": "rl.algorithm (ppo's critic starts from the policy)",
    "trainer.train_batch_size": "rl.tasks_per_step",
    "trainer.policy_mini_batch_size": "rl.tasks_per_step",
    "trainer.max_prompt_length": "rl.max_prompt_length",
    "trainer.seed": "rl.seed",
    "trainer.ckpt_interval": "rl.checkpoint_every",
    "generator.n_samples_per_prompt": "rl.rollouts_per_task",
    "generator.sampling_params.temperature": "rl.temperature",
    "generator.sampling_params.max_generate_length": "rl.max_tokens_per_turn",
    "generator.num_inference_engines": "rl.skyrl.inference_engines",
    "generator.inference_engine_tensor_parallel_size": "rl.skyrl.tensor_parallel_size",
    f"{PLACEMENT}.policy_num_gpus_per_node": _GPUS,
    f"{PLACEMENT}.policy_num_nodes": _GPUS,
    f"{PLACEMENT}.ref_num_gpus_per_node": _GPUS,
    f"{PLACEMENT}.ref_num_nodes": _GPUS,
    f"{PLACEMENT}.critic_num_gpus_per_node": _GPUS,
    f"{PLACEMENT}.critic_num_nodes": _GPUS,
    "data.val_data": _VALIDATION,
    "trainer.eval_interval": _VALIDATION,
    "trainer.eval_before_train": _VALIDATION,
    "generator.eval_n_samples_per_prompt": _VALIDATION,
    "generator.eval_sampling_params.temperature": _VALIDATION,
    **{key: f"sweflow: {why}" for key, why in _MACHINERY.items()},
}


def trainer_settings(rl: RLConfig) -> dict[str, Any]:
    """The keys of SkyRL's config that the ``rl`` section sets (paths, loggers and the
    generator's files are added where they are written: sweflow.training.rl.skyrl_backend)."""
    objective, cluster = rl.objective, rl.skyrl
    settings: dict[str, Any] = {
        f"{ALGORITHM}.advantage_estimator": ESTIMATORS[rl.algorithm],
        f"{ALGORITHM}.grpo_norm_by_std": rl.scale_advantages == "group",
        f"{ALGORITHM}.use_kl_in_reward": False,
        f"{ALGORITHM}.use_kl_loss": rl.kl_coef > 0,
        f"{ALGORITHM}.kl_loss_coef": rl.kl_coef,
        f"{ALGORITHM}.kl_estimator_type": objective.kl_estimator,
        f"{ALGORITHM}.eps_clip_low": objective.epsilon,
        f"{ALGORITHM}.eps_clip_high": objective.upper,
        f"{ALGORITHM}.loss_reduction": LOSS_REDUCTIONS.get(objective.loss_aggregation),
        "trainer.policy.model.lora.rank": rl.lora.rank,
        "trainer.policy.optimizer_config.lr": rl.learning_rate,
        "trainer.train_batch_size": rl.tasks_per_step,
        "trainer.policy_mini_batch_size": rl.tasks_per_step,
        "trainer.critic_mini_batch_size": rl.tasks_per_step,
        "trainer.micro_train_batch_size_per_gpu": 1,
        "trainer.micro_forward_batch_size_per_gpu": 1,
        "trainer.max_prompt_length": rl.max_prompt_length,
        "trainer.seed": rl.seed,
        "trainer.epochs": 1,
        "trainer.ckpt_interval": rl.checkpoint_every,
        "trainer.resume_mode": "latest",
        "trainer.eval_interval": -1,
        "trainer.eval_before_train": False,
        "generator.n_samples_per_prompt": rl.rollouts_per_task,
        "generator.batched": False,
        "generator.max_input_length": rl.max_prompt_length + rl.max_response_length,
        "generator.sampling_params.temperature": rl.temperature,
        "generator.sampling_params.max_generate_length": rl.max_tokens_per_turn,
        "generator.num_inference_engines": cluster.inference_engines,
        "generator.inference_engine_tensor_parallel_size": cluster.tensor_parallel_size,
        "environment.env_class": "sweflow",
    }
    for role in ("policy", "ref", "critic"):
        settings[f"{PLACEMENT}.{role}_num_gpus_per_node"] = cluster.gpus_per_node
        settings[f"{PLACEMENT}.{role}_num_nodes"] = cluster.nodes
    if rl.lora.enabled:
        settings["trainer.policy.model.lora.alpha"] = rl.lora.alpha
        targets = rl.lora.target_modules
        settings["trainer.policy.model.lora.target_modules"] = (
            targets if isinstance(targets, str) else ",".join(targets)
        )
    if (val := rl.validation) is not None:
        settings |= {
            "trainer.eval_interval": val.every,
            "trainer.eval_before_train": val.before_train,
            "generator.eval_n_samples_per_prompt": val.samples,
            "generator.eval_sampling_params.temperature": val.temperature,
        }
    return settings


def check_skyrl(rl: RLConfig) -> None:
    """What can be judged without SkyRL: the overrides' form and ownership, a loss aggregation
    SkyRL lacks, and the GPUs its colocated placement needs. Raises ValueError, one line."""
    for text in rl.skyrl.overrides:
        override = parse(text, "rl.skyrl.overrides")
        owner = OWNED.get(override.key) or OWNED.get(override.key.split(".")[0])
        if owner is not None:
            raise ValueError(f"rl.skyrl.overrides {text!r}: {override.key} is set by {owner}")
    if rl.backend != "skyrl":
        return
    if rl.objective.loss_aggregation not in LOSS_REDUCTIONS:
        raise ValueError(
            f"rl.objective.loss_aggregation {rl.objective.loss_aggregation} has no SkyRL "
            f"equivalent: SkyRL 0.3.1 reduces the loss by {', '.join(LOSS_REDUCTIONS)}"
        )
    cluster = rl.skyrl
    gpus = cluster.gpus_per_node * cluster.nodes
    engines = cluster.inference_engines * cluster.tensor_parallel_size
    if gpus != engines:
        raise ValueError(
            f"rl.skyrl: SkyRL colocates training and generation, so its GPUs (gpus_per_node x "
            f"nodes = {gpus}) must equal inference_engines x tensor_parallel_size ({engines})"
        )
