"""torchtune's own recipes, run as ``tune run``: the config generated from an SFTConfig, saved
beside the run so that a user can re-run it by hand, and the process watched until it ends.

Recipes: ``full_finetune_single_device`` and ``lora_finetune_single_device`` on one device, the
``*_distributed`` ones with ``--nproc_per_node`` on more than one GPU. On a CPU the settings that
work are forced (fp32: bf16 did not learn here; a plain AdamW: the 8-bit paged one needs CUDA; no
activation offloading). A run that dies is resumed from its last epoch checkpoint when the
config is unchanged, else started over.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sweflow.errors import ConfigError, InfrastructureError, SweflowError
from sweflow.training.sft.architectures import checkpointer
from sweflow.training.sft.config import CPU_DISTRIBUTED, SFTConfig
from sweflow.training.workdir import last_attempt, record_attempt

COMPONENTS = "sweflow.training.sft.torchtune_components"
LORA_MODULES = ["q_proj", "k_proj", "v_proj", "output_proj"]
RECIPE_STATE = Path("recipe_state") / "recipe_state.pt"
OOM_SIGNS = ("out of memory", "cannot allocate memory", "killed", "memoryerror")

OnSFTStep = Callable[[int, int, dict[str, float]], None]  # (step, total steps, metrics)


class TrainingError(SweflowError):
    """The recipe failed; the message ends with its log's tail."""


class TrainingKilled(TrainingError, InfrastructureError):
    """The recipe process was killed from outside (or ran out of memory): worth a resume."""


class OutputError(SweflowError):
    """The recipe left no checkpoint to publish."""


def last_epoch_dir(checkpoints: Path) -> Path:
    """The newest ``epoch_N`` folder the recipe saved, which must hold weights."""
    epochs = sorted(
        (p for p in checkpoints.glob("epoch_*") if p.name.split("_")[1].isdigit()),
        key=lambda p: int(p.name.split("_")[1]),
    )
    if not epochs or not any(epochs[-1].glob("*.safetensors")):
        raise OutputError(f"no epoch checkpoint with weights in {checkpoints}")
    return epochs[-1]


@dataclass(frozen=True)
class RecipePlan:
    """Where one fine-tune reads and writes, and how it runs."""

    model: Path  # the Hugging Face folder trained from
    train_data: Path  # tokenized sequences (sweflow.training.sft.data)
    examples: int
    work_dir: Path  # recipe.yaml, checkpoints/, tensorboard/, metrics.jsonl, train.log
    device: str
    dtype: str
    tensorboard: bool = True
    # torchtune's MLFlowLogger and WandBLogger arguments, by name: the stage's tracking run
    trackers: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def checkpoints(self) -> Path:
        return self.work_dir / "checkpoints"

    @property
    def metrics(self) -> Path:
        return self.work_dir / "metrics.jsonl"

    @property
    def log(self) -> Path:
        return self.work_dir / "train.log"


def resolve_device(config: SFTConfig) -> tuple[str, str]:
    """(device, dtype): cuda when asked or present, bf16 there and fp32 on the CPU."""
    device = config.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if config.distributed and device == "cpu":
        raise ConfigError(CPU_DISTRIBUTED)
    dtype = config.dtype if config.dtype != "auto" else ("bf16" if device == "cuda" else "fp32")
    return device, dtype


def recipe_name(config: SFTConfig) -> str:
    kind = "full_finetune" if config.method == "full" else "lora_finetune"
    return f"{kind}_{'distributed' if config.distributed else 'single_device'}"


