"""The ``trl`` RL backend: TRL's GRPOTrainer, on a CPU or one GPU, no Ray.

TRL calls :func:`make_rollout`'s function once per step; it returns the step's episodes of the
sweflow agent (sweflow.training.rl.rollouts: which tasks, generated when and by which policy
version). With ``rl.trl.rollout`` vllm the policy is served by one vLLM server for the run
(sweflow.training.rl.served) whose weights follow the trainer's; with hf it generates in this
process, one generation at a time. TRL gets the episode's first prompt as ``prompt_ids``,
everything after it as ``completion_ids`` with ``env_mask`` zero on the observation tokens, the
sampled log-probabilities, how many updates behind its policy is (``policy_lag``, for the
importance ratio of sweflow.training.rl.trl_loss) and the reward through a reward function; an
episode the machinery failed has reward None, which TRL excludes from the group baseline and
gives no advantage, and every token of it masked, so it counts in no loss normalisation either
(as is an episode that hit a limit, under ``rl.compact_filtering``). TRL's prompts only count the
step's episodes: the tasks are the schedule's, the same however the episodes generate.

Per step, the rollout's figures and the update's time and loss go to ``metrics.jsonl``, TensorBoard,
the tracking run (``rl/...``) and ``rl.png``, and so does ``rl.validation`` when due: after the
update, the trainer waits while the current policy plays the validation tasks
(sweflow.training.rl.validation). TRL's own metrics go to TensorBoard and, through its
``report_to``, to MLflow and W&B (transformers' callbacks, logging to the run this process holds
active); checkpoints every ``checkpoint_every`` steps, and a killed run
resumes from the last one. The result is a Hugging Face folder published whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweflow.training.chat import ChatEncoder
from sweflow.training.output import model_card, publish
from sweflow.training.rl.backend import OnRLStep, RLError, RLInterrupted, RLRun
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.generation import LocalGenerator
from sweflow.training.rl.lora import peft_config, save_merged
from sweflow.training.rl.result import (
    RLResult,
    RLStepRecord,
    plot_curves,
    published,
    read_records,
)
from sweflow.training.rl.rollouts import Rollouts, trained_mask
from sweflow.training.rl.served import serve_policy, weight_folders
from sweflow.training.rl.trl_loss import grpo_trainer_class, trl_loss_type
from sweflow.training.rl.validation import measure, read, write
from sweflow.training.workdir import resume_point


class TRLBackend:
    """GRPO with TRL in this process, the episodes' sandboxes wherever ``run.env`` opens them."""

    def result(self, run: RLRun) -> RLResult | None:
        return published(run.out, run.inputs)

    def resume(self, run: RLRun) -> Path | None:
        checkpoints = run.work / "checkpoints"
        last = last_checkpoint(checkpoints)
        stale = [
            checkpoints,
            run.work / "tensorboard",
            run.work / "rollouts",
            run.work / "validation",
            run.work / "metrics.jsonl",
        ]
        return resume_point(run.work, run.inputs, last, stale)

    def train(self, run: RLRun, resume: Path | None, progress: OnRLStep | None) -> RLResult:
        import torch

        with contextlib.ExitStack() as stack:
            served = None
            if run.rl.trl.rollout == "vllm":  # first: a server that cannot start fails fast
                log = run.work / "vllm.log"
                served = stack.enter_context(
                    serve_policy(run.policy, run.rl, log, gpu=torch.cuda.is_available())
                )
            trainer, tokenizer, records = _trainer(run, served, stack, progress)
            if run.tracking is not None:  # transformers' callbacks log to the active run
                stack.enter_context(run.tracking.active())
            began = time.monotonic()
            try:
                trainer.train(resume_from_checkpoint=str(resume) if resume else None)
            except KeyboardInterrupt:
                last = last_checkpoint(run.work / "checkpoints")
                resumes = f"from {last.name}" if last else "from the start (no checkpoint yet)"
                raise RLInterrupted(
                    f"RL stopped in step {trainer.state.global_step + 1} of {run.rl.steps}; "
                    f"the same command resumes {resumes}"
                ) from None
            except RuntimeError as exc:
                if "out of memory" in str(exc).lower() or "allocate" in str(exc).lower():
                    raise RLError(
                        f"out of memory: lower rl.max_response_length ({run.rl.max_response_length}"
                        f"), rl.tasks_per_step ({run.rl.tasks_per_step}) or rl.rollouts_per_task "
                        f"({run.rl.rollouts_per_task}): {exc}"
                    ) from exc
                raise
            seconds = round(time.monotonic() - began, 1)
        return _publish(run, trainer, tokenizer, seconds, cpu=not torch.cuda.is_available())


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


