"""How a fine-tune is configured: the ``sft`` section of the pipeline, ``sweflow train sft``'s
options. The torchtune recipe config is generated from it (sweflow.training.sft.recipe)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from sweflow.configfile import ConfigModel
from sweflow.training.sft.sources.spec import DataSource

# seen here: gloo starts and FSDP loads the checkpoint, then rank 0 fails in _setup_model
CPU_DISTRIBUTED = (
    "the distributed recipe does not run on a CPU: torchtune 0.6.1's full_finetune_distributed "
    "logs memory stats on rank 0 unconditionally, which raises 'Logging memory stats is not "
    "supported on CPU devices'; use one process (gpus: 1, nnodes: 1) on a CPU"
)


class SFTConfig(ConfigModel):
    model: str | None = Field(
        None,
        description="the model to fine-tune: a Hugging Face folder, a bundled name or a Hub id; "
        "None: the pipeline's model.source",
    )
    data: list[DataSource] | None = Field(
        None,
        description="where the trajectories come from: files, Hugging Face ids, collect (the "
        "run's collected ones), mixed by count or weight; None: collect's (the pipeline) or "
        "--data (the CLI)",
    )
    tool_mode: Literal["tools", "text"] | None = Field(
        None,
        description="the student's tool mode, every row is converted to it; None: sweflow's rows "
        "keep their own mode, other formats become tools mode (the pipeline: agent.tool_mode)",
    )
    method: Literal["full", "lora"] = "full"
    epochs: int = Field(1, ge=1)
    learning_rate: float = Field(2e-5, gt=0)
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant", description="after the warmup: constant, or a cosine decay to 0"
    )
    warmup_steps: int = Field(0, ge=0)
    batch_size: int = Field(1, ge=1, description="sequences per forward pass")
    gradient_accumulation_steps: int = Field(1, ge=1)
    max_steps_per_epoch: int | None = Field(None, ge=1, description="None: the whole dataset")
    max_sequences: int | None = Field(
        None,
        ge=1,
        description="train on whole conversations, taken in the seed's order while all their "
        "sequences fit in this many (every epoch trains each of them; a capped epoch trains a "
        "sample of sequences, parts of conversations); None: every conversation",
    )
    max_seq_len: int = Field(2048, ge=64, description="tokens per sequence")
    overlength: Literal["split", "truncate", "skip"] = Field(
        "split",
        description="a longer conversation: split trains every turn once in windows that keep "
        "its start (system and task) and as much earlier context as fits; truncate keeps the "
        "start and the latest turns that fit; skip drops it (each counted)",
    )
    heldout_fraction: float = Field(
        0.0, ge=0, lt=1, description="tasks kept out of training to measure loss before/after"
    )
    lora_rank: int = Field(8, ge=1)
    lora_alpha: float = Field(16.0, gt=0)
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda if present")
    dtype: Literal["auto", "fp32", "bf16"] = Field("auto", description="auto: fp32 CPU, bf16 GPU")
    gpus: int = Field(
        1, ge=1, description="processes (GPUs) a machine; more than 1: the distributed recipe"
    )
    nnodes: int = Field(
        1, ge=1, description="machines; more than 1: the distributed recipe, started on each"
    )
    rdzv_endpoint: str | None = Field(
        None,
        description="host:port of the first machine, where the nodes meet (torchrun's c10d "
        "rendezvous); needed with nnodes > 1",
    )
    activation_checkpointing: bool = Field(
        True, description="less memory (135M model, 2,048 tokens: 3.8 vs 6.3 GB), 16% slower steps"
    )
    compile: bool = False
    seed: int = Field(
        0,
        ge=0,
        description="torch's seed and the order of the training sequences (0: the data's own "
        "order; another seed permutes them, so a capped epoch trains others)",
    )

    @property
    def distributed(self) -> bool:
        return self.gpus * self.nnodes > 1

    @model_validator(mode="after")
    def _nodes_meet(self) -> SFTConfig:
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError("nnodes > 1 needs rdzv_endpoint (host:port of the first machine)")
        if self.distributed and self.device == "cpu":
            raise ValueError(CPU_DISTRIBUTED)
        if self.rdzv_endpoint and not re.fullmatch(r"[\w.-]+:\d+", self.rdzv_endpoint):
            raise ValueError(f"rdzv_endpoint {self.rdzv_endpoint!r} is not host:port")
        return self