def recipe_config(config: SFTConfig, plan: RecipePlan, resume: bool) -> dict[str, Any]:
    """The recipe's YAML config (as a mapping), from the SFT section and the plan."""
    hf_config = json.loads((plan.model / "config.json").read_text())
    model: dict[str, Any] = {
        "_component_": f"{COMPONENTS}.model",
        "config": str(plan.model / "config.json"),
        "max_seq_len": config.max_seq_len,
    }
    if config.method == "lora":
        model |= {
            "lora_attn_modules": LORA_MODULES,
            "apply_lora_to_mlp": True,
            "apply_lora_to_output": False,
            "lora_rank": config.lora_rank,
            "lora_alpha": config.lora_alpha,
            "lora_dropout": config.lora_dropout,
        }
    weights = sorted(p.name for p in plan.model.glob("*.safetensors"))
    if resume and config.method == "full":  # 0.6.1 reads them from output_dir then
        last = last_epoch_dir(plan.checkpoints)
        weights = sorted(f"{last.name}/{p.name}" for p in last.glob("*.safetensors"))
    on_cpu = plan.device == "cpu"
    return {
        "output_dir": str(plan.checkpoints),
        "model": model,
        "tokenizer": {
            "_component_": f"{COMPONENTS}.tokenizer",
            "path": str(plan.model),
            "max_seq_len": config.max_seq_len,
        },
        "checkpointer": {
            **checkpointer(hf_config),
            "checkpoint_dir": str(plan.model),
            "checkpoint_files": weights,
            "recipe_checkpoint": None,
            "output_dir": str(plan.checkpoints),
        },
        "resume_from_checkpoint": resume,
        "save_adapter_weights_only": False,
        "dataset": {"_component_": f"{COMPONENTS}.tokenized_dataset", "path": str(plan.train_data)},
        "seed": config.seed,
        "shuffle": True,
        "batch_size": config.batch_size,
        "optimizer": {
            "_component_": "torch.optim.AdamW",
            "lr": config.learning_rate,
            "weight_decay": 0.0,
            "fused": False if on_cpu else True,
        },
        "lr_scheduler": {  # num_cycles 0: cos(0) = 1 after the warmup, a constant rate
            "_component_": "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
            "num_warmup_steps": config.warmup_steps,
            "num_cycles": 0.5 if config.lr_schedule == "cosine" else 0.0,
        },
        "loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"},
        "epochs": config.epochs,
        "max_steps_per_epoch": config.max_steps_per_epoch,
        "gradient_accumulation_steps": config.gradient_accumulation_steps,
        "optimizer_in_bwd": False,
        "clip_grad_norm": 1.0,
        "compile": config.compile,
        "device": plan.device,
        "dtype": plan.dtype,
        "enable_activation_checkpointing": config.activation_checkpointing,
        "enable_activation_offloading": False,
        "metric_logger": {
            "_component_": f"{COMPONENTS}.MetricLogger",
            "jsonl": str(plan.metrics),
            "log_dir": str(plan.work_dir / "tensorboard") if plan.tensorboard else None,
            "prefix": "sft/",
            **plan.trackers,
        },
        "log_every_n_steps": 1,
        "log_peak_memory_stats": False,
    }


