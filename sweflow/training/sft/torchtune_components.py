"""What torchtune's recipes instantiate from sweflow's generated config (``_component_`` paths).

These run inside ``tune run``, so this module imports torchtune; the rest of sweflow does not.

- :func:`model` builds the torchtune model of a Hugging Face folder from its ``config.json``
  (Llama-architecture models through the Llama 3.2 builder, Qwen2 through its own), LoRA or not;
- :func:`tokenizer` is the little the recipe needs from a tokenizer (``pad_id``): the sequences
  are tokenized beforehand by sweflow.training.chat, with the model's chat template;
- :func:`tokenized_dataset` reads those sequences (tokens, and labels masked with -100);
- :class:`MetricLogger` writes torchtune's metrics to a JSON-lines file (sweflow's progress,
  plots and reports) and hands them to torchtune's own loggers: TensorBoard, MLflow and W&B,
  whichever the run's tracking asks for.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset
from torchtune.training.metric_logging import (
    MetricLoggerInterface,
    MLFlowLogger,
    TensorBoardLogger,
    WandBLogger,
)

from sweflow.training.sft.architectures import torchtune_arguments


def model(config: str, max_seq_len: int = 2048, **lora: Any):
    """The torchtune model of the HF ``config.json`` at ``config``; LoRA when ``lora`` holds its
    settings (lora_rank, lora_alpha, lora_attn_modules...: the LoRA recipes read them from the
    model's config section, beside the component)."""
    builder, kwargs = torchtune_arguments(
        json.loads(Path(config).read_text()), max_seq_len, bool(lora)
    )
    return builder(**kwargs, **lora)


class PadOnlyTokenizer:
    """The tokenizer torchtune's SFT recipes hold: they pad batches with ``pad_id``."""

    def __init__(self, pad_id: int, max_seq_len: int) -> None:
        self.pad_id = pad_id
        self.max_seq_len = max_seq_len


def tokenizer(path: str, max_seq_len: int) -> PadOnlyTokenizer:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(path)
    pad = hf.pad_token_id if hf.pad_token_id is not None else hf.eos_token_id
    return PadOnlyTokenizer(int(pad), max_seq_len)


class TokenizedDataset(Dataset):
    """Pre-tokenized SFT examples: one JSON object a line with ``tokens`` and ``labels``."""

    def __init__(self, path: str) -> None:
        with open(path) as fh:
            self.rows = [json.loads(line) for line in fh if line.strip()]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        row = self.rows[index]
        return {"tokens": row["tokens"], "labels": row["labels"]}


def tokenized_dataset(tokenizer: PadOnlyTokenizer, path: str) -> TokenizedDataset:
    return TokenizedDataset(path)


class MetricLogger(MetricLoggerInterface):
    """``metrics.jsonl`` ({"step", "time", metrics}) and torchtune's own loggers at once.

    ``log_dir``: TensorBoard's folder (None: no TensorBoard). ``mlflow``: MLFlowLogger's
    arguments (tracking_uri, experiment_name, run_id): it resumes the run sweflow opened for
    the stage. ``wandb``: WandBLogger's (``wandb.init``'s, the run's id among them). Their
    metric names get ``prefix`` (``sft/loss``): the stages of a pipeline run share one tracking
    run. The recipe's config is not logged as parameters there (sweflow logs the stage's
    settings, and a resumed attempt's config differs, which MLflow refuses); it is the run's
    recipe.yaml artifact."""

    def __init__(
        self,
        jsonl: str,
        log_dir: str | None = None,
        prefix: str = "",
        mlflow: dict[str, Any] | None = None,
        wandb: dict[str, Any] | None = None,
    ) -> None:
        self.path = Path(jsonl)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.prefix = prefix
        self.loggers: list[MetricLoggerInterface] = []
        if log_dir is not None:
            self.tensorboard = TensorBoardLogger(log_dir=log_dir, organize_logs=False)
            self.loggers.append(self.tensorboard)
        self.tracked: list[MetricLoggerInterface] = []
        if mlflow is not None:
            os.environ["MLFLOW_RUN_ID"] = mlflow["run_id"]  # its start_run resumes the run
            self.tracked.append(MLFlowLogger(**mlflow))
        if wandb is not None:
            self.tracked.append(WandBLogger(**wandb))

    def log(self, name: str, data: Any, step: int) -> None:
        self.log_dict({name: data}, step)

    def log_config(self, config: Any) -> None:
        if self.loggers:
            self.tensorboard.log_config(config)

    def log_dict(self, payload: Mapping[str, Any], step: int) -> None:
        for logger in self.loggers:
            logger.log_dict(payload, step)
        named = {f"{self.prefix}{key}": float(value) for key, value in payload.items()}
        for logger in self.tracked:
            logger.log_dict(named, step)
        record = {"step": step, "time": time.time(), **{k: float(v) for k, v in payload.items()}}
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")

    def close(self) -> None:
        for logger in [*self.loggers, *self.tracked]:
            logger.close()
