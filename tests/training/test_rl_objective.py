"""The knobs RL papers ablate (``rl.algorithm``, ``rl.scale_advantages``, ``rl.kl_coef``,
``rl.objective``, ``rl.lora``): each one's effect on the advantages or the loss, checked on a
small batch whose result is computed by hand from the paper's definition, in sweflow's formulas
and through TRL's real trainer; where each lands among verl's real config keys; the values
refused before anything runs; and LoRA's merged weights.

The numbers by hand (groups of 4, a reward of None is an infrastructure failure):
- rewards (1, 0, 0, 1): mean 0.5, sample std sqrt(1/3); GRPO 0.5 / (0.57735 + 1e-4) = 0.86588;
  Dr. GRPO 0.5; RLOO 1 - 1/3 = 2/3 (a reward minus the mean of the other three);
- rewards (1, 0.5, 0, None): three scored, mean 0.5, std 0.5; GRPO 0.5 / 0.5001; Dr. GRPO 0.5;
  RLOO 1 - (0.5 + 0) / 2 = 0.75; the failure 0.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from sweflow.configfile import describe
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.episode import Episode, shaping
from sweflow.training.rl.formulas import (
    STD_EPS,
    aggregate,
    group_advantages,
    kl_estimate,
    overlong_punishment,
)
from sweflow.training.rl.rollouts import summarize, trained_mask
from sweflow.training.rl.verl_backend import overrides

HF = {"trl": {"rollout": "hf"}}


def test_grpo_dr_grpo_and_rloo_advantages_are_the_papers() -> None:
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.0, None]
    grpo = group_advantages(rewards, 4, "grpo", scale=True)
    g1 = 0.5 / (math.sqrt(1 / 3) + STD_EPS)
    g2 = 0.5 / (0.5 + STD_EPS)
    assert grpo == pytest.approx([g1, -g1, -g1, g1, g2, 0.0, -g2, 0.0], abs=1e-12)
    dr_grpo = group_advantages(rewards, 4, "grpo", scale=False)
    assert dr_grpo == pytest.approx([0.5, -0.5, -0.5, 0.5, 0.5, 0.0, -0.5, 0.0], abs=1e-12)
    rloo = group_advantages(rewards, 4, "rloo", scale=False)
    third = 2 / 3
    assert rloo == pytest.approx([third, -third, -third, third, 0.75, 0.0, -0.75, 0.0], abs=1e-12)
    # RLOO is GRPO's centred reward times n / (n - 1), never divided by the spread
    assert rloo[:4] == pytest.approx([a * 4 / 3 for a in dr_grpo[:4]])
    # a group without spread, or with one scored episode, teaches nothing
    assert group_advantages([0.3, 0.3, 0.3, 0.3], 4, "grpo", scale=True) == [0.0] * 4
    assert group_advantages([1.0, None], 2, "rloo", scale=False) == [0.0, 0.0]
    with pytest.raises(ValueError, match="groups of 4"):
        group_advantages([1.0, 0.0, 1.0], 4, "grpo", scale=True)


def test_kl_estimators_are_schulmans_k1_k2_k3() -> None:
    import torch

    # pi(token) = 0.5, ref(token) = 0.25: log(pi / ref) = log 2
    pi, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    log2 = math.log(2)
    assert float(kl_estimate(pi, ref, "k1")) == pytest.approx(log2)
    assert float(kl_estimate(pi, ref, "k2")) == pytest.approx(log2**2 / 2)
    assert float(kl_estimate(pi, ref, "k3")) == pytest.approx(0.5 - math.log(0.5) - 1)
    # k3 is clamped to 10 as verl's low_var_kl (its log-ratio to 20 first): e^20 - 20 - 1 -> 10
    far = kl_estimate(torch.tensor([0.0]), torch.tensor([30.0]), "k3")
    assert float(far) == 10.0
    with pytest.raises(ValueError, match="k4"):
        kl_estimate(pi, ref, "k4")


# two episodes, one micro-batch each: 2 trained tokens with loss -1 (advantage +1 at ratio 1),
# then 4 with +1 (advantage -1); 6 trained tokens in the step, horizon 8
STEP = {"episodes": 2, "step_tokens": 6, "horizon": 8}
BY_HAND = {
    "token-mean": (-2 + 4) / 6,  # DAPO: every token of the step weighs the same
    "seq-mean-token-mean": (-1 + 1) / 2,  # GRPO: every episode weighs the same
    "seq-mean-token-sum": (-2 + 4) / 2,
    "seq-mean-token-sum-norm": (-2 + 4) / 2 / 8,  # Dr. GRPO: token sums over a constant
}


@pytest.mark.parametrize("mode", list(BY_HAND))
def test_loss_aggregations_are_the_papers(mode: str) -> None:
    import torch

    first = (torch.tensor([[-1.0, -1.0, 7.0, 7.0]]), torch.tensor([[1.0, 1.0, 0.0, 0.0]]))
    second = (torch.tensor([[1.0, 1.0, 1.0, 1.0]]), torch.tensor([[1.0, 1.0, 1.0, 1.0]]))
    total = sum(float(aggregate(v, m, mode, **STEP)) for v, m in (first, second))
    assert total == pytest.approx(BY_HAND[mode])


def test_dapo_overlong_punishment_falls_linearly_over_the_buffer() -> None:
    assert overlong_punishment(80, 100, 20, 1.0) == 0.0
    assert overlong_punishment(90, 100, 20, 1.0) == -0.5
    assert overlong_punishment(100, 100, 20, 1.0) == -1.0
    assert overlong_punishment(130, 100, 20, 1.0) == -1.0  # DAPO's -1 past the limit
    assert overlong_punishment(95, 100, 20, 0.4) == pytest.approx(-0.3)
    assert overlong_punishment(10_000, 100, 0, 1.0) == 0.0  # off
    # in the episode's reward: 112 of 128 tokens, 16 into a buffer of 32
    rl = RLConfig(
        **HF, max_tokens_per_turn=64, max_response_length=128, objective={"overlong_buffer": 32}
    )
    done = Episode("t", steps=2, valid_steps=2)
    assert shaping(rl, done, "diff", response_tokens=112) == pytest.approx(0.5)
    assert shaping(rl, done, "diff", response_tokens=96) == 0.0


def test_overlong_filtering_masks_truncated_episodes_compact_filtering_every_limit() -> None:
    def ended(status: str) -> Episode:
        return Episode("t", reward=0.0, exit_status=status, response_ids=[1, 2], mask=[1, 0])

    out_of_tokens, out_of_context, out_of_turns = map(
        ended, ("token_limit", "context_limit", "step_limit")
    )
    submitted = ended("submitted")
    overlong = RLConfig(**HF, objective={"mask_truncated": True})
    compact = RLConfig(**HF, compact_filtering=True)
    for episode, masked_by_overlong, masked_by_compact in (
        (out_of_tokens, True, True),
        (out_of_context, True, True),
        (out_of_turns, False, True),
        (submitted, False, False),
    ):
        assert trained_mask(episode, overlong) == ([0, 0] if masked_by_overlong else [1, 0])
        assert trained_mask(episode, compact) == ([0, 0] if masked_by_compact else [1, 0])
    episodes = [out_of_tokens, out_of_context, out_of_turns, submitted]
    assert summarize(1, episodes, 2.0, 1.0, group=2, rl=overlong).filtered == 2
    assert summarize(1, episodes, 2.0, 1.0, group=2, rl=compact).filtered == 3


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"objective": {"epsilon": 0.2, "epsilon_high": 0.1}}, r"objective: .*epsilon_high"),
        ({"algorithm": "rloo", "rollouts_per_task": 1}, "rollouts_per_task"),
        ({"algorithm": "rloo"}, "scale_advantages: none"),
        ({"algorithm": "ppo"}, "algorithm ppo needs verl"),
        ({"objective": {"overlong_buffer": 1024}, "max_response_length": 1024}, "overlong_buffer"),
        ({"objective": {"loss_aggregation": "token-sum"}}, "objective.loss_aggregation"),
        ({"objective": {"kl_estimator": "k4"}}, "objective.kl_estimator"),
        ({"objective": {"epsilon": 1.5}}, "objective.epsilon"),
        ({"objective": {"overlong_penalty": 0}}, "objective.overlong_penalty"),
        ({"lora": {"rank": -1}}, "lora.rank"),
        ({"lora": {"target_modules": []}}, "lora.target_modules"),
    ],
)
def test_knob_values_that_cannot_work_are_refused_naming_the_field(settings, named) -> None:
    with pytest.raises(ValidationError) as caught:
        RLConfig(**HF, **settings)
    assert re.search(named, describe(caught.value)), describe(caught.value)


# a non-default combination of every knob
ABLATION = {
    "algorithm": "rloo",
    "scale_advantages": "none",
    "kl_coef": 0.01,
    "max_response_length": 768,
    "objective": {
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "loss_aggregation": "seq-mean-token-sum-norm",
        "kl_estimator": "k2",
        "mask_truncated": True,
        "overlong_buffer": 256,
        "overlong_penalty": 0.5,
    },
    "lora": {"rank": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]},
}
VERL_KEYS = {
    "algorithm.adv_estimator": "rloo",
    "algorithm.norm_adv_by_std_in_grpo": "false",
    "actor_rollout_ref.actor.clip_ratio_low": "0.2",
    "actor_rollout_ref.actor.clip_ratio_high": "0.28",
    "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum-norm",
    "actor_rollout_ref.actor.loss_scale_factor": "768",
    "actor_rollout_ref.actor.use_kl_loss": "true",
    "actor_rollout_ref.actor.kl_loss_coef": "0.01",
    "actor_rollout_ref.actor.kl_loss_type": "k2",
    "actor_rollout_ref.model.lora_rank": "8",
    "actor_rollout_ref.model.lora_alpha": "16",
    "actor_rollout_ref.model.target_modules": "[q_proj,v_proj]",
    "actor_rollout_ref.model.lora.merge": "true",
}


def _verl_settings(rl: RLConfig) -> dict[str, str]:
    paths = (Path("p"), Path("t.parquet"), Path("l.yaml"), Path("w"))
    return dict(line.split("=", 1) for line in overrides(rl, *paths))


def test_each_knob_lands_on_verls_own_key() -> None:
    rl = RLConfig(backend="verl", **ABLATION)
    settings = _verl_settings(rl)
    assert {key: settings.get(key) for key in VERL_KEYS} == VERL_KEYS
    # the defaults: GRPO, PPO's symmetric clip, DAPO's token mean, verl's low_var_kl, no LoRA
    plain = _verl_settings(RLConfig(backend="verl"))
    assert plain["algorithm.adv_estimator"] == "grpo"
    assert plain["actor_rollout_ref.actor.clip_ratio_high"] == "0.2"
    assert plain["actor_rollout_ref.actor.loss_agg_mode"] == "token-mean"
    assert plain["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl"
    assert plain["actor_rollout_ref.actor.use_kl_loss"] == "false"
    assert plain["actor_rollout_ref.model.lora_rank"] == "0"
    assert "actor_rollout_ref.actor.loss_scale_factor" not in plain
    assert not any("overlong" in key for key in settings)  # in the episode's reward instead
    k1 = RLConfig(backend="verl", kl_coef=0.1, objective={"kl_estimator": "k1"})
    assert _verl_settings(k1)["actor_rollout_ref.actor.kl_loss_type"] == "k1"


def test_verls_own_hydra_composes_the_knobs(tmp_path: Path) -> None:
    """verl's Hydra refuses a key its ppo_trainer schema lacks, and its own checks run on the
    result: every key lands where verl reads it. Needs verl's venv (scripts/setup-verl.sh)."""
    import yaml

    from sweflow.errors import ConfigError
    from sweflow.training.rl.verl_backend import compose, verl_python

    try:
        verl_python()
    except ConfigError as exc:
        pytest.skip(f"verl's environment is absent: {exc}")
    rl = RLConfig(backend="verl", **ABLATION)
    out = tmp_path / "verl_config.yaml"
    args = overrides(rl, Path("/p"), tmp_path / "t.parquet", tmp_path / "l.yaml", tmp_path)
    compose(args, out, tmp_path / "compose.log")
    config = yaml.safe_load(out.read_text())
    actor, model = config["actor_rollout_ref"]["actor"], config["actor_rollout_ref"]["model"]
    assert config["algorithm"]["adv_estimator"] == "rloo"
    assert config["algorithm"]["norm_adv_by_std_in_grpo"] is False
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"]) == (0.2, 0.28)
    assert actor["loss_agg_mode"] == "seq-mean-token-sum-norm"
    assert actor["loss_scale_factor"] == 768
    assert (actor["use_kl_loss"], actor["kl_loss_coef"], actor["kl_loss_type"]) == (
        True,
        0.01,
        "k2",
    )
    assert (model["lora_rank"], model["lora_alpha"]) == (8, 16)
    assert model["target_modules"] == ["q_proj", "v_proj"]
    assert model["lora"]["merge"] is True