def total_steps(config: SFTConfig, examples: int) -> int:
    """Optimizer steps of the whole run (the recipe's loader drops a last partial batch)."""
    per_epoch = (examples // config.batch_size) // config.gradient_accumulation_steps
    if config.max_steps_per_epoch:
        per_epoch = min(per_epoch, config.max_steps_per_epoch)
    return max(per_epoch, 1) * config.epochs


def command(config: SFTConfig, config_path: Path) -> list[str]:
    """``tune run [torchrun's options] RECIPE --config FILE`` with this interpreter's torchtune:
    ``--nproc_per_node`` for several processes, and on several machines ``--nnodes`` with the
    c10d rendezvous at the first machine (the same command runs on each)."""
    tune = [sys.executable, "-m", "torchtune._cli.tune", "run"]
    if config.distributed:
        tune += ["--nproc_per_node", str(config.gpus)]
    if config.nnodes > 1:
        tune += ["--nnodes", str(config.nnodes), "--rdzv_backend", "c10d"]
        tune += ["--rdzv_endpoint", str(config.rdzv_endpoint)]
    return [*tune, recipe_name(config), "--config", str(config_path)]


def _digest(recipe: dict[str, Any]) -> str:
    """What an attempt to resume must share with the one that saved (where its metrics are
    reported may change: a resumed run is another tracking run)."""
    stable = {
        k: v for k, v in recipe.items() if k not in ("resume_from_checkpoint", "metric_logger")
    }
    return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()


def prepare_checkpoints(config: SFTConfig, plan: RecipePlan) -> Path:
    """Write recipe.yaml; resume from a matching earlier attempt's last epoch, else start over."""
    fresh = recipe_config(config, plan, resume=False)
    digest = _digest(fresh)
    resume = last_attempt(plan.checkpoints) == digest and _keep_completed_epochs(plan.checkpoints)
    if not resume:
        shutil.rmtree(plan.checkpoints, ignore_errors=True)
        plan.metrics.unlink(missing_ok=True)
        shutil.rmtree(plan.work_dir / "tensorboard", ignore_errors=True)
    record_attempt(plan.checkpoints, digest)
    path = plan.work_dir / "recipe.yaml"
    header = f"# {recipe_name(config)}: re-run by hand with `{' '.join(command(config, path))}`\n"
    body = yaml.safe_dump(recipe_config(config, plan, resume=resume), sort_keys=False)
    path.write_text(header + body)
    return path


def _keep_completed_epochs(checkpoints: Path) -> bool:
    """Whether an earlier attempt left an epoch to resume from: the one its recipe state
    records as done. Later epoch folders (a save cut short) are removed."""
    state = checkpoints / RECIPE_STATE
    if not state.is_file():
        return False
    import torch

    try:
        done = int(torch.load(state, map_location="cpu", weights_only=True)["epochs_run"])
    except Exception:  # written halfway when the attempt died: start over
        return False
    for epoch in checkpoints.glob("epoch_*"):
        if epoch.name.split("_")[-1].isdigit() and int(epoch.name.split("_")[-1]) >= done:
            shutil.rmtree(epoch)
    try:
        return last_epoch_dir(checkpoints).name == f"epoch_{done - 1}"
    except OutputError:
        return False


@dataclass
class RecipeOutcome:
    """A finished recipe run: its per-step metrics and the recipe process's peak RSS."""

    records: list[dict]
    peak_rss_mb: float


def run(config: SFTConfig, plan: RecipePlan, progress: OnSFTStep | None = None) -> RecipeOutcome:
    """Run the recipe to its end. Ctrl-C (or any error here) stops it at once."""
    config_path = prepare_checkpoints(config, plan)
    steps = total_steps(config, plan.examples)
    argv = command(config, config_path)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    with plan.log.open("ab") as log:
        log.write(f"\n$ {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    seen, peak = 0, 0.0
    try:
        while proc.poll() is None:
            seen = _report(plan.metrics, seen, steps, progress)
            peak = max(peak, high_water_mb(proc.pid))
            time.sleep(0.5)
    finally:
        _stop(proc)
    seen = _report(plan.metrics, seen, steps, progress)
    if proc.returncode != 0:
        raise _failure(proc.returncode, plan.log, config)
    return RecipeOutcome(read_metrics(plan.metrics), round(peak, 1))


def high_water_mb(pid: int) -> float:
    """A live process's peak resident memory so far (VmHWM), in MB; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def die_with_parent() -> None:
    """In the child: be killed when the process that started it dies (PR_SET_PDEATHSIG), so a
    trainer killed outright never leaves its recipe writing checkpoints behind it."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def _report(path: Path, seen: int, total: int, progress: OnSFTStep | None) -> int:
    records = read_metrics(path)
    if progress is not None:
        for record in records[seen:]:
            progress(int(record["step"]), total, record)
    return len(records)


def read_metrics(path: Path) -> list[dict]:
    """The per-step records, one per step: a step run again after a resume counts once, as
    its last run."""
    if not path.is_file():
        return []
    lines = path.read_text().splitlines()
    by_step = {}
    for record in (json.loads(line) for line in lines if line.strip().endswith("}")):
        by_step[record["step"]] = record
    return [by_step[step] for step in sorted(by_step)]


def _stop(proc: subprocess.Popen) -> None:
    """End the recipe's process group (its dataloader workers too), politely then not."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _failure(code: int, log: Path, config: SFTConfig) -> TrainingError:
    tail = log.read_text(errors="replace")[-3000:]
    if code < 0 or any(sign in tail.lower() for sign in OOM_SIGNS):
        return TrainingKilled(
            f"the recipe was killed (exit {code}), most likely out of memory: lower "
            f"sft.max_seq_len ({config.max_seq_len}) or sft.batch_size ({config.batch_size}), "
            "keep sft.activation_checkpointing on, or use sft.method: lora; "
            f"{log} ends:\n{tail}"
        )
    return TrainingError(f"the torchtune recipe failed (exit {code}); {log} ends:\n{tail}")
