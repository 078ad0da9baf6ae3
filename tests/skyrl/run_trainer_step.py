"""Runs one SkyRL training step up to the model update, and one evaluation, through SkyRL's own
code in its environment, on a CPU: the config composed by SkyRL's Hydra and checked by its
validate_cfg; sweflow's SweflowExperiment (SkyRL's BasePPOExp: its tokenizer and PromptDataset
over sweflow's parquet) with SkyRL's remote vLLM engine and InferenceEngineClient, sweflow's
generator and tracker, and SkyRL's RayPPOTrainer (its dataloader); then what the trainer's step
does before the update: prepare_generator_input, ``generate``, ``postprocess_generator_output``
(rewards), ``convert_to_training_input`` and ``compute_advantages_and_returns``; then its
``eval`` over the validation parquet, and the tracker's log of the step. The episodes run in
real sandboxes, graded by the real grader; the engine is a real vLLM server. What needs GPUs
(``build_models``: the FSDP policy and reference workers, the weight sync, the update) is not
run, nor what reads those workers: ``pad_batch`` (to a multiple of their data-parallel size,
here 1: nothing to pad) and ``fwd_logprobs_values_reward`` (the critic's values: GRPO has none).

Usage: python tests/skyrl/run_trainer_step.py SETTINGS_JSON ENGINE_URL; prints one JSON object.
SETTINGS_JSON holds the overrides sweflow's launch command passes; ENGINE_URL is host:port.
"""

import asyncio
import json
import sys
from pathlib import Path

from skyrl_train.entrypoints.main_base import create_remote_inference_engines_from_config
from skyrl_train.generators.utils import prepare_generator_input
from skyrl_train.inference_engines.inference_engine_client import InferenceEngineClient
from skyrl_train.inference_engines.utils import get_sampling_params_for_backend

from sweflow.training.rl.skyrl_generator import SweflowExperiment, compose


def main(settings: list[str], engine: str) -> dict:
    config = compose(
        [
            *settings,
            "generator.run_engines_locally=false",  # SkyRL's remote engine: the vLLM server
            f"generator.remote_inference_engine_urls=[{engine}]",
            "trainer.placement.colocate_all=false",  # no GPU placement group on a CPU
        ]
    )
    experiment = SweflowExperiment(config)
    tokenizer = experiment.tokenizer
    engines = create_remote_inference_engines_from_config(config, tokenizer)
    client = InferenceEngineClient(engines, tokenizer, config)
    generator = experiment.get_generator(config, tokenizer, client)
    trainer = experiment.get_trainer(
        config,
        experiment.get_tracker(),
        tokenizer,
        experiment.train_dataset,
        experiment.eval_dataset,
        client,
        generator,
        experiment.colocate_pg,
    )
    trainer.global_step = 1
    prompts = next(iter(trainer.train_dataloader))
    sampling = get_sampling_params_for_backend(
        config.generator.backend, config.generator.sampling_params
    )
    generator_input, uids = prepare_generator_input(
        prompts,
        config.generator.n_samples_per_prompt,
        sampling,
        config.environment.env_class,
        "train",
        trainer.global_step,
    )
    output = asyncio.run(trainer.generate(generator_input))
    rewards = list(output["rewards"])  # the generator's, one per episode
    output = trainer.postprocess_generator_output(output, uids)  # SkyRL's: one per token
    # pad_batch pads to a multiple of the GPU policy workers' data-parallel size, read from the
    # workers build_models makes; with none here that size is 1, where it pads nothing
    trainer.pad_batch = lambda batch: batch
    training = trainer.convert_to_training_input(output, uids)
    training["values"] = None  # fwd_logprobs_values_reward's, from the critic: GRPO has none
    training = trainer.compute_advantages_and_returns(training)
    evaluation = asyncio.run(trainer.eval())
    trainer.tracker.log({**trainer.all_metrics, **evaluation}, step=1, commit=True)
    trained = list(zip(training["advantages"], training["loss_mask"], strict=True))
    return {
        "instance_ids": [row["instance_id"] for row in generator_input["env_extras"]],
        "uids": uids,
        "rewards": rewards,
        "token_reward_sums": [sum(r) for r in output["rewards"]],
        "prompt_tokens": [len(ids) for ids in output["prompt_token_ids"]],
        "response_tokens": [len(ids) for ids in output["response_ids"]],
        "trained_tokens": [sum(mask) for mask in output["loss_masks"]],
        "stop_reasons": output["stop_reasons"],
        "sequences_shape": list(training["sequences"].shape),
        "advantage_per_episode": [float(a[m.bool()][0]) if m.any() else 0.0 for a, m in trained],
        "first_prompt": tokenizer.decode(output["prompt_token_ids"][0]),
        "metrics": {k: v for k, v in trainer.all_metrics.items() if isinstance(v, int | float)},
        "evaluation": {k: v for k, v in evaluation.items() if isinstance(v, int | float)},
    }


if __name__ == "__main__":
    settings = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps(main(settings, sys.argv[2])))
