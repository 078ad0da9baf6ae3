"""SFT benchmark: torchtune's recipe against TRL's SFTTrainer on the same sequences, and the
held-out loss before and after, in one run.

Data: the demo task set's golden trajectories, replayed from the gold patches through the
agent's tools in real sandboxes (parse and cachetools train, toolz is held out), rendered with
SmolLM2-135M-Instruct's chat template. For a like-for-like throughput every training sequence is
exactly ``SEQ_LEN`` tokens (conversations at least that long, truncated), batch 1, fp32 on the
CPU, activation (gradient) checkpointing on, the same steps and learning rate for both trainers;
tokens/s counts all tokens of the steady steps (the first, which loads and warms up, is left
out). Peak RSS is each trainer's own process. Held-out loss: the mean loss on the assistant
tokens of the toolz replays, through transformers, of the base model and of torchtune's result.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from sweflow.agent.jobs import replay_collect
from sweflow.bench import DEMO, BenchError, bench_root, wheelhouse
from sweflow.grading.dataset import GradingData
from sweflow.serving import resolve_model
from sweflow.training.chat import ChatEncoder
from sweflow.training.sft import data as sft_data
from sweflow.training.sft.config import SFTConfig
from sweflow.training.sft.losses import mean_loss
from sweflow.training.sft.train import train_sft

EVAL_REPO = "pypi/toolz"
SEQ_LEN = 1024
LEARNING_RATE = 2e-5
Progress = Callable[[str], None]


def run(quick: bool = False, progress: Progress = print) -> dict:
    steps = 6 if quick else 16
    train_tasks, eval_tasks = (8, 4) if quick else (24, 12)
    root = bench_root("sft")
    data = GradingData.load(DEMO, root / "store", wheelhouse())
    train_rows = [r for r in data.instances if r.repo != EVAL_REPO][:train_tasks]
    eval_rows = [r for r in data.instances if r.repo == EVAL_REPO][:eval_tasks]
    data.instances = train_rows + eval_rows
    progress(f"building {len(data.instances)} demo environments (cached after the first run)")
    if failed := [r for r in data.build() if r.status == "error"]:
        raise BenchError(f"{failed[0].instance_id} did not build: {failed[0].error}")
    base = resolve_model("smollm2-135m-instruct")
    encoder = ChatEncoder(base)
    with tempfile.TemporaryDirectory(prefix="sweflow-bench-sft-") as scratch:
        tmp = Path(scratch)
        progress("replaying the gold patches through the agent's tools (golden trajectories)")
        for name, rows in (("train", train_rows), ("eval", eval_rows)):
            replay_collect(rows, store=data.store, specs=data.specs, out_dir=tmp / name)
        train = _long_enough(tmp / "train" / "sft.jsonl", encoder, tmp / "train-long.jsonl")
        if train < steps:
            raise BenchError(f"only {train} replays reach {SEQ_LEN} tokens; {steps} are needed")
        config = SFTConfig(max_seq_len=SEQ_LEN, max_steps_per_epoch=steps,
                           learning_rate=LEARNING_RATE, activation_checkpointing=True)  # fmt: skip
        progress(f"torchtune: full_finetune_single_device, {steps} steps of {SEQ_LEN} tokens")
        tuned = train_sft(tmp / "train-long.jsonl", base, tmp / "tt", tmp / "tt" / "model", config)
        progress(f"TRL SFTTrainer: the same {steps} steps on the same sequences")
        trl = _baseline(base, tmp / "tt" / "data" / "train.jsonl", steps, tmp / "trl.json")
        progress("held-out loss (toolz replays) of the base and the fine-tuned model")
        sft_data.prepare(tmp / "eval" / "sft.jsonl", encoder, tmp / "heldout",
                         max_seq_len=2048, overlength="truncate")  # fmt: skip
        heldout = sft_data.load_examples(tmp / "heldout" / "train.jsonl")
        before, after = mean_loss(base, heldout), mean_loss(tmp / "tt" / "model", heldout)
    baseline_tps = SEQ_LEN * (steps - 1) / sum(trl["step_times"][1:])
    return {
        "model": "SmolLM2-135M-Instruct",
        "seq_len": SEQ_LEN,
        "steps": steps,
        "train_sequences": train,
        "heldout_conversations": len(heldout),
        "tokens_per_s": tuned.tokens_per_s,
        "baseline_tokens_per_s": round(baseline_tps, 1),
        "tokens_per_s_vs_baseline": round((tuned.tokens_per_s or 0) / baseline_tps, 3),
        "peak_rss_mb": tuned.peak_rss_mb,
        "baseline_peak_rss_mb": round(trl["peak_rss_mb"], 1),
        "final_train_loss": tuned.final_loss,
        "heldout_loss_before": round(before, 4),
        "heldout_loss_after": round(after, 4),
    }


def _long_enough(data: Path, encoder: ChatEncoder, out: Path) -> int:
    """Keep the conversations of at least SEQ_LEN tokens (each trains as exactly SEQ_LEN)."""
    lines = [
        line
        for line in data.read_text().splitlines()
        if len(encoder.encode(json.loads(line)["messages"]).tokens) >= SEQ_LEN
    ]
    out.write_text("".join(line + "\n" for line in lines))
    return len(lines)


def _baseline(model: Path, train: Path, steps: int, out: Path) -> dict:
    argv = [sys.executable, "-m", "sweflow.bench.sft_baseline", str(model), str(train),
            str(steps), str(LEARNING_RATE), str(out)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchError(f"the TRL baseline failed: {done.stderr[-2000:]}")
    return json.loads(out.read_text())
