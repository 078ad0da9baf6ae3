"""The ``skyrl`` RL backend: SkyRL's PPO trainer (skyrl-train 0.3.1) on GPUs with Ray, the
trajectories sweflow episodes.

Everything SkyRL needs is written into ``<work>/skyrl`` before it starts: the train rows as its
parquet (``rl.steps x rl.tasks_per_step`` rows, the train tasks in turn, so that one epoch is
the run's steps; each row's ``instance_id`` names its task) and, with ``rl.validation``, the
validation tasks' (``data.val_data``), the rollout context (sweflow.training.rl.rollout_context)
and the trainer overrides (the ``rl`` section's, sweflow.training.rl.skyrl_settings, then the
user's ``rl.skyrl.overrides``), composed by SkyRL's own Hydra and checked by its validate_cfg
(sweflow.training.rl.skyrl_generator ``compose``) into ``skyrl_config.yaml`` and saved with
``launch.sh``, the command line a user can re-run by hand (:func:`preview` shows both without
writing them: ``sweflow --dry-run train rl``). SkyRL is then launched with sweflow's generator
(``python -m sweflow.training.rl.skyrl_generator train``) on a local Ray or the one
``rl.skyrl.ray_address`` names (``RAY_ADDRESS``, which SkyRL's ray.init reads); its last export
(``trainer.export_path/global_step_N/policy``, a Hugging Face folder) is the trained model.

The result is the same :class:`~sweflow.training.rl.result.RLResult` the other backends return:
one record per step from the metrics file sweflow's tracker writes beside SkyRL's own loggers
(reward, loss, the time split SkyRL measures, and what the generator counts per episode:
resolve rate, valid actions, infrastructure failures, environment time), and rl.validation's
measurements, from the generator's dump of SkyRL's evaluation episodes. With a tracking run,
SkyRL's MLflow and W&B loggers report to it (``trainer.logger``; MLFLOW_RUN_ID and WANDB_RUN_ID
in ``launch.sh``). A killed run resumes from SkyRL's last checkpoint when its inputs are
unchanged (``trainer.resume_mode=latest``), else starts over.

SkyRL lives in its own environment (scripts/setup-skyrl.sh makes .venv-skyrl on Python 3.12;
SWEFLOW_SKYRL_PYTHON names another interpreter).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import asdict
from itertools import cycle, islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweflow.agent.config import AgentConfig
from sweflow.errors import SweflowError
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance
from sweflow.training.rl.backend import OnRLStep, RLRun
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.launched import launch_run, publish_result
from sweflow.training.rl.lora import merge_adapter
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
    launch_script,
    run_logged,
    tracked_checkpoint,
    trainer_loggers,
)
from sweflow.training.rl.skyrl_settings import trainer_settings
from sweflow.training.rl.validation import dumped_validations
from sweflow.training.rl.verl_schema import hydra_value
from sweflow.training.workdir import resume_point

if TYPE_CHECKING:
    from sweflow.tracking import TrackingRun

SKYRL = SideEnv("skyrl", "SWEFLOW_SKYRL_PYTHON", "rl.backend skyrl")
ENTRY = "sweflow.training.rl.skyrl_generator"  # sweflow's side, run in SkyRL's environment
FOLDER = "skyrl"  # under the work folder
VALIDATION = "validation"  # the generator's dump of the evaluation episodes
METRICS = "metrics.jsonl"  # sweflow's tracker's line per step
TRACKER = "latest_ckpt_global_step.txt"  # SkyRL's record of its last checkpoint
_STEP = re.compile(r"^global_step_(\d+)$")


class SkyRLError(SweflowError):
    """SkyRL could not be prepared or run; the message names the step and its log."""


def write_inputs(tasks: list[Instance], folder: Path, name: str, rows: int | None = None) -> Path:
    """The tasks as SkyRL's parquet: a ``prompt`` (the task's id as a user message: SkyRL's
    dataset wants one; the generator builds the real prompt), the env class and the instance
    id. ``rows``: that many, the tasks in turn (else each task once)."""
    from datasets import Dataset

    folder.mkdir(parents=True, exist_ok=True)
    chosen = list(islice(cycle(tasks), rows)) if rows else tasks
    records = [
        {
            "prompt": [{"role": "user", "content": task.instance_id}],
            "env_class": "sweflow",
            "instance_id": task.instance_id,
        }
        for task in chosen
    ]
    parquet = folder / f"{name}.parquet"
    Dataset.from_list(records).to_parquet(str(parquet))
    return parquet


def overrides(
    rl: RLConfig,
    policy: Path | str,
    folder: Path,
    validation: bool,
    max_turns: int,
    tracking: TrackingRun | None = None,
) -> list[str]:
    """SkyRL's trainer settings (Hydra overrides of ppo_base_config): what the ``rl`` section
    sets, the agent's ``max_turns``, the files sweflow writes under ``folder``, its loggers from
    ``tracking``, then the user's ``rl.skyrl.overrides``."""
    settings = {
        **trainer_settings(rl),
        "generator.max_turns": max_turns,
        "data.train_data": [str(folder / "train.parquet")],
        "data.val_data": [str(folder / "val.parquet")] if validation else [],
        "trainer.policy.model.path": str(policy),
        "trainer.ckpt_path": str(folder / "checkpoints"),
        "trainer.export_path": str(folder / "export"),
        "trainer.hf_save_interval": rl.steps,
        **logger_settings(tracking, folder.parent.parent.name or "rl"),
        "+sweflow.context": str(folder / "rollout.json"),
        "+sweflow.metrics": str(folder / METRICS),
        "+sweflow.validation": str(folder / VALIDATION),
    }
    if rl.algorithm == "ppo":
        settings["trainer.critic.model.path"] = str(policy)
    return [f"{key}={hydra_value(value)}" for key, value in settings.items()] + list(
        rl.skyrl.overrides
    )


