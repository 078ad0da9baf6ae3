"""The ``trl`` RL backend: TRL's GRPOTrainer, on a CPU or one GPU, no Ray.

TRL calls :func:`make_rollout` once per step with the step's prompts (a task's instance id,
repeated once per rollout of its group); each becomes an episode of the sweflow agent whose
replies the policy generates in this process (sweflow.training.rl.episode), concurrently across
episodes, generation serialized on the model. TRL gets the episode's first prompt as
``prompt_ids``, everything after it as ``completion_ids`` with ``env_mask`` zero on the
observation tokens, and the reward through a reward function; an episode the machinery failed
has reward None, which TRL excludes from the group baseline and gives no advantage.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweflow.instances import Instance
from sweflow.training.chat import ChatEncoder
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.episode import Episode, EpisodeEnv, run_episode, save_episodes


@dataclass
class StepRecord:
    """The figures of one policy update (written to metrics.jsonl and TensorBoard)."""

    step: int
    episodes: int = 0
    infra_failures: int = 0
    mean_reward: float | None = None
    resolve_rate: float = 0.0
    valid_action_rate: float = 0.0
    episode_turns: float = 0.0
    generated_tokens: float = 0.0
    generation_s: float = 0.0
    env_s: float = 0.0
    env_s_per_rollout: float = 0.0  # sandbox, tools and grading of one episode (overlapped)
    update_s: float = 0.0
    step_s: float = 0.0
    loss: float | None = None
    extra: dict[str, float] = field(default_factory=dict)


def summarize(step: int, episodes: list[Episode], rollout_s: float, busy_s: float) -> StepRecord:
    """The step's rollout figures; generation is the model's busy time, the environment the
    rest of the rollout's wall time (sandboxes, tools, grading, on the critical path)."""
    scored = [e for e in episodes if not e.infra_failure]
    turns = sum(e.steps for e in scored)
    return StepRecord(
        step=step,
        episodes=len(episodes),
        infra_failures=len(episodes) - len(scored),
        mean_reward=sum(e.reward or 0.0 for e in scored) / len(scored) if scored else None,
        resolve_rate=sum(e.resolved for e in scored) / max(len(scored), 1),
        valid_action_rate=sum(e.valid_steps for e in scored) / max(turns, 1),
        episode_turns=turns / max(len(scored), 1),
        generated_tokens=sum(sum(e.mask) for e in scored) / max(len(scored), 1),
        generation_s=round(busy_s, 3),
        env_s=round(max(0.0, rollout_s - busy_s), 3),
        env_s_per_rollout=round(sum(e.env_s for e in scored) / max(len(scored), 1), 3),
    )


class LocalGenerator:
    """Sampling from the policy being trained, in this process (Hugging Face ``generate``).

    One generation at a time (the model is shared); ``busy_s`` accumulates the time spent."""

    def __init__(self, model: Any, tokenizer: Any, temperature: float) -> None:
        self.model, self.tokenizer, self.temperature = model, tokenizer, temperature
        self.busy_s = 0.0
        self._lock = threading.Lock()

    async def __call__(self, ids: list[int], max_new: int) -> tuple[list[int], list[float]]:
        return await asyncio.to_thread(self._generate, ids, max_new)

    def _generate(self, ids: list[int], max_new: int) -> tuple[list[int], list[float]]:
        import torch

        with self._lock:
            began = time.perf_counter()
            was_training = self.model.training
            self.model.eval()
            try:
                with torch.no_grad():
                    out = self.model.generate(
                        torch.tensor([ids], device=self.model.device),
                        max_new_tokens=max_new,
                        do_sample=True,
                        temperature=self.temperature,
                        top_k=0,
                        top_p=1.0,
                        eos_token_id=self.tokenizer.eos_token_id,
                        pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                        output_logits=True,
                        return_dict_in_generate=True,
                    )
            finally:
                self.model.train(was_training)
            new = out.sequences[0, len(ids) :].tolist()
            logits = torch.stack(out.logits)[:, 0, :].float() / self.temperature
            picked = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(new)[:, None])
            self.busy_s += time.perf_counter() - began
            return new, picked[:, 0].tolist()


def make_rollout(
    tasks: dict[str, Instance],
    env: EpisodeEnv,
    encoder: ChatEncoder,
    rl: RLConfig,
    rollouts_dir: Path,
    records: list[StepRecord],
) -> Callable[[list[str], Any], dict[str, Any]]:
    """TRL's ``rollout_func``: episodes for a step's prompts (instance ids, already repeated
    once per rollout), and the step's rollout figures appended to ``records``."""

    def rollout(prompts: list[str], trainer: Any) -> dict[str, Any]:
        generator = LocalGenerator(trainer.model, encoder.tokenizer, rl.temperature)
        began = time.perf_counter()

        async def all_episodes() -> list[Episode]:
            jobs = [run_episode(tasks[p], env, encoder, generator, rl) for p in prompts]
            return list(await asyncio.gather(*jobs))

        episodes = asyncio.run(all_episodes())
        step = trainer.state.global_step + 1
        records.append(summarize(step, episodes, time.perf_counter() - began, generator.busy_s))
        save_episodes(episodes, rollouts_dir / f"step-{step:04d}")
        eos = encoder.tokenizer.eos_token_id  # stands in for an episode that failed at once
        return {
            "prompt_ids": [e.prompt_ids or [eos] for e in episodes],
            "completion_ids": [e.response_ids or [eos] for e in episodes],
            "logprobs": [e.logprobs or [0.0] for e in episodes],
            "env_mask": [e.mask or [0] for e in episodes],
            "env_reward": [e.reward for e in episodes],
        }

    return rollout


def env_reward(completions: list[Any], env_reward: list[float | None], **_: Any) -> list:
    """The reward function TRL calls: the episodes' own rewards (None: dropped)."""
    return list(env_reward)


def grpo_arguments(rl: RLConfig, checkpoints: Path, cpu: bool) -> Any:
    from trl import GRPOConfig

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    return GRPOConfig(
        output_dir=str(checkpoints),
        # one episode per forward/backward (the logits of a long episode are large on a CPU),
        # accumulated over the step's episodes: one rollout call and one update per step
        per_device_train_batch_size=1,
        gradient_accumulation_steps=rl.episodes_per_step,
        steps_per_generation=rl.episodes_per_step,
        num_generations=rl.rollouts_per_task,
        max_steps=rl.steps,
        learning_rate=rl.learning_rate,
        lr_scheduler_type="constant",
        beta=rl.kl_coef,
        temperature=rl.temperature,
        max_completion_length=rl.max_response_length,
        use_cpu=cpu,
        bf16=False if cpu else True,
        activation_checkpointing=False,  # generation needs the KV cache
        logging_steps=1,
        save_strategy="steps",
        save_steps=rl.checkpoint_every,
        report_to=[],  # TRL's own metrics go to TensorBoard through trl_tensorboard()
        seed=rl.seed,
        remove_unused_columns=False,
    )


def trl_tensorboard(folder: Path) -> Any:
    """TRL's metrics (loss, rewards, lengths...) as TensorBoard scalars in ``folder``."""
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    return TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(folder)))