def _trainer(
    run: RLRun, served: Any, stack: contextlib.ExitStack, progress: OnRLStep | None
) -> tuple[Any, Any, list[RLStepRecord]]:
    """TRL's trainer for ``run``, its episodes from ``served`` (a ServedPolicy) or, when None,
    from the model it trains."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    work, rl = run.work, run.rl
    cpu = not torch.cuda.is_available()
    tokenizer = AutoTokenizer.from_pretrained(str(run.policy))
    encoder = ChatEncoder(run.policy)
    model = AutoModelForCausalLM.from_pretrained(
        str(run.policy), dtype=torch.float32 if cpu else torch.bfloat16
    )
    if served is None:
        generator, weights = LocalGenerator(model, tokenizer, rl.temperature), None
    else:
        size = sum(p.numel() * p.element_size() for p in model.parameters())
        generator, weights = served, weight_folders(work, size)
    tasks = {t.instance_id: t for t in run.tasks}
    # TRL's prompts only count a step's episodes (the schedule picks the tasks), but its sampler
    # finds no batch in fewer rows than tasks_per_step: it gets a step's worth at least
    prompts = list(tasks) * -(-rl.tasks_per_step // len(tasks))
    rollouts = Rollouts(tasks, run.env, encoder, rl, generator, work / "rollouts", weights)
    stack.callback(rollouts.close)
    records: list[RLStepRecord] = []
    ratios: list[tuple[int, float]] = []
    idle: list[int] = []
    report_to = run.tracking.report_to() if run.tracking else []
    callbacks = [_metrics_callback(records, (ratios, idle), rollouts, run, progress)]
    if run.tensorboard:
        callbacks.append(trl_tensorboard(work / "tensorboard" / "trl"))
    trainer = grpo_trainer_class()(
        model=model,
        reward_funcs=[env_reward],
        args=grpo_arguments(rl, work / "checkpoints", cpu, report_to),
        train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]),
        processing_class=tokenizer,
        rollout_func=make_rollout(rollouts, records, encoder.tokenizer.eos_token_id, rl),
        callbacks=callbacks,
        peft_config=peft_config(rl.lora) if rl.lora.enabled else None,
        rl=rl,
        ratios=ratios,
        idle=idle,
    )
    for noisy in (PrinterCallback, ProgressCallback):  # the metrics callback reports instead
        trainer.remove_callback(noisy)
    return trainer, tokenizer, records


def _publish(run: RLRun, trainer: Any, tokenizer: Any, seconds: float, cpu: bool) -> RLResult:
    """The trained policy as a Hugging Face folder in ``run.out``, with its record."""
    work, rl = run.work, run.rl
    result = RLResult(
        model=str(run.out),
        base_model=run.base_model,
        backend="trl",
        inputs_digest=run.inputs,
        tasks=len(run.tasks),
        steps=trainer.state.global_step,
        records=read_records(work / "metrics.jsonl"),
        train_seconds=seconds,
        tensorboard=str(work / "tensorboard"),
    )
    result.infra_failures = sum(r["infra_failures"] for r in result.records)
    final = work / "final"
    shutil.rmtree(final, ignore_errors=True)
    save_merged(trainer.model, final)  # a LoRA policy with its adapter folded in
    tokenizer.save_pretrained(str(final))
    result.validation = read(work / "metrics.jsonl")
    plot = plot_curves(result.records, work / "rl.png", result.validation)
    result.curves = str(plot) if plot else None
    publish(
        final, run.policy, run.out, "fp32" if cpu else "bf16", result.to_dict(), _card(result, rl)
    )
    shutil.rmtree(final, ignore_errors=True)
    return result


def make_rollout(
    rollouts: Rollouts, records: list[RLStepRecord], eos: int, rl: RLConfig
) -> Callable[[list[str], Any], dict[str, Any]]:
    """TRL's ``rollout_func``: the step's episodes (TRL's prompts, instance ids repeated once
    per rollout, only count them), and the step's rollout figures appended to ``records``."""

    def rollout(prompts: list[str], trainer: Any) -> dict[str, Any]:
        if len(prompts) != rl.episodes_per_step:
            raise RLError(f"TRL asked for {len(prompts)} episodes, not {rl.episodes_per_step}")
        batch = rollouts.take(trainer.state.global_step + 1)
        records.append(batch.record)
        episodes = batch.episodes
        return {  # an episode that failed at once has no tokens: an end-of-turn stands in
            "prompt_ids": [e.prompt_ids or [eos] for e in episodes],
            "completion_ids": [e.response_ids or [eos] for e in episodes],
            "logprobs": [e.logprobs or [0.0] for e in episodes],
            "env_mask": [trained_mask(e, rl) or [0] for e in episodes],
            "env_reward": [e.reward for e in episodes],
            "policy_lag": batch.lags,
        }

    return rollout


def env_reward(completions: list[Any], env_reward: list[float | None], **_: Any) -> list:
    """The reward function TRL calls: the episodes' own rewards (None: dropped)."""
    return list(env_reward)


