"""On-policy RL with sandboxed rewards: the policy acts as the sweflow agent, "the tests pass" is
the reward, and the policy is updated on its own rollouts.

``train_rl`` runs the ``trl`` backend in this process (sweflow.training.rl.trl_backend); the
``verl`` backend is launched by sweflow.training.rl.verl_backend. Either way the result is a
Hugging Face folder published whole (what the ``infer`` stage serves next), with per-step
figures (mean reward, resolve rate, valid-action rate, episode length, infrastructure
failures, and the time split between generation, sandbox + reward, and the update) in
``metrics.jsonl``, TensorBoard and a PNG. Checkpoints every ``checkpoint_every`` steps; a
killed run resumes from the last one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweflow.agent.config import AgentConfig
from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.envcache.specs import load_specs
from sweflow.envcache.store import LayerStore
from sweflow.errors import SweflowError
from sweflow.grading import Grader
from sweflow.instances import Instance
from sweflow.training.chat import ChatEncoder
from sweflow.training.output import RECORD, model_card, publish
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.episode import EpisodeEnv
from sweflow.training.rl.trl_backend import (
    StepRecord,
    env_reward,
    grpo_arguments,
    make_rollout,
    trl_tensorboard,
)
from sweflow.training.workdir import folder_digest, last_attempt, record_attempt, work_lock

if TYPE_CHECKING:
    from sweflow.cluster.executor import Executor

StepProgress = Callable[[int, int, StepRecord], None]


class RLError(SweflowError):
    """RL cannot run as configured; the message names what to change."""


@dataclass
class RLResult:
    model: str
    base_model: str
    backend: str
    inputs_digest: str
    tasks: int
    steps: int = 0
    records: list[dict] = field(default_factory=list)
    infra_failures: int = 0
    train_seconds: float = 0.0
    curves: str | None = None
    tensorboard: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def quarter_rewards(self) -> tuple[float | None, float | None]:
        """Mean reward over the first and the last quarter of the steps."""
        rewards = [r["mean_reward"] for r in self.records if r["mean_reward"] is not None]
        if not rewards:
            return None, None
        q = max(1, len(rewards) // 4)
        return sum(rewards[:q]) / q, sum(rewards[-q:]) / q


def train_rl(
    tasks: list[Instance],
    policy: Path,
    work: Path,
    out: Path,
    rl: RLConfig,
    env: EpisodeEnv,
    *,
    policy_name: str | None = None,
    progress: StepProgress | None = None,
) -> RLResult:
    """Train ``policy`` on episodes of ``tasks`` into ``out`` (``work`` keeps the rest)."""
    if not tasks:
        raise RLError("no train task has a built environment: nothing to roll out")
    if rl.backend != "trl":
        raise RLError(f"train_rl runs the trl backend, not {rl.backend} (see train())")
    inputs = hashlib.sha256(json.dumps([
        sorted(t.instance_id for t in tasks), folder_digest(policy), rl.model_dump(),
        env.agent.model_dump(), env.backend,
    ]).encode()).hexdigest()  # fmt: skip
    with work_lock(work):
        if (done := _published(out, inputs)) is not None:
            return done
        return _train(tasks, policy, work, out, rl, env, inputs, policy_name, progress)


def train(
    tasks: list[Instance],
    policy: Path,
    work: Path,
    out: Path,
    rl: RLConfig,
    *,
    store: Path,
    specs: Path,
    agent: AgentConfig,
    backend: str = "local",
    policy_name: str | None = None,
    progress: StepProgress | None = None,
    executor: Executor | None = None,
) -> RLResult:
    """RL with ``rl.backend``, episodes in sandboxes of ``store`` (built instances) on the
    sandbox ``backend``, graded with ``specs``: the CLI's and the pipeline's entry point. On a
    Ray ``executor`` the trl backend's episodes open their sandboxes, and are graded, on the
    cluster's nodes (the policy generates here)."""
    if rl.backend == "verl":
        from sweflow.training.rl.verl_backend import train_rl_verl

        record = train_rl_verl(tasks, policy, work, out, rl, store=store, specs=specs,
                               agent=agent, backend=backend, policy_name=policy_name)  # fmt: skip
        return RLResult(model=record["model"], base_model=record["base_model"], backend="verl",
                        inputs_digest="", tasks=len(tasks), steps=rl.steps,
                        tensorboard=record["tensorboard"])  # fmt: skip
    grader = Grader(store, load_specs(specs), backend=backend)
    if executor is not None and executor.name == "ray":
        env = cluster_env(executor, grader, agent, backend)
    else:
        layers = LayerStore(store)
        env = EpisodeEnv(
            spec_for=lambda row: instance_sandbox_spec(layers, row.instance_id),
            grade=grader.areward,
            agent=agent,
            backend=backend,
        )
    return train_rl(tasks, policy, work, out, rl, env, policy_name=policy_name,
                    progress=progress)  # fmt: skip