def test_each_knob_reaches_trls_config(tmp_path: Path) -> None:
    from sweflow.training.rl.trl_backend import grpo_arguments

    rl = RLConfig(**HF, **ABLATION)
    args = grpo_arguments(rl, tmp_path, cpu=True)
    assert (args.epsilon, args.epsilon_high, args.beta) == (0.2, 0.28, 0.01)
    assert args.loss_type == "dr_grpo" and args.max_completion_length == 768
    expected = {
        "token-mean": "dapo",
        "seq-mean-token-mean": "grpo",
        "seq-mean-token-sum": "luspo",
        "seq-mean-token-sum-norm": "dr_grpo",
    }
    for mode, loss_type in expected.items():
        rl = RLConfig(**HF, objective={"loss_aggregation": mode})
        assert grpo_arguments(rl, tmp_path, cpu=True).loss_type == loss_type
    plain = grpo_arguments(RLConfig(**HF), tmp_path, cpu=True)
    assert (plain.epsilon, plain.epsilon_high, plain.loss_type) == (0.2, 0.2, "dapo")


# Through TRL's real trainer (sweflow's subclass of GRPOTrainer) on the two-layer SmolLM2: two
# episodes of one group, one micro-batch each (as every run trains them), completions of 2 and 4
# trained tokens padded to 4; the loss values below do not depend on the model: at ratio 1 (the
# episode's policy is the trained one) each token's policy loss is minus its advantage.
PROMPT, COMPLETION = [1, 2, 3], [4, 5, 6, 7]
SMALL = {"tasks_per_step": 1, "max_tokens_per_turn": 64, "max_response_length": 64}
LENGTHS = (2, 4)


