"""The ``trl`` RL backend: TRL's GRPOTrainer, on a CPU or one GPU, no Ray.

TRL calls :func:`make_rollout` once per step with the step's prompts (a task's instance id,
repeated once per rollout of its group); each becomes an episode of the sweflow agent whose
replies the policy generates in this process (sweflow.training.rl.episode), concurrently across
episodes, generation serialized on the model. TRL gets the episode's first prompt as
``prompt_ids``, everything after it as ``completion_ids`` with ``env_mask`` zero on the
observation tokens, and the reward through a reward function; an episode the machinery failed
has reward None, which TRL excludes from the group baseline and gives no advantage, and every
token of it masked, so it counts in no loss normalisation either.

Per step, the rollout's figures and the update's time and loss go to ``metrics.jsonl``,
TensorBoard and ``rl.png``; checkpoints every ``checkpoint_every`` steps, and a killed run
resumes from the last one. The result is a Hugging Face folder published whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweflow.instances import Instance
from sweflow.sandbox.tracking import interrupted, run_interruptible
from sweflow.training.chat import ChatEncoder
from sweflow.training.output import model_card, publish
from sweflow.training.rl.backend import RLError, RLInterrupted, RLRun, StepProgress
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.episode import Episode, EpisodeEnv, run_episode, save_episodes
from sweflow.training.rl.result import (
    RLResult,
    StepRecord,
    plot_curves,
    published,
    read_records,
)
from sweflow.training.workdir import resume_point


class TRLBackend:
    """GRPO with TRL in this process, the episodes' sandboxes wherever ``run.env`` opens them."""

    def result(self, run: RLRun) -> RLResult | None:
        return published(run.out, run.inputs)

    def resume(self, run: RLRun) -> Path | None:
        checkpoints = run.work / "checkpoints"
        last = last_checkpoint(checkpoints)
        stale = [checkpoints, run.work / "tensorboard", run.work / "rollouts",
                 run.work / "metrics.jsonl"]  # fmt: skip
        return resume_point(run.work, run.inputs, last, stale)

    def train(self, run: RLRun, resume: Path | None, progress: StepProgress | None) -> RLResult:
        import torch
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.trainer_callback import PrinterCallback, ProgressCallback
        from trl import GRPOTrainer

        work, rl = run.work, run.rl
        cpu = not torch.cuda.is_available()
        tokenizer = AutoTokenizer.from_pretrained(str(run.policy))
        encoder = ChatEncoder(run.policy)
        model = AutoModelForCausalLM.from_pretrained(
            str(run.policy), dtype=torch.float32 if cpu else torch.bfloat16
        )
        records: list[StepRecord] = []
        rollout = make_rollout({t.instance_id: t for t in run.tasks}, run.env, encoder, rl,
                               work / "rollouts", records)  # fmt: skip
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[env_reward],
            args=grpo_arguments(rl, work / "checkpoints", cpu),
            train_dataset=Dataset.from_list([{"prompt": t.instance_id} for t in run.tasks]),
            processing_class=tokenizer,
            rollout_func=rollout,
            callbacks=[
                _metrics_callback(records, work, rl, progress),
                trl_tensorboard(work / "tensorboard" / "trl"),
            ],  # fmt: skip
        )
        for noisy in (PrinterCallback, ProgressCallback):  # the metrics callback reports instead
            trainer.remove_callback(noisy)
        began = time.monotonic()
        try:
            trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        except KeyboardInterrupt:
            last = last_checkpoint(work / "checkpoints")
            resumes = f"from {last.name}" if last else "from the start (no checkpoint yet)"
            raise RLInterrupted(
                f"RL stopped in step {trainer.state.global_step + 1} of {rl.steps}; "
                f"the same command resumes {resumes}"
            ) from None
        except RuntimeError as exc:
            if "out of memory" in str(exc).lower() or "allocate" in str(exc).lower():
                raise RLError(
                    f"out of memory: lower rl.max_response_length ({rl.max_response_length}), "
                    f"rl.tasks_per_step ({rl.tasks_per_step}) or rl.rollouts_per_task "
                    f"({rl.rollouts_per_task}): {exc}"
                ) from exc
            raise
        seconds = round(time.monotonic() - began, 1)
        result = RLResult(
            model=str(run.out), base_model=run.base_model, backend="trl",
            inputs_digest=run.inputs, tasks=len(run.tasks), steps=trainer.state.global_step,
            records=read_records(work / "metrics.jsonl"), train_seconds=seconds,
            tensorboard=str(work / "tensorboard"),
        )  # fmt: skip
        result.infra_failures = sum(r["infra_failures"] for r in result.records)
        final = work / "final"
        shutil.rmtree(final, ignore_errors=True)
        trainer.save_model(str(final))
        tokenizer.save_pretrained(str(final))
        plot = plot_curves(result.records, work / "rl.png")
        result.curves = str(plot) if plot else None
        publish(final, run.policy, run.out, "fp32" if cpu else "bf16", result.to_dict(),
                _card(result, rl))  # fmt: skip
        shutil.rmtree(final, ignore_errors=True)
        return result


def last_checkpoint(folder: Path) -> Path | None:
    """The newest whole checkpoint in ``folder``: one a kill cut short while it was saved (its
    trainer_state.json, written last, missing) is removed, never resumed from."""
    whole = None
    steps = (p for p in folder.glob("checkpoint-*") if p.name.split("-")[-1].isdigit())
    for path in sorted(steps, key=lambda p: int(p.name.split("-")[-1])):
        if (path / "trainer_state.json").is_file():
            whole = path
        else:
            shutil.rmtree(path, ignore_errors=True)
    return whole


