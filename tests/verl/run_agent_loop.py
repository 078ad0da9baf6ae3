"""Runs one rollout step of sweflow's verl agent loop through verl's own code, in verl's
environment, on a CPU: the composed config; verl's RLHFDataset over sweflow's parquet and its
collate_fn; the trainer's batch preparation (uids, ``_get_gen_batch``, repeat by rollout.n);
verl's AgentLoopManager on a local Ray, whose AgentLoopWorker actors instantiate SweflowAgentLoop
from the agent-loop YAML, run the episodes, and pad and collate what they return; then what the
trainer does with it: the union with the batch, ``extract_reward`` (rm_scores and the
reward_extra_info keys) and the advantages. The LLM client is sweflow's CompletionsServer over a
real vLLM server (verl's own servers need a GPU).

Usage: python tests/verl/run_agent_loop.py VERL_DIR BASE_URL MODEL_NAME; prints one JSON object.
"""

import json
import sys
import uuid
from pathlib import Path

import numpy as np
import ray
from omegaconf import OmegaConf
from torch.utils.data import DataLoader
from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import AgentLoopManager
from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, compute_advantage
from verl.trainer.ppo.reward import extract_reward
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

from sweflow.training.rl.verl_loop import CompletionsServer


def main(folder: Path, url: str, name: str) -> dict:
    config = OmegaConf.load(folder / "verl_config.yaml")
    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    dataset = RLHFDataset(str(folder / "train.parquet"), tokenizer, config.data)
    loader = DataLoader(dataset, batch_size=config.data.train_batch_size, collate_fn=collate_fn)
    batch = DataProto.from_single_dict(next(iter(loader)))
    batch.non_tensor_batch["uid"] = np.array(
        [str(uuid.uuid4()) for _ in range(len(batch))], dtype=object
    )
    gen_batch = RayPPOTrainer._get_gen_batch(None, batch)  # the trainer's own, self unused
    n = config.actor_rollout_ref.rollout.n
    gen_batch = gen_batch.repeat(repeat_times=n, interleave=True)

    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    try:
        manager = AgentLoopManager.create(config, llm_client=CompletionsServer(url, name))
        output = manager.generate_sequences(gen_batch)
    finally:
        ray.shutdown()
    batch = batch.repeat(repeat_times=n, interleave=True).union(output)
    rewards, extra = extract_reward(batch)
    batch.batch["token_level_scores"] = batch.batch["token_level_rewards"] = rewards
    batch = compute_advantage(
        batch, adv_estimator=config.algorithm.adv_estimator, num_repeat=n, config=config.algorithm
    )
    mask = batch.batch["response_mask"]
    prompt = batch.batch["prompts"][0]
    width = len(prompt)
    lengths = batch.batch["attention_mask"][:, width:].sum(-1)
    return {
        "workers": len(manager.agent_loop_workers),
        "prompts_shape": list(batch.batch["prompts"].shape),
        "responses_shape": list(batch.batch["responses"].shape),
        "prompt_tokens": batch.batch["attention_mask"][:, :width].sum(-1).tolist(),
        "response_tokens": lengths.tolist(),
        "trained_tokens": mask.sum(-1).tolist(),
        "logprobs_off_mask": batch.batch["rollout_log_probs"][mask == 0].abs().sum().item(),
        "score": rewards.sum(-1).tolist(),
        "score_at_last_token": [
            row[int(n) - 1].item() for row, n in zip(rewards, lengths, strict=True)
        ],
        "advantages": (batch.batch["advantages"] * mask)
        .sum(-1)
        .div(mask.sum(-1).clamp(min=1))
        .tolist(),
        "uids": batch.non_tensor_batch["uid"].tolist(),
        "reward_extra_keys": sorted(extra),
        "reward_extra_info": {key: np.asarray(values).tolist() for key, values in extra.items()},
        "first_prompt": tokenizer.decode(prompt[batch.batch["attention_mask"][0, :width].bool()]),
    }


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])))