def _trainer(policy: Path, rl: RLConfig, work: Path, rollout=None):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sweflow.training.rl.lora import peft_config
    from sweflow.training.rl.trl_backend import env_reward, grpo_arguments
    from sweflow.training.rl.trl_loss import grpo_trainer_class

    def no_rollout(prompts, trainer):
        raise AssertionError("these tests feed the loss themselves")

    trainer = grpo_trainer_class()(
        model=AutoModelForCausalLM.from_pretrained(str(policy), dtype=torch.float32),
        reward_funcs=[env_reward],
        args=grpo_arguments(rl, work, cpu=True),
        train_dataset=Dataset.from_list([{"prompt": "t"}] * rl.episodes_per_step),
        processing_class=AutoTokenizer.from_pretrained(str(policy)),
        rollout_func=rollout or no_rollout,
        peft_config=peft_config(rl.lora) if rl.lora.enabled else None,
        rl=rl,
        ratios=[],
        idle=[],
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = rl.episodes_per_step  # set by train()
    return trainer


def _knobs(**settings) -> RLConfig:
    return RLConfig(**HF, **SMALL, rollouts_per_task=2, **settings)


def _step_loss(trainer, advantages, *, sampled=None, ref_shift=None) -> float:
    """The step's loss: the sum of its two micro-batches' losses. ``sampled[i]``: episode i's
    importance ratio, its policy one update behind; ``ref_shift``: log(pi / ref) per token."""
    import torch

    total = 0.0
    for i, (length, advantage) in enumerate(zip(LENGTHS, advantages, strict=True)):
        inputs = {
            "prompt_ids": torch.tensor([PROMPT]),
            "prompt_mask": torch.ones(1, len(PROMPT), dtype=torch.long),
            "completion_ids": torch.tensor([COMPLETION]),
            "completion_mask": torch.tensor([[1] * length + [0] * (4 - length)]),
            "advantages": torch.tensor([float(advantage)]),
            "num_items_in_batch": torch.tensor(float(sum(LENGTHS))),
            "policy_lag": torch.tensor([0 if sampled is None else 1]),
        }
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        with torch.no_grad():
            logps = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, torch.ones_like(ids), 4
            )[0]
        if sampled is not None:
            inputs["sampling_per_token_logps"] = logps - math.log(sampled[i])
        if ref_shift is not None:
            inputs["ref_per_token_logps"] = logps - ref_shift
        total += float(trainer._compute_loss(trainer.model, inputs).detach())
    return total