def summarize(
    step: int, episodes: list[Episode], rollout_s: float, busy_s: float, group: int
) -> StepRecord:
    """The step's rollout figures; generation is the model's busy time, the environment the
    rest of the rollout's wall time (sandboxes, tools, grading, on the critical path). Episodes
    come in groups of ``group`` consecutive ones (TRL repeats each prompt that many times)."""
    scored = [e for e in episodes if not e.infra_failure]
    turns = sum(e.steps for e in scored)
    groups = [episodes[i : i + group] for i in range(0, len(episodes), group)]
    return StepRecord(
        step=step,
        episodes=len(episodes),
        infra_failures=len(episodes) - len(scored),
        refused=sum(bool(e.refused) for e in scored),
        zero_spread_groups=round(sum(map(_no_spread, groups)) / max(len(groups), 1), 3),
        mean_reward=sum(e.reward or 0.0 for e in scored) / len(scored) if scored else None,
        resolve_rate=sum(e.resolved for e in scored) / max(len(scored), 1),
        valid_action_rate=sum(e.valid_steps for e in scored) / max(turns, 1),
        episode_turns=turns / max(len(scored), 1),
        generated_tokens=sum(sum(e.mask) for e in scored) / max(len(scored), 1),
        generation_s=round(busy_s, 3),
        env_s=round(max(0.0, rollout_s - busy_s), 3),
        env_s_per_rollout=round(sum(e.env_s for e in scored) / max(len(scored), 1), 3),
    )


def trained_mask(episode: Episode) -> list[int]:
    """1 on the tokens the policy generated, 0 on the environment's; all 0 for an episode the
    machinery failed, so it trains nothing and counts in no loss normalisation."""
    return [0] * len(episode.response_ids) if episode.infra_failure else episode.mask


def _no_spread(group: list[Episode]) -> bool:
    """A group whose scored episodes all earned the same reward: GRPO learns nothing from it."""
    rewards = {e.reward for e in group if not e.infra_failure}
    return len(rewards) <= 1


def _until_interrupted() -> Any:
    """A stopping criterion of ``generate`` checked after every token: Ctrl-C cancels the
    episodes, and the reply being generated in a worker thread ends at once with them (it would
    keep the process alive until its last token)."""
    import torch
    from transformers import StoppingCriteria

    class UntilInterrupted(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full((input_ids.shape[0],), interrupted(), dtype=torch.bool)

    return UntilInterrupted()


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
                        stopping_criteria=[_until_interrupted()],
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

        episodes = run_interruptible(all_episodes())  # Ctrl-C closes the episodes' sandboxes
        step = trainer.state.global_step + 1
        records.append(summarize(step, episodes, time.perf_counter() - began, generator.busy_s,
                                 rl.rollouts_per_task))  # fmt: skip
        save_episodes(episodes, rollouts_dir / f"step-{step:04d}")
        eos = encoder.tokenizer.eos_token_id  # stands in for an episode that failed at once
        return {
            "prompt_ids": [e.prompt_ids or [eos] for e in episodes],
            "completion_ids": [e.response_ids or [eos] for e in episodes],
            "logprobs": [e.logprobs or [0.0] for e in episodes],
            # a dropped episode trains nothing and counts in no normalisation: all masked
            "env_mask": [
                ([0] * len(e.response_ids) if e.infra_failure else e.mask) or [0] for e in episodes
            ],  # fmt: skip
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


def _metrics_callback(records: list[StepRecord], work: Path, rl: RLConfig, progress):
    from torch.utils.tensorboard import SummaryWriter
    from transformers import TrainerCallback

    class Metrics(TrainerCallback):
        """Completes each step's rollout figures with the update and writes them out."""

        def __init__(self) -> None:
            self.writer = SummaryWriter(log_dir=str(work / "tensorboard" / "sweflow"))
            self.began = 0.0

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            self.began = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            if records and records[-1].step == state.global_step:
                record = records[-1]
                record.step_s = round(time.perf_counter() - self.began, 3)
                spent = record.step_s - record.generation_s - record.env_s
                record.update_s = round(max(0.0, spent), 3)

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
            """The step's loss arrives in the log that follows its end: write the step out."""
            if not logs or "loss" not in logs or not records:
                return
            record = records[-1]
            if record.step != state.global_step or record.loss is not None:
                return
            record.loss = float(logs["loss"])
            data = dataclasses.asdict(record)
            with (work / "metrics.jsonl").open("a") as fh:
                fh.write(json.dumps(data) + "\n")
            for key, value in data.items():
                if isinstance(value, int | float) and key != "step":
                    self.writer.add_scalar(f"sweflow/{key}", value, record.step)
            self.writer.flush()
            if progress is not None:
                progress(record.step, rl.steps, record)

        def on_train_end(self, args, state, control, **kwargs):  # noqa: ANN001
            self.writer.close()

    return Metrics()


def _card(result: RLResult, rl: RLConfig) -> str:
    first, last = result.quarter_rewards()
    summary = (
        f"{Path(result.base_model).name} trained with {rl.algorithm.upper()} ({result.backend}) "
        f"for {result.steps} steps on {result.tasks} SWE tasks: each rollout an episode of the "
        "sweflow agent in a fresh sandbox, rewarded 1 when the task's tests pass (graded like "
        "the SWE-bench harness), minus a format penalty of "
        f"{rl.format_error_penalty} per unparseable reply. Infrastructure failures were "
        "dropped, never trained on as 0."
    )
    metrics = {"steps": result.steps, "mean reward, first quarter": first,
               "mean reward, last quarter": last, "infrastructure failures": result.infra_failures,
               "training time (s)": result.train_seconds}  # fmt: skip
    return model_card(base=result.base_model, tags=["rl", rl.algorithm, result.backend],
                      title=f"{Path(result.base_model).name}, RL (sweflow)", summary=summary,
                      metrics=metrics)  # fmt: skip
