"""The ``verl`` RL backend: verl's PPO trainer on GPUs with Ray, the rollouts sweflow episodes.

Everything verl needs is written into ``<work>/verl`` before it starts: the train tasks as
verl's parquet (one row per task, the agent loop's name on each row), the rollout context
(the tasks and their specs, the layer store, agent and rl settings, the policy), the agent-loop
YAML that points verl at sweflow.training.rl.verl_loop, and the trainer overrides from the ``rl``
section, composed by verl's own Hydra config into ``verl_config.yaml`` (every key checked
against verl's schema) and saved with ``launch.sh``, the command line a user can re-run by
hand. verl is then launched with ``python -m verl.trainer.main_ppo`` on the local Ray or
``rl.ray_address``; its last checkpoint is merged into a Hugging Face folder with
``python -m verl.model_merger``.

The result is the same :class:`~sweflow.training.rl.result.RLResult` the trl backend returns:
the run's inputs digest, and one record per step read from verl's own file logger
(``trainer.logger`` ``file``, written to ``VERL_FILE_LOGGER_PATH``): reward, loss, turns and
the time split that verl measures. A killed run resumes from verl's last checkpoint when its
inputs are unchanged (verl's ``resume_mode=auto``), else starts over.

verl lives in its own environment (scripts/setup-verl.sh makes .venv-verl; SWEFLOW_VERL_PYTHON
names another interpreter): its fastapi pin clashes with Prefect's.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sweflow.agent.config import AgentConfig
from sweflow.errors import ConfigError, SweflowError
from sweflow.harness.specs import load_specs
from sweflow.instances import Instance
from sweflow.training.output import RECORD
from sweflow.training.rl.backend import RLRun, StepProgress
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.result import (
    RLResult,
    StepRecord,
    plot_curves,
    published,
    read_records,
)
from sweflow.training.workdir import resume_point

ROOT = Path(__file__).resolve().parents[3]
AGENT_NAME = "sweflow_swe"
ESTIMATORS = {"grpo": "grpo", "rloo": "rloo", "ppo": "gae"}
TRACKER = "latest_checkpointed_iteration.txt"  # verl's record of its last checkpoint
METRICS, EARLIER_METRICS = "metrics.jsonl", "metrics.earlier.jsonl"  # verl's file logger's
STEP_TIMES = {"timing_s/step", "timing_s/gen"}  # in verl's log of every training step
MAX_AGENT_WORKERS = 8  # verl's default rollout.agent.num_workers


class VerlError(SweflowError):
    """verl could not be prepared or run; the message names the step and its log."""


def verl_python() -> Path:
    """The interpreter of verl's environment."""
    named = os.environ.get("SWEFLOW_VERL_PYTHON")
    python = Path(named) if named else ROOT / ".venv-verl" / "bin" / "python"
    if not python.is_file():
        raise ConfigError(
            f"rl.backend verl needs verl's environment: {python} does not exist (run "
            "`bash scripts/setup-verl.sh`, or set SWEFLOW_VERL_PYTHON)"
        )
    return python


def write_inputs(tasks: list[Instance], folder: Path) -> Path:
    """The tasks as verl's parquet: a ``prompt`` (the task's id as a user message: verl's dataset
    wants one; the agent loop builds the real prompt), the agent loop's name and the instance
    id. (The rollouts read the tasks themselves from the rollout context.)"""
    from datasets import Dataset

    folder.mkdir(parents=True, exist_ok=True)
    records = [
        {
            "data_source": "sweflow",
            "prompt": [{"role": "user", "content": task.instance_id}],
            "agent_name": AGENT_NAME,
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"instance_id": task.instance_id, "index": i},
        }
        for i, task in enumerate(tasks)
    ]
    parquet = folder / "train.parquet"
    Dataset.from_list(records).to_parquet(str(parquet))
    return parquet


def agent_workers(rl: RLConfig) -> int:
    """verl's agent-loop workers: verl splits each step's batch (tasks times rollouts) into one
    equal chunk per worker and refuses a batch they do not divide, so the largest divisor of
    the batch up to verl's default."""
    batch = rl.tasks_per_step * rl.rollouts_per_task
    return max(n for n in range(1, MAX_AGENT_WORKERS + 1) if batch % n == 0)


