"""The ``verl`` RL backend: verl's PPO trainer on GPUs with Ray, the rollouts sweflow episodes.

Everything verl needs is written into ``<work>/verl`` before it starts: the train tasks as
verl's parquet (one row per task, the agent loop's name on each row) and, with
``rl.validation``, the validation tasks' (``data.val_files``), the rollout context (the tasks
and their specs, the layer store, agent and rl settings, the policy), the agent-loop YAML that
points verl at sweflow.training.rl.verl_loop, and the trainer overrides (the ``rl`` section's,
sweflow.training.rl.verl_schema, then the user's ``rl.verl.overrides``), composed by verl's own
Hydra and checked by verl's own code (sweflow.training.rl.verl_config) into
``verl_config.yaml`` and saved with ``launch.sh``, the command line a user can re-run by hand
(:func:`preview` shows both without writing them: ``sweflow --dry-run train rl``). verl is
then launched with ``python -m verl.trainer.main_ppo`` on the local Ray or
``rl.verl.ray_address``; its last checkpoint is merged into a Hugging Face folder with
``python -m verl.model_merger``.

The result is the same :class:`~sweflow.training.rl.result.RLResult` the trl backend returns: the
run's inputs digest, and one record per step read from verl's own file logger (``trainer.logger``
``file``, written to ``VERL_FILE_LOGGER_PATH``): reward, loss, turns and the time split that verl
measures; and rl.validation's measurements, from verl's dump of its validation episodes
(``trainer.validation_data_dir``). With a tracking run, verl's own loggers report to it too
(``trainer.logger`` gains ``mlflow`` and ``wandb``; they resume the run through MLFLOW_RUN_ID and
WANDB_RUN_ID, exported in ``launch.sh``). A killed run resumes from verl's last
checkpoint when its inputs are unchanged (verl's ``resume_mode=auto``), else starts over.

verl lives in its own environment (scripts/setup-verl.sh makes .venv-verl; SWEFLOW_VERL_PYTHON
names another interpreter): its fastapi pin clashes with Prefect's.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweflow.agent.config import AgentConfig
from sweflow.errors import SweflowError
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance
from sweflow.training.rl.backend import OnRLStep, RLRun
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.launched import launch_run, publish_result
from sweflow.training.rl.lora import merge_adapter_folder
from sweflow.training.rl.result import (
    RLResult,
    RLStepRecord,
    published,
    read_records,
)
from sweflow.training.rl.rollout_context import write_context
from sweflow.training.rl.side_env import (
    SideEnv,
    compose_logged,
    run_logged,
    tracked_checkpoint,
    trainer_loggers,
)
from sweflow.training.rl.side_env import launch_script as side_launch_script
from sweflow.training.rl.validation import dumped_validations
from sweflow.training.rl.verl_schema import hydra_value, trainer_settings
from sweflow.training.workdir import resume_point

if TYPE_CHECKING:
    from sweflow.tracking import TrackingRun

AGENT_NAME = "sweflow_swe"
VALIDATION = "validation"  # trainer.validation_data_dir: verl's dump of the validation episodes
TRACKER = "latest_checkpointed_iteration.txt"  # verl's record of its last checkpoint
METRICS, EARLIER_METRICS = "metrics.jsonl", "metrics.earlier.jsonl"  # verl's file logger's
STEP_TIMES = {"timing_s/step", "timing_s/gen"}  # in verl's log of every training step
MAX_AGENT_WORKERS = 8  # verl's default rollout.agent.num_workers


class VerlError(SweflowError):
    """verl could not be prepared or run; the message names the step and its log."""


VERL = SideEnv("verl", "SWEFLOW_VERL_PYTHON", "rl.backend verl")


def verl_python_path() -> Path:
    """Where the interpreter of verl's environment is (or would be)."""
    return VERL.python_path()


def verl_python() -> Path:
    """The interpreter of verl's environment."""
    return VERL.python()