def logger_settings(tracking: TrackingRun | None, experiment: str) -> dict[str, object]:
    """SkyRL's loggers (sweflow.training.rl.side_env.trainer_loggers); sweflow's tracker adds
    its own file (``+sweflow.metrics``)."""
    loggers, project, experiment = trainer_loggers(tracking, experiment, [])
    return {
        "trainer.logger": loggers,
        "trainer.project_name": project,
        "trainer.run_name": experiment,
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
    """Write SkyRL's inputs under ``work/skyrl`` and compose and check its config with its own
    Hydra and validate_cfg (skyrl_config.yaml); returns the launch command, also saved as
    launch.sh with the environment SkyRL's loggers read (``env``: the tracking run's)."""
    folder = work / FOLDER
    write_inputs(tasks, folder, "train", rl.steps * rl.tasks_per_step)
    validation = bool(rl.validation and val_tasks)
    if validation:
        write_inputs(val_tasks or [], folder, "val")
    every = list({t.instance_id: t for t in [*tasks, *(val_tasks or [])]}.values())
    # one generator, in SkyRL's trainer process: its episodes may take all of that node's slots
    write_context(folder, every, policy, store, specs, agent, rl, backend, workers_per_node=1)
    settings = overrides(rl, policy, folder, validation, agent.max_steps, tracking)
    compose(settings, folder / "skyrl_config.yaml", folder / "compose.log")
    command = [str(SKYRL.python()), "-m", ENTRY, "train", *settings]
    (folder / "launch.sh").write_text(script(command, work, rl, env))
    return command


def script(command: list[str], work: Path, rl: RLConfig, env: dict[str, str] | None) -> str:
    """launch.sh: SkyRL's trainer as sweflow starts it, for a user to re-run by hand."""
    exports = {**launch_env(work, rl), **(env or {})}
    return launch_script(command, exports, "SkyRL's trainer on the rollouts of sweflow episodes")


def launch_env(work: Path, rl: RLConfig) -> dict[str, str]:
    """What SkyRL reads from its environment: TensorBoard's folder, the Ray it joins."""
    env = {"TENSORBOARD_DIR": str(work / "tensorboard")}
    if rl.skyrl.ray_address:
        env["RAY_ADDRESS"] = rl.skyrl.ray_address
    return env


def compose(settings: list[str], out: Path, log: Path) -> None:
    """SkyRL's config composed from ``settings`` and checked by its validate_cfg in its
    environment, saved to ``out``; a refusal is a ConfigError of one line naming it."""
    argv = [str(SKYRL.python()), "-m", ENTRY, "compose", str(out), *settings]
    compose_logged(argv, log, "SkyRL", "rl.skyrl", SkyRLError)


def preview(
    rl: RLConfig,
    policy: str,
    work: Path,
    *,
    validation: bool,
    compose_in: Path | None,
    max_turns: int,
) -> tuple[str | None, str]:
    """What ``prepare`` would compose and launch, writing nothing under ``work``: SkyRL's
    composed config (None when its environment is missing or ``compose_in`` is None) and
    launch.sh's text."""
    settings = overrides(rl, policy, work / FOLDER, validation, max_turns)
    python = SKYRL.python_path()
    composed = None
    if compose_in is not None and SKYRL.ready():
        compose(settings, compose_in / "skyrl_config.yaml", compose_in / "compose.log")
        composed = (compose_in / "skyrl_config.yaml").read_text()
    command = [str(python), "-m", ENTRY, "train", *settings]
    return composed, script(command, work, rl, None)


def launch(command: list[str], work: Path, rl: RLConfig, env: dict[str, str] | None) -> Path:
    """Run SkyRL's trainer to the end; returns its last export (a Hugging Face folder)."""
    environment = {**os.environ, **launch_env(work, rl), **(env or {})}
    folder = work / FOLDER
    run_logged(command, folder / "train.log", "SkyRL failed training", SkyRLError, environment)
    export = last_export(folder / "export")
    if export is None:
        raise SkyRLError(f"SkyRL finished without exporting a model under {folder / 'export'}")
    return export


def last_export(exports: Path) -> Path | None:
    """The policy of SkyRL's latest ``global_step_N`` export, or None."""
    steps = [
        (int(m[1]), path / "policy")
        for path in exports.glob("global_step_*")
        if (m := _STEP.match(path.name)) and (path / "policy").is_dir()
    ]
    return max(steps)[1] if steps else None


def last_checkpoint(checkpoints: Path) -> Path | None:
    """The checkpoint SkyRL's tracker file names as its last, or None."""
    return tracked_checkpoint(checkpoints, TRACKER)


def step_record(line: dict[str, Any]) -> RLStepRecord:
    """A step's figures from a line of sweflow's tracker, ``{"step": N, "data": {...}}``: SkyRL's
    metric names (its trainer's ``reward/``, ``policy/`` and ``timing/`` keys) and the
    generator's ``sweflow/`` ones. All the numbers are kept in ``extra``."""
    data = line["data"]
    step_s, rollouts_s = data.get("timing/step"), data.get("timing/generate")
    episodes = data.get("sweflow/episodes")
    infra = data.get("sweflow/infra_failures")
    return RLStepRecord(
        step=int(line["step"]),
        episodes=None if episodes is None else int(episodes),
        infra_failures=None if infra is None else int(infra),
        refused=None,
        zero_spread_groups=None,
        mean_reward=data.get("reward/avg_raw_reward"),
        resolve_rate=data.get("sweflow/resolve_rate"),
        valid_action_rate=data.get("sweflow/valid_action_rate"),
        episode_turns=data.get("sweflow/episode_turns"),
        generated_tokens=data.get("generate/avg_num_tokens"),
        generation_s=rollouts_s,  # the rollouts: generation, sandboxes and grading, overlapped
        env_s=None,
        env_s_per_rollout=data.get("sweflow/env_s_per_rollout"),
        update_s=None if step_s is None or rollouts_s is None else max(0.0, step_s - rollouts_s),
        step_s=step_s,
        loss=data.get("policy/policy_loss"),
        extra={k: v for k, v in data.items() if isinstance(v, int | float)},
    )


class SkyRLBackend:
    """SkyRL's PPO trainer in its own environment, on the local Ray or ``rl.skyrl.ray_address``."""

    trainer = "SkyRL"
    folder = FOLDER
    environment = SKYRL

    def result(self, run: RLRun) -> RLResult | None:
        return published(run.out, run.inputs)

    def resume(self, run: RLRun) -> Path | None:
        folder = run.work / FOLDER
        checkpoints = folder / "checkpoints"
        stale = [checkpoints, folder / "export", run.work / "tensorboard", folder / METRICS]
        stale.append(folder / VALIDATION)  # another attempt's validations
        return resume_point(run.work, run.inputs, last_checkpoint(checkpoints), stale)

    def preview(
        self,
        rl: RLConfig,
        policy: str,
        work: Path,
        *,
        validation: bool,
        compose_in: Path | None,
        max_turns: int,
    ) -> tuple[str | None, str]:
        return preview(
            rl, policy, work, validation=validation, compose_in=compose_in, max_turns=max_turns
        )

    def train(self, run: RLRun, resume: Path | None, progress: OnRLStep | None) -> RLResult:
        """Prepare, launch, publish: ``run.out`` is SkyRL's last export. SkyRL resumes by
        itself (``trainer.resume_mode=latest``) from the checkpoint ``resume`` found, the only
        one left in its folder."""
        export, seconds = launch_run(
            run, prepare, lambda command, env: launch(command, run.work, run.rl, env)
        )
        publish(export, run.policy, run.out)
        folder = run.work / FOLDER
        records = [asdict(step_record(line)) for line in read_records(folder / METRICS)]
        validation = dumped_validations(folder / VALIDATION, run.rl)
        infra = sum(r["infra_failures"] or 0 for r in records)
        return publish_result(run, "skyrl", records, validation, seconds, infra_failures=infra)


def publish(export: Path, policy: Path, out: Path) -> None:
    """SkyRL's export as ``out``, whole (its checkpoints stay for a resume): copied, or, where
    it is a LoRA adapter alone (rl.lora: SkyRL saves the peft model), folded into ``policy``."""
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    if (export / "adapter_config.json").is_file():
        shutil.copytree(policy, partial)
        merge_adapter(policy, export, partial)
    else:
        shutil.copytree(export, partial)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