def cluster_env(executor: Executor, grader: Grader, agent: AgentConfig, backend: str) -> EpisodeEnv:
    """Episodes whose sandboxes and gradings run on the nodes of a Ray executor."""
    from sweflow.cluster.remote_sandbox import RemoteSandbox, grade_remotely

    return EpisodeEnv(
        spec_for=None,
        grade=lambda row, patch: grade_remotely(executor, grader, row, patch),  # type: ignore[arg-type]
        agent=agent,
        backend=backend,
        opener=lambda row: RemoteSandbox(executor, row.instance_id, backend),  # type: ignore[arg-type]
    )


def _train(tasks, policy, work, out, rl, env, inputs, policy_name, progress) -> RLResult:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOTrainer

    cpu = not torch.cuda.is_available()
    checkpoints = work / "checkpoints"
    resume = _prepare(checkpoints, work, inputs)
    tokenizer = AutoTokenizer.from_pretrained(str(policy))
    encoder = ChatEncoder(policy)
    model = AutoModelForCausalLM.from_pretrained(
        str(policy), dtype=torch.float32 if cpu else torch.bfloat16
    )
    records: list[StepRecord] = []
    rollout = make_rollout({t.instance_id: t for t in tasks}, env, encoder, rl,
                           work / "rollouts", records)  # fmt: skip
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[env_reward],
        args=grpo_arguments(rl, checkpoints, cpu),
        train_dataset=Dataset.from_list([{"prompt": t.instance_id} for t in tasks]),
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
        trainer.train(resume_from_checkpoint=True if resume else None)
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
        model=str(out), base_model=policy_name or str(policy), backend="trl",
        inputs_digest=inputs, tasks=len(tasks), steps=trainer.state.global_step,
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
    publish(final, policy, out, "fp32" if cpu else "bf16", result.to_dict(), _card(result, rl))
    shutil.rmtree(final, ignore_errors=True)
    return result


def _prepare(checkpoints: Path, work: Path, inputs: str) -> bool:
    """Resume when an earlier attempt with the same inputs left a checkpoint, else start over."""
    resume = last_attempt(work) == inputs and any(checkpoints.glob("checkpoint-*"))
    if not resume:
        for stale in (checkpoints, work / "tensorboard", work / "rollouts"):
            shutil.rmtree(stale, ignore_errors=True)
        (work / "metrics.jsonl").unlink(missing_ok=True)
    record_attempt(work, inputs)
    return resume


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


def read_records(path: Path) -> list[dict]:
    """The per-step records, a step run again after a resume counted once (its last run)."""
    if not path.is_file():
        return []
    by_step: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip().endswith("}"):
            record = json.loads(line)
            by_step[record["step"]] = record
    return [by_step[step] for step in sorted(by_step)]


def plot_curves(records: list[dict], path: Path) -> Path | None:
    """rl.png: reward and resolve rate, valid actions, episode length, the time split."""
    if not records:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in records]
    fig, axes = plt.subplots(2, 2, figsize=(10, 6), dpi=110)
    reward = [r["mean_reward"] if r["mean_reward"] is not None else float("nan") for r in records]
    axes[0][0].plot(steps, reward, "o-", label="mean reward")
    axes[0][0].plot(steps, [r["resolve_rate"] for r in records], "s--", label="resolve rate")
    axes[0][1].plot(steps, [r["valid_action_rate"] for r in records], "o-", color="tab:green")
    axes[1][0].plot(steps, [r["episode_turns"] for r in records], "o-", color="tab:purple")
    bottom = [0.0] * len(records)
    for key, color in (("generation_s", "tab:blue"), ("env_s", "tab:orange"),
                       ("update_s", "tab:red")):  # fmt: skip
        values = [r[key] for r in records]
        axes[1][1].bar(steps, values, bottom=bottom, color=color, label=key[:-2])
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    titles = ("reward", "valid-action rate", "turns per episode", "seconds per step")
    for ax, title in zip(axes.flat, titles, strict=True):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].legend()
    axes[1][1].legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


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


def _published(out: Path, inputs: str) -> RLResult | None:
    try:
        record = json.loads((out / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return RLResult(**record) if record.get("inputs_digest") == inputs else None