def grpo_arguments(
    rl: RLConfig, checkpoints: Path, cpu: bool, report_to: list[str] | None = None
) -> Any:
    """TRL's settings for ``rl``; ``report_to``: transformers' names of the trackers its own
    metrics go to (TensorBoard is trl_tensorboard's, in the run's folder)."""
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
        # beta: TRL keeps the reference model; the KL term is sweflow's (trl_loss), as are the
        # advantages (scale_rewards only sets what TRL logs)
        beta=rl.kl_coef,
        scale_rewards=rl.scale_advantages,
        epsilon=rl.objective.epsilon,
        epsilon_high=rl.objective.upper,
        loss_type=trl_loss_type(rl.objective.loss_aggregation),
        temperature=rl.temperature,
        max_completion_length=rl.max_response_length,
        use_cpu=cpu,
        bf16=False if cpu else True,
        activation_checkpointing=False,  # generation needs the KV cache
        logging_steps=1,
        save_strategy="steps",
        save_steps=rl.checkpoint_every,
        report_to=report_to or [],
        seed=rl.seed,
        remove_unused_columns=False,
    )


def trl_tensorboard(folder: Path) -> Any:
    """TRL's metrics (loss, rewards, lengths...) as TensorBoard scalars in ``folder``."""
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    return TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(folder)))


def _metrics_callback(
    records: list[RLStepRecord],
    passes: tuple[list[tuple[int, float]], list[int]],
    rollouts: Rollouts,
    run: RLRun,
    progress: OnRLStep | None,
) -> Any:
    from torch.utils.tensorboard import SummaryWriter
    from transformers import TrainerCallback

    ratios, idle = passes  # the trainer's, per episode trained and per episode skipped
    work, rl, checking = run.work, run.rl, run.rl.validation
    tracking = run.tracking

    class Metrics(TrainerCallback):
        """Starts the rollouts, tells them of each update, completes each step's rollout
        figures with the update's and writes them out; measures rl.validation when due."""

        def __init__(self) -> None:
            folder = work / "tensorboard" / "sweflow"
            self.writer = SummaryWriter(log_dir=str(folder)) if run.tensorboard else None
            self.began = 0.0

        def validate(self, version: int) -> None:
            """The validation tasks' episodes by the policy after update ``version``."""
            began = time.perf_counter()
            episodes = rollouts.validate(version, run.val_tasks, checking)
            outcomes = [(e.instance_id, None if e.infra_failure else e.resolved) for e in episodes]
            record = measure(version, outcomes, checking.samples, time.perf_counter() - began)
            write(record, work / "metrics.jsonl", self.writer)
            if tracking is not None:  # as TensorBoard's val/pass@k, under the stage's prefix
                row = record.row()
                figures = {f"val/pass@{k}": value for k, value in row["pass_at"].items()}
                figures["val/infra_failures"] = row["infra_failures"]
                tracking.metrics("rl", figures, version)

        def on_train_begin(self, args, state, control, model=None, **kwargs):  # noqa: ANN001
            rollouts.start(state.global_step, model, rl.steps)  # after a resume's checkpoint
            measured = {row["step"] for row in read(work / "metrics.jsonl")}
            if checking and checking.before_train and state.global_step not in measured:
                self.validate(state.global_step)

        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001
            self.began = time.perf_counter()
            ratios.clear()
            idle.clear()

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            publish_s = rollouts.updated(state.global_step)
            if records and records[-1].step == state.global_step:
                record = records[-1]
                record.step_s = round(time.perf_counter() - self.began, 3)
                record.weight_sync_s = round((record.weight_sync_s or 0.0) + publish_s, 3)
                spent = record.step_s - (record.wait_s or 0.0) - publish_s
                record.update_s = round(max(0.0, spent), 3)
                record.extra.update(importance(ratios), idle_episodes=len(idle))
            if checking and checking.due(state.global_step, rl.steps):
                self.validate(state.global_step)

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
            figures = {**data, **data["extra"]}
            figures.pop("step")
            if self.writer is not None:
                for key, value in figures.items():
                    if isinstance(value, int | float):
                        self.writer.add_scalar(f"sweflow/{key}", value, record.step)
                self.writer.flush()
            if tracking is not None:
                tracking.metrics("rl", figures, record.step)
            if progress is not None:
                progress(record.step, rl.steps, record)

        def on_train_end(self, args, state, control, **kwargs):  # noqa: ANN001
            if self.writer is not None:
                self.writer.close()

    return Metrics()


def importance(ratios: list[tuple[int, float]]) -> dict[str, float]:
    """The mean importance ratio of a step's on-policy and off-policy episodes (those it had)."""
    figures = {}
    for name, keep in (("on_policy", lambda lag: lag == 0), ("off_policy", lambda lag: lag > 0)):
        values = [ratio for lag, ratio in ratios if keep(lag)]
        if values:
            figures[f"importance_ratio/{name}"] = round(sum(values) / len(values), 6)
    return figures


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
    metrics = {
        "steps": result.steps,
        "mean reward, first quarter": first,
        "mean reward, last quarter": last,
        "infrastructure failures": result.infra_failures,
        "training time (s)": result.train_seconds,
    }
    return model_card(
        base=result.base_model,
        tags=["rl", rl.algorithm, result.backend],
        title=f"{Path(result.base_model).name}, RL (sweflow)",
        summary=summary,
        metrics=metrics,
    )
