"""Runs sweflow's verl agent loop as verl's agent-loop worker does, in verl's environment:
verl's composed config, its RLHFDataset over sweflow's parquet (the row's fields become run()'s
keyword arguments), hydra's instantiate of the agent-loop YAML entry, and verl's sampling
parameters; the server manager is CompletionsServer over a real vLLM server.

Usage: python tests/verl/run_agent_loop.py VERL_DIR BASE_URL MODEL_NAME; prints one JSON line
per row of the first batch (the AgentLoopOutput's fields)."""

import asyncio
import json
import sys
from pathlib import Path

import hydra
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.utils.dataset.rl_dataset import RLHFDataset

from sweflow.training.rl.verl_loop import CompletionsServer


async def main(folder: Path, url: str, name: str) -> None:
    config = OmegaConf.load(folder / "verl_config.yaml")
    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    dataset = RLHFDataset(str(folder / "train.parquet"), tokenizer, config.data)
    entry = OmegaConf.load(config.actor_rollout_ref.rollout.agent.agent_loop_config_path)[0]
    rollout = config.actor_rollout_ref.rollout
    sampling = {
        "temperature": rollout.temperature,
        "top_p": rollout.top_p,
        "top_k": rollout.top_k,
        "repetition_penalty": 1.0,
        "logprobs": rollout.calculate_log_probs,
    }
    server = CompletionsServer(url, name)
    try:
        row = dataset[0]
        fields = {
            k: v for k, v in row.items() if k not in ("input_ids", "attention_mask", "position_ids")
        }
        for _ in range(rollout.n):
            loop = hydra.utils.instantiate(
                config=entry,
                trainer_config=DictConfigWrap(config),
                server_manager=server,
                tokenizer=tokenizer,
                processor=None,
                dataset_cls=RLHFDataset,
                data_config=DictConfigWrap(config.data),
            )
            out = await loop.run(dict(sampling), **fields)
            print(
                json.dumps(
                    out.model_dump(
                        include={
                            "prompt_ids",
                            "response_ids",
                            "response_mask",
                            "response_logprobs",
                            "reward_score",
                            "num_turns",
                            "extra_fields",
                        }
                    )
                ),
                flush=True,
            )
    finally:
        await server.aclose()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2], sys.argv[3]))