@pytest.mark.parametrize("mode", list(BY_HAND))
def test_trls_trainer_aggregates_the_loss_as_the_paper(mode, tiny_smollm2, tmp_path) -> None:
    trainer = _trainer(tiny_smollm2, _knobs(objective={"loss_aggregation": mode}), tmp_path)
    expected = {**BY_HAND, "seq-mean-token-sum-norm": (-2 + 4) / 2 / 64}[mode]
    assert _step_loss(trainer, (1.0, -1.0)) == pytest.approx(expected, abs=1e-6)


def test_clip_higher_raises_only_the_upper_bound(tiny_smollm2, tmp_path) -> None:
    """Episode 1 (advantage +1, ratio 1.25): -min(1.25, 1 + epsilon_high) a token; episode 2
    (advantage -1, ratio 0.7): -min(-0.7, -(1 - epsilon)) = 0.8 a token; token mean over 6."""
    for high, upper in ((None, 1.2), (0.28, 1.25)):
        objective = {"epsilon": 0.2, "epsilon_high": high}
        trainer = _trainer(tiny_smollm2, _knobs(objective=objective), tmp_path / str(high))
        loss = _step_loss(trainer, (1.0, -1.0), sampled=(1.25, 0.7))
        assert loss == pytest.approx((2 * -upper + 4 * 0.8) / 6, abs=1e-5)