def write_inputs(tasks: list[Instance], folder: Path, name: str = "train") -> Path:
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
    parquet = folder / f"{name}.parquet"
    Dataset.from_list(records).to_parquet(str(parquet))
    return parquet


def agent_workers(rl: RLConfig) -> int:
    """verl's agent-loop workers: verl splits each step's batch (tasks times rollouts) into one
    equal chunk per worker and refuses a batch they do not divide, so the largest divisor of
    the batch up to verl's default."""
    batch = rl.tasks_per_step * rl.rollouts_per_task
    return max(n for n in range(1, MAX_AGENT_WORKERS + 1) if batch % n == 0)


def write_agent_loops(
    folder: Path,
    tasks: list[Instance],
    policy: Path,
    store: Path,
    specs: SpecTable,
    agent: AgentConfig,
    rl: RLConfig,
    backend: str,
) -> Path:
    """The rollout context file and the agent-loop YAML that names it; returns the YAML.

    verl's agent-loop workers run on every node and read that YAML by its path, as they read
    the policy: the run folder must be on storage every node sees. The context carries all else
    inside it (the tasks and their repositories' specs, which may live on the head node only);
    each node opens sandboxes from its own store. It also says how many agent-loop workers share
    a node (verl spreads them round-robin), so that each bounds its open sandboxes to its share
    of the node's slots."""
    per_node = -(-agent_workers(rl) // rl.verl.nodes)
    context = write_context(folder, tasks, policy, store, specs, agent, rl, backend, per_node)
    loops = folder / "agent_loops.yaml"
    loops.write_text(
        f"- name: {AGENT_NAME}\n"
        "  _target_: sweflow.training.rl.verl_loop.SweflowAgentLoop\n"
        f"  context: {json.dumps(str(context))}\n"
    )
    return loops


def overrides(
    rl: RLConfig,
    policy: Path | str,
    parquet: Path,
    loops: Path,
    work: Path,
    val_parquet: Path | None = None,
    tracking: TrackingRun | None = None,
) -> list[str]:
    """verl's trainer settings (Hydra overrides of ppo_trainer): what the ``rl`` section sets
    (sweflow.training.rl.verl_schema.trainer_settings), the files sweflow writes, its loggers
    from ``tracking``, then the user's ``rl.verl.overrides``."""
    settings = {
        **trainer_settings(rl),
        "data.train_files": str(parquet),
        "data.val_files": str(val_parquet or parquet),
        "actor_rollout_ref.model.path": str(policy),
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(loops),
        "actor_rollout_ref.rollout.agent.default_agent_loop": AGENT_NAME,
        "actor_rollout_ref.rollout.agent.num_workers": agent_workers(rl),
        "trainer.default_local_dir": str(work / "checkpoints"),
        **logger_settings(tracking, work.parent.name or "rl"),
    }
    if val_parquet is not None:
        settings["trainer.validation_data_dir"] = str(work / VALIDATION)
    if rl.algorithm == "ppo":
        settings["critic.model.path"] = str(policy)
    return [f"{key}={hydra_value(value)}" for key, value in settings.items()] + list(
        rl.verl.overrides
    )


def logger_settings(tracking: TrackingRun | None, experiment: str) -> dict[str, object]:
    """verl's loggers (sweflow.training.rl.side_env.trainer_loggers), its file logger among
    them (VERL_FILE_LOGGER_PATH: sweflow's step records)."""
    loggers, project, experiment = trainer_loggers(tracking, experiment, ["file"])
    return {
        "trainer.logger": loggers,
        "trainer.project_name": project,
        "trainer.experiment_name": experiment,
    }


def prepare(
    tasks: list[Instance],
    policy: Path,
    work: Path,
    rl: RLConfig,
    *,
    store: Path,
    specs: SpecTable,
    agent: AgentConfig,
    backend: str,
    val_tasks: list[Instance] | None = None,
    env: dict[str, str] | None = None,
    tracking: TrackingRun | None = None,
) -> list[str]:
    """Write verl's inputs under ``work/verl`` and compose and check the config with verl's own
    Hydra and checks (verl_config.yaml); returns the launch command, also saved as launch.sh with
    the environment verl's loggers read (``env``: the tracking run's)."""
    folder = work / "verl"
    parquet = write_inputs(tasks, folder)
    val = write_inputs(val_tasks, folder, "val") if rl.validation and val_tasks else None
    every = list({t.instance_id: t for t in [*tasks, *(val_tasks or [])]}.values())
    loops = write_agent_loops(folder, every, policy, store, specs, agent, rl, backend)
    settings = overrides(rl, policy, parquet, loops, folder, val, tracking)
    compose(settings, folder / "verl_config.yaml", folder / "compose.log")
    command = [str(verl_python()), "-m", "verl.trainer.main_ppo", *settings]
    (folder / "launch.sh").write_text(launch_script(command, work, env))
    return command


def launch_script(command: list[str], work: Path, env: dict[str, str] | None = None) -> str:
    """launch.sh: verl's trainer as sweflow starts it (``env``: the tracking run's), for a
    user to re-run by hand."""
    exports = {**logging_env(work), **(env or {})}
    return side_launch_script(
        command, exports, "verl's trainer on the rollouts of sweflow episodes"
    )


def compose(settings: list[str], out: Path, log: Path) -> None:
    """verl's config composed from ``settings`` and checked by verl's own code in its
    environment (sweflow.training.rl.verl_config), saved to ``out``; a refusal is a
    ConfigError of one line naming the key."""
    argv = [str(verl_python()), "-m", "sweflow.training.rl.verl_config", "compose", str(out)]
    compose_logged([*argv, *settings], log, "verl", "rl.verl", VerlError)


def preview(
    rl: RLConfig, policy: str, work: Path, *, validation: bool, compose_in: Path | None
) -> tuple[str | None, str]:
    """What ``prepare`` would compose and launch, writing nothing under ``work``: verl's
    composed config (None when verl's environment is missing or ``compose_in`` is None) and
    launch.sh's text."""
    folder = work / "verl"
    val = folder / "val.parquet" if validation else None
    settings = overrides(
        rl, policy, folder / "train.parquet", folder / "agent_loops.yaml", folder, val
    )
    python = verl_python_path()
    composed = None
    if compose_in is not None and VERL.ready():
        compose(settings, compose_in / "verl_config.yaml", compose_in / "compose.log")
        composed = (compose_in / "verl_config.yaml").read_text()
    return composed, launch_script([str(python), "-m", "verl.trainer.main_ppo", *settings], work)


def logging_env(work: Path) -> dict[str, str]:
    """Where verl's loggers write: TensorBoard, and its file logger's per-step metrics."""
    return {
        "TENSORBOARD_DIR": str(work / "tensorboard"),
        "VERL_FILE_LOGGER_PATH": str(work / "verl" / METRICS),
    }


def launch(command: list[str], work: Path, env: dict[str, str] | None = None) -> Path:
    """Run verl's trainer to the end (``env``: the tracking run's, for its loggers); returns
    its last checkpoint's actor folder."""
    metrics = work / "verl" / METRICS
    if metrics.is_file():  # an earlier launch's steps: verl's file logger truncates its file
        with (work / "verl" / EARLIER_METRICS).open("a") as kept:
            kept.write(metrics.read_text())
    environment = {**os.environ, **logging_env(work), **(env or {})}
    _run(command, work / "verl" / "train.log", "training", env=environment)
    checkpoints = work / "verl" / "checkpoints"
    last = last_checkpoint(checkpoints)
    if last is None:
        raise VerlError(f"verl finished without a checkpoint ({checkpoints / TRACKER} is missing)")
    return last / "actor"


def last_checkpoint(checkpoints: Path) -> Path | None:
    """The checkpoint verl's tracker file names as its last, or None."""
    return tracked_checkpoint(checkpoints, TRACKER)


def merge(actor: Path, out: Path) -> Path:
    """verl's FSDP checkpoint as a Hugging Face folder (what ``infer`` serves)."""
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    _run(
        [
            str(verl_python()),
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(actor),
            "--target_dir",
            str(partial),
        ],
        actor.parents[2] / "merge.log",
        "merging the checkpoint",
    )
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def _run(argv: list[str], log: Path, what: str, env: dict[str, str] | None = None) -> None:
    run_logged(argv, log, f"verl failed {what}", VerlError, env)


class VerlBackend:
    """verl's PPO trainer in its own environment, on the local Ray or ``rl.verl.ray_address``."""

    trainer = "verl"
    folder = "verl"
    environment = VERL

    def preview(
        self,
        rl: RLConfig,
        policy: str,
        work: Path,
        *,
        validation: bool,
        compose_in: Path | None,
        max_turns: int,  # noqa: ARG002 (verl's agent loop has no turn limit of its own)
    ) -> tuple[str | None, str]:
        return preview(rl, policy, work, validation=validation, compose_in=compose_in)

    def result(self, run: RLRun) -> RLResult | None:
        return published(run.out, run.inputs)

    def resume(self, run: RLRun) -> Path | None:
        folder = run.work / "verl"
        checkpoints = folder / "checkpoints"
        stale = [checkpoints, run.work / "tensorboard", folder / METRICS, folder / EARLIER_METRICS]
        stale.append(folder / VALIDATION)  # verl's dump of another attempt's validations
        return resume_point(run.work, run.inputs, last_checkpoint(checkpoints), stale)

    def train(self, run: RLRun, resume: Path | None, progress: OnRLStep | None) -> RLResult:
        """Prepare, launch, merge: ``run.out`` is the trained policy as a Hugging Face folder.
        verl resumes by itself (``trainer.resume_mode=auto``) from the checkpoint ``resume``
        found, the only one left in its folder."""
        actor, seconds = launch_run(
            run, prepare, lambda command, env: launch(command, run.work, env)
        )
        merge(actor, run.out)
        if run.rl.lora.enabled:  # verl's merger leaves the adapter beside the base weights
            merge_adapter_folder(run.out)
        folder = run.work / "verl"
        records = [
            asdict(step_record(line))
            for line in read_records(folder / EARLIER_METRICS, folder / METRICS)
            if STEP_TIMES <= line["data"].keys()
        ]
        validation = dumped_validations(folder / VALIDATION, run.rl)
        return publish_result(run, "verl", records, validation, seconds, infra_failures=None)


def step_record(line: dict[str, Any]) -> RLStepRecord:
    """A step's figures from a line of verl 0.9.1's file logger, ``{"step": N, "data": {...}}``
    (verl/utils/tracking.py FileLogger; the metric names are those of its trainer's
    compute_data_metrics and compute_timing_metrics, and its actor's pg_loss). verl logs batch
    figures only: what sweflow counts per episode (resolve rate, valid actions, infrastructure
    failures, environment time) is None. All of verl's numbers are kept in ``extra``."""
    data = line["data"]
    step_s, rollouts_s = data["timing_s/step"], data["timing_s/gen"]
    turns = data.get("num_turns/mean")  # SweflowAgentLoop's num_turns: 2 * agent steps + 1
    return RLStepRecord(
        step=int(line["step"]),
        episodes=None,
        infra_failures=None,
        refused=None,
        zero_spread_groups=None,
        mean_reward=data.get("critic/score/mean"),
        resolve_rate=None,
        valid_action_rate=None,
        episode_turns=None if turns is None else (turns - 1) / 2,
        generated_tokens=None,
        generation_s=rollouts_s,  # the rollouts: generation, sandboxes and grading, overlapped
        env_s=None,
        env_s_per_rollout=None,
        update_s=max(0.0, step_s - rollouts_s),
        step_s=step_s,
        loss=data.get("actor/pg_loss"),
        extra={k: v for k, v in data.items() if isinstance(v, int | float)},
    )