def write_context(folder: Path, tasks: list[Instance], policy: Path, store: Path, specs: Path,
                  agent: AgentConfig, rl: RLConfig, backend: str) -> Path:  # fmt: skip
    """The rollout context file and the agent-loop YAML that names it; returns the YAML.

    verl's agent-loop workers run on every node and read that YAML by its path, as they read
    the policy: the run folder must be on storage every node sees. The context carries all else
    inside it (the tasks and their repositories' specs, which may live on the head node only);
    each node opens sandboxes from its own store. It also says how many agent-loop workers share
    a node (verl spreads them round-robin), so that each bounds its open sandboxes to its share
    of the node's slots."""
    context = folder / "rollout.json"
    per_node = -(-agent_workers(rl) // rl.nodes)
    context.write_text(json.dumps({
        "tasks": [task.model_dump(mode="json") for task in tasks], "policy": str(policy),
        "store": str(store), "agent": agent.model_dump(mode="json"),
        "specs": load_specs(specs).as_mapping({task.repo for task in tasks}),
        "rl": rl.model_dump(mode="json"), "backend": backend, "workers_per_node": per_node,
    }, indent=1))  # fmt: skip
    loops = folder / "agent_loops.yaml"
    loops.write_text(
        f"- name: {AGENT_NAME}\n"
        "  _target_: sweflow.training.rl.verl_loop.SweflowAgentLoop\n"
        f"  context: {json.dumps(str(context))}\n"
    )
    return loops


def overrides(rl: RLConfig, policy: Path, parquet: Path, loops: Path, work: Path) -> list[str]:
    """verl's trainer settings from the ``rl`` section (Hydra overrides of ppo_trainer)."""
    batch = rl.tasks_per_step
    settings = {
        "algorithm.adv_estimator": ESTIMATORS[rl.algorithm],
        "algorithm.use_kl_in_reward": False,
        "algorithm.norm_adv_by_std_in_grpo": rl.scale_advantages == "group",
        "data.train_files": str(parquet),
        "data.val_files": str(parquet),
        "data.train_batch_size": batch,
        "data.max_prompt_length": rl.max_prompt_length,
        "data.max_response_length": rl.max_response_length,
        "data.return_raw_chat": True,
        "data.dataloader_num_workers": 0,
        "data.seed": rl.seed,
        "actor_rollout_ref.model.path": str(policy),
        "actor_rollout_ref.actor.optim.lr": rl.learning_rate,
        "actor_rollout_ref.actor.ppo_mini_batch_size": batch,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 1,
        "actor_rollout_ref.actor.use_kl_loss": rl.kl_coef > 0,
        "actor_rollout_ref.actor.kl_loss_coef": rl.kl_coef,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 1,
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.n": rl.rollouts_per_task,
        "actor_rollout_ref.rollout.temperature": rl.temperature,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": rl.tensor_parallel_size,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 1,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(loops),
        "actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_NAME,
        "actor_rollout_ref.rollout.agent.num_workers": agent_workers(rl),
        "trainer.total_training_steps": rl.steps,
        "trainer.save_freq": rl.checkpoint_every,
        "trainer.test_freq": -1,
        "trainer.val_before_train": False,
        "trainer.resume_mode": "auto",
        "trainer.n_gpus_per_node": rl.gpus_per_node,
        "trainer.nnodes": rl.nodes,
        "trainer.default_local_dir": str(work / "checkpoints"),
        "trainer.logger": "[console,tensorboard,file]",  # file: VERL_FILE_LOGGER_PATH
        "trainer.project_name": "sweflow",
        "trainer.experiment_name": work.parent.name or "rl",
    }
    if rl.algorithm == "ppo":
        settings["critic.model.path"] = str(policy)
        settings["critic.ppo_micro_batch_size_per_gpu"] = 1
    if rl.ray_address:
        settings["+ray_kwargs.ray_init.address"] = rl.ray_address
    return [f"{key}={_value(value)}" for key, value in settings.items()]


def _value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def prepare(tasks: list[Instance], policy: Path, work: Path, rl: RLConfig, *, store: Path,
            specs: Path, agent: AgentConfig, backend: str) -> list[str]:  # fmt: skip
    """Write verl's inputs under ``work/verl`` and check the config with verl's own Hydra
    (verl_config.yaml); returns the launch command, also saved as launch.sh."""
    folder = work / "verl"
    parquet = write_inputs(tasks, folder)
    loops = write_context(folder, tasks, policy, store, specs, agent, rl, backend)
    settings = overrides(rl, policy, parquet, loops, folder)
    python = str(verl_python())
    composed = folder / "verl_config.yaml"
    compose = [python, "-m", "sweflow.training.rl.verl_loop", "compose", str(composed), *settings]
    _run(compose, folder / "compose.log", "composing its config")
    command = [python, "-m", "verl.trainer.main_ppo", *settings]
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in logging_env(work).items())
    (folder / "launch.sh").write_text(
        "#!/usr/bin/env bash\n# verl's trainer on the rollouts of sweflow episodes\n"
        f"{exports}exec {shlex.join(command)}\n"
    )
    return command


def logging_env(work: Path) -> dict[str, str]:
    """Where verl's loggers write: TensorBoard, and its file logger's per-step metrics."""
    return {"TENSORBOARD_DIR": str(work / "tensorboard"),
            "VERL_FILE_LOGGER_PATH": str(work / "verl" / METRICS)}  # fmt: skip