@pytest.mark.parametrize(
    ("estimator", "per_token"),
    [("k1", 0.5), ("k2", 0.5**2 / 2), ("k3", math.exp(-0.5) + 0.5 - 1)],
)
def test_the_kl_term_is_the_chosen_estimator_times_kl_coef(
    estimator, per_token, tiny_smollm2, tmp_path
) -> None:
    """Advantages 0, log(pi / ref) = 0.5 on every token: the loss is the KL term alone."""
    rl = _knobs(kl_coef=0.1, objective={"kl_estimator": estimator})
    trainer = _trainer(tiny_smollm2, rl, tmp_path)
    loss = _step_loss(trainer, (0.0, 0.0), ref_shift=0.5)
    assert loss == pytest.approx(0.1 * per_token, abs=1e-6)
    assert trainer._metrics["train"]["kl"] == pytest.approx([per_token] * 2, abs=1e-6)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, [0.5 / (math.sqrt(1 / 3) + STD_EPS) * s for s in (1, -1, -1, 1)]),
        ({"scale_advantages": "none"}, [0.5, -0.5, -0.5, 0.5]),
        ({"algorithm": "rloo", "scale_advantages": "none"}, [2 / 3, -2 / 3, -2 / 3, 2 / 3]),
    ],
)
def test_trls_trainer_takes_the_estimators_advantages(
    settings, expected, tiny_smollm2, tmp_path
) -> None:
    """A group of four episodes rewarded (1, 0, 0, 1) through TRL's own generation path."""
    rl = RLConfig(**HF, **SMALL, rollouts_per_task=4, **settings)

    def rollout(prompts, trainer):
        return {
            "prompt_ids": [PROMPT] * 4,
            "completion_ids": [COMPLETION] * 4,
            "logprobs": [[-1.0] * 4] * 4,
            "env_reward": [1.0, 0.0, 0.0, 1.0],
            "policy_lag": [0] * 4,
        }

    trainer = _trainer(tiny_smollm2, rl, tmp_path, rollout)
    output = trainer._generate_and_score_completions([{"prompt": "t"} for _ in range(4)])
    assert output["advantages"].tolist() == pytest.approx(expected, abs=1e-6)


def _adapted_llama(base_folder: Path | None = None):
    """A small random Llama with a LoRA adapter whose B is not zero (a trained one's); its base
    model saved to ``base_folder`` first when given."""
    import torch
    from peft import get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from sweflow.training.rl.lora import peft_config
    from sweflow.training.rl.objective import LoraSettings

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    base = LlamaForCausalLM(config)
    if base_folder is not None:
        base.save_pretrained(str(base_folder))
    model = get_peft_model(base, peft_config(LoraSettings(rank=4, alpha=8)))
    for name, parameter in model.named_parameters():
        if "lora_B" in name:
            parameter.data.normal_()
    return model


