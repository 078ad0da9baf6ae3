"""The baseline of the SFT benchmark: TRL's SFTTrainer, what a user would otherwise pick, on the
very sequences torchtune trained on (sweflow's tokenized train.jsonl: input ids and labels masked
to the assistant turns), same model, batch, steps, learning rate, optimizer (OPTIM: TRL's name of
the one torchtune ran with) and sequence length, fp32 on the CPU with gradient checkpointing as
torchtune's activation checkpointing.

Run in a process of its own so that its peak RSS is its own:
``python -m sweflow.bench.sft_baseline MODEL TRAIN_JSONL STEPS LR OPTIM OUT_JSON``; writes
{"step_times": [...], "sequence_tokens": [...], "peak_rss_mb": ...}.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from pathlib import Path


def main(model: str, train: str, steps: int, learning_rate: float, optim: str, out: str) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    rows = [json.loads(line) for line in Path(train).read_text().splitlines() if line.strip()]
    data = Dataset.from_list([{"input_ids": r["tokens"], "labels": r["labels"]} for r in rows])
    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001
            stamps.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as scratch:
        args = SFTConfig(
            output_dir=scratch,
            per_device_train_batch_size=1,
            gradient_accumulation_steps=1,
            max_steps=steps,
            learning_rate=learning_rate,
            optim=optim,
            lr_scheduler_type="constant",
            weight_decay=0.0,
            max_grad_norm=1.0,
            gradient_checkpointing=True,
            max_length=max(len(r["tokens"]) for r in rows),
            bf16=False,
            use_cpu=True,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            dataloader_drop_last=True,
            seed=0,
        )
        net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
        trainer = SFTTrainer(
            model=net,
            args=args,
            train_dataset=data,
            processing_class=AutoTokenizer.from_pretrained(model),
            callbacks=[Clock()],
        )
        began = time.perf_counter()
        trainer.train()
    times = [b - a for a, b in zip([began, *stamps], stamps, strict=False)]
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    lengths = [len(r["tokens"]) for r in rows]
    Path(out).write_text(
        json.dumps({"step_times": times, "sequence_tokens": lengths, "peak_rss_mb": peak_kb / 1024})
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6])
