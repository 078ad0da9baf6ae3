"""A trained model as a Hugging Face folder: a trainer's last checkpoint, its config, tokenizer
and chat template, a model card and the training record, written whole or not at all (SFT and
RL publish the same way).

The folder is assembled beside its final place and renamed into it, so a reader (vLLM, the infer
stage) never sees half a model: either the previous one or the new one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
CARD = "README.md"
RECORD = "sweflow_training.json"


def publish(
    source: Path, base: Path, out: Path, dtype: str, record: dict[str, Any], card: str
) -> Path:
    """Make ``out`` the HF folder of ``source`` (a trainer's last checkpoint), with what it lacks
    from ``base`` (tokenizer, chat template), ``record`` and ``card``."""
    staging = out.with_name(f".{out.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, staging)
    for extra in base.iterdir():  # tokenizer, chat template, generation config, if not copied
        if extra.is_file() and not _weights_or_card(extra.name):
            if not (staging / extra.name).exists():
                shutil.copy2(extra, staging / extra.name)
    config_path = staging / "config.json"
    config = json.loads(config_path.read_text())
    config["dtype"] = TORCH_DTYPES[dtype]  # the weights' dtype (the copied config keeps the base's)
    config.pop("torch_dtype", None)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    (staging / RECORD).write_text(json.dumps(record, indent=1, default=str) + "\n")
    (staging / CARD).write_text(card)
    old = out.with_name(f".{out.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    staging.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    return out


def _weights_or_card(name: str) -> bool:
    return name == CARD or name.endswith((".safetensors", ".bin", ".pt", ".index.json"))


def model_card(*, base: str, tags: list[str], title: str, summary: str, metrics: dict) -> str:
    """A model card: Hub front matter, what it was trained from and how, its figures."""
    rows = "\n".join(f"| {k} | {v} |" for k, v in metrics.items())
    return f"""---
base_model: {base}
library_name: transformers
pipeline_tag: text-generation
tags: [{", ".join(["sweflow", "swe-agent", *tags])}]
---

# {title}

{summary}

| metric | value |
|---|---|
{rows}

The training record: `{RECORD}`. Upload with `huggingface-cli upload <org>/<name> .` from this
folder.
"""