def _logits(model, ids):
    import torch

    with torch.no_grad():
        return model(ids).logits


def test_a_lora_policy_is_served_and_published_merged(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from sweflow.training.rl.served import WeightFolders

    model = _adapted_llama()
    ids = torch.tensor([[1, 5, 9, 2, 7]])
    adapted = _logits(model, ids)
    base_q = model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight.clone()
    folders = WeightFolders(tmp_path / "weights")
    folders.publish(model, 1)  # what vLLM reloads at a weight sync
    served = folders.path(1)
    assert (served / "config.json").is_file() and not (served / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(str(served), dtype=torch.float32)
    assert torch.allclose(_logits(merged, ids), adapted, atol=1e-5)
    # the trained model keeps its adapter apart: its base weights are untouched
    after = model.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight
    assert torch.equal(after, base_q)
    with model.disable_adapter():
        assert not torch.allclose(_logits(model, ids), adapted, atol=1e-3)


def test_verls_adapter_beside_the_base_weights_is_folded_in(tmp_path: Path) -> None:
    """verl's model merger writes the base weights and the adapter in lora_adapter/ (peft's
    layout): the published folder is one merged model."""
    import torch
    from transformers import AutoModelForCausalLM

    from sweflow.training.rl.lora import merge_adapter_folder

    folder = tmp_path / "model"
    model = _adapted_llama(folder)
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    adapted = _logits(model, ids)
    model.save_pretrained(str(folder / "lora_adapter"))
    assert merge_adapter_folder(folder)
    assert not (folder / "lora_adapter").exists()
    merged = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    assert torch.allclose(_logits(merged, ids), adapted, atol=1e-5)
    assert not merge_adapter_folder(folder)  # nothing left to fold


@pytest.mark.slow  # 2 GRPO steps of 4 episodes in sandboxes; test_training_rl's is the quick one
def test_a_short_rl_run_with_every_knob_off_its_default(
    rl_policy, rl_env, demo_replays, tmp_path
) -> None:
    """Two real steps on sandboxed episodes: RLOO, clip-higher, Dr. GRPO's aggregation, a k2 KL
    term, overlong filtering and punishment, a LoRA adapter; the published policy is the base
    with the adapter merged into the adapted modules only."""
    import json

    import torch

    from sweflow.training.rl.result import read_records
    from sweflow.training.rl.trainer import train

    rl = RLConfig(
        steps=2,
        tasks_per_step=2,
        rollouts_per_task=2,
        learning_rate=1e-3,
        checkpoint_every=1,
        temperature=1.5,
        max_tokens_per_turn=96,
        format_error_penalty=0.1,
        empty_patch_penalty=0.1,
        **HF,
        **ABLATION,
    )
    where = {"store": demo_replays.store, "specs": demo_replays.data.specs, "agent": rl_env.agent}
    tasks = demo_replays.data.rows[:2]
    result = train(tasks, rl_policy, tmp_path, tmp_path / "model", rl, **where)

    assert result.steps == 2
    records = read_records(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    for record in records:  # a KL term depends on every episode: none is skipped
        assert record["loss"] is not None and record["extra"]["idle_episodes"] == 0
    graded = [json.loads(p.read_text()) for p in (tmp_path / "rollouts").glob("step-*/*.json")]
    rewards = [t["reward"]["reward"] for t in graded if t["reward"]]
    assert len(rewards) == 8 and len(set(rewards)) > 1, rewards
    assert all(-0.7 <= r <= 1.0 for r in rewards)  # shaping 0.1 + 0.1, overlong at most 0.5
    # LoRA: the checkpoints hold an adapter; the result is a plain merged folder
    assert list((tmp_path / "checkpoints").glob("checkpoint-*/adapter_model.safetensors"))
    out = Path(result.model)
    assert not (out / "adapter_config.json").exists()
    before, after = _tensors(rl_policy), _tensors(out)
    assert before.keys() == after.keys()
    moved = {key for key in before if not torch.equal(before[key], after[key])}
    assert moved and all(key.endswith(("q_proj.weight", "v_proj.weight")) for key in moved), moved


def _tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    return {
        k: v for shard in sorted(folder.glob("*.safetensors")) for k, v in load_file(shard).items()
    }