def launch(command: list[str], work: Path) -> Path:
    """Run verl's trainer to the end; returns its last checkpoint's actor folder."""
    metrics = work / "verl" / METRICS
    if metrics.is_file():  # an earlier launch's steps: verl's file logger truncates its file
        with (work / "verl" / EARLIER_METRICS).open("a") as kept:
            kept.write(metrics.read_text())
    _run(command, work / "verl" / "train.log", "training", env={**os.environ, **logging_env(work)})
    checkpoints = work / "verl" / "checkpoints"
    last = last_checkpoint(checkpoints)
    if last is None:
        raise VerlError(f"verl finished without a checkpoint ({checkpoints / TRACKER} is missing)")
    return last / "actor"


def last_checkpoint(checkpoints: Path) -> Path | None:
    """The checkpoint verl's tracker file names as its last, or None."""
    tracker = checkpoints / TRACKER
    return checkpoints / f"global_step_{tracker.read_text().strip()}" if tracker.is_file() else None


def merge(actor: Path, out: Path) -> Path:
    """verl's FSDP checkpoint as a Hugging Face folder (what ``infer`` serves)."""
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    _run([str(verl_python()), "-m", "verl.model_merger", "merge", "--backend", "fsdp",
          "--local_dir", str(actor), "--target_dir", str(partial)],
         actor.parents[2] / "merge.log", "merging the checkpoint")  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def _run(argv: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                              check=False)  # fmt: skip
    if done.returncode != 0:
        tail = log.read_text()[-2000:]
        raise VerlError(f"verl failed {what} (exit {done.returncode}); see {log}:\n{tail}")


class VerlBackend:
    """verl's PPO trainer in its own environment, on the local Ray or ``rl.ray_address``."""

    def result(self, run: RLRun) -> RLResult | None:
        return published(run.out, run.inputs)

    def resume(self, run: RLRun) -> Path | None:
        folder = run.work / "verl"
        checkpoints = folder / "checkpoints"
        stale = [checkpoints, run.work / "tensorboard", folder / METRICS, folder / EARLIER_METRICS]
        return resume_point(run.work, run.inputs, last_checkpoint(checkpoints), stale)

    def train(self, run: RLRun, resume: Path | None, progress: StepProgress | None) -> RLResult:
        """Prepare, launch, merge: ``run.out`` is the trained policy as a Hugging Face folder.
        verl resumes by itself (``trainer.resume_mode=auto``) from the checkpoint ``resume``
        found, the only one left in its folder."""
        env = run.env
        command = prepare(run.tasks, run.policy, run.work, run.rl, store=run.store,
                          specs=run.specs, agent=env.agent, backend=run.backend)  # fmt: skip
        began = time.monotonic()
        actor = launch(command, run.work)
        seconds = round(time.monotonic() - began, 1)
        merge(actor, run.out)
        folder = run.work / "verl"
        records = [asdict(step_record(line))
                   for line in read_records(folder / EARLIER_METRICS, folder / METRICS)
                   if STEP_TIMES <= line["data"].keys()]  # fmt: skip
        plot = plot_curves(records, run.work / "rl.png")
        result = RLResult(
            model=str(run.out), base_model=run.base_model, backend="verl",
            inputs_digest=run.inputs, tasks=len(run.tasks), steps=run.rl.steps, records=records,
            infra_failures=None, train_seconds=seconds, curves=str(plot) if plot else None,
            tensorboard=str(run.work / "tensorboard"),
        )  # fmt: skip
        (run.out / RECORD).write_text(json.dumps(result.to_dict(), indent=1))
        return result


def step_record(line: dict[str, Any]) -> StepRecord:
    """A step's figures from a line of verl 0.9.1's file logger, ``{"step": N, "data": {...}}``
    (verl/utils/tracking.py FileLogger; the metric names are those of its trainer's
    compute_data_metrics and compute_timing_metrics, and its actor's pg_loss). verl logs batch
    figures only: what sweflow counts per episode (resolve rate, valid actions, infrastructure
    failures, environment time) is None. All of verl's numbers are kept in ``extra``."""
    data = line["data"]
    step_s, rollouts_s = data["timing_s/step"], data["timing_s/gen"]
    turns = data.get("num_turns/mean")  # SweflowAgentLoop's num_turns: 2 * agent steps + 1
    return StepRecord(
        step=int(line["step"]), episodes=None, infra_failures=None, refused=None,
        zero_spread_groups=None,
        mean_reward=data.get("critic/score/mean"), resolve_rate=None, valid_action_rate=None,
        episode_turns=None if turns is None else (turns - 1) / 2, generated_tokens=None,
        generation_s=rollouts_s,  # the rollouts: generation, sandboxes and grading, overlapped
        env_s=None, env_s_per_rollout=None, update_s=max(0.0, step_s - rollouts_s),
        step_s=step_s, loss=data.get("actor/pg_loss"),
        extra={k: v for k, v in data.items() if isinstance(v, int | float)},
    )  # fmt: skip
