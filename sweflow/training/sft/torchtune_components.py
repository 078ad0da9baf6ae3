"""What torchtune's recipes instantiate from sweflow's generated config (``_component_`` paths).

These run inside ``tune run``, so this module imports torchtune; the rest of sweflow does not.

- :func:`model` builds the torchtune model of a Hugging Face folder from its ``config.json``
  (Llama-architecture models through the Llama 3.2 builder, Qwen2 through its own), LoRA or not;
- :func:`tokenizer` is the little the recipe needs from a tokenizer (``pad_id``): the sequences
  are tokenized beforehand by sweflow.training.chat, with the model's chat template;
- :func:`tokenized_dataset` reads those sequences (tokens, and labels masked with -100);
- :class:`MetricLogger` writes torchtune's metrics to TensorBoard and, for sweflow's progress,
  plots and reports, to a JSON-lines file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset
from torchtune.training.metric_logging import MetricLoggerInterface, TensorBoardLogger

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
    """TensorBoard (torchtune's own logger) plus ``metrics.jsonl``: {"step", "time", metrics}."""

    def __init__(self, log_dir: str, jsonl: str) -> None:
        self.tensorboard = TensorBoardLogger(log_dir=log_dir, organize_logs=False)
        self.path = Path(jsonl)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, name: str, data: Any, step: int) -> None:
        self.log_dict({name: data}, step)

    def log_config(self, config: Any) -> None:
        self.tensorboard.log_config(config)

    def log_dict(self, payload: Mapping[str, Any], step: int) -> None:
        self.tensorboard.log_dict(payload, step)
        record = {"step": step, "time": time.time(), **{k: float(v) for k, v in payload.items()}}
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self.tensorboard.close()
