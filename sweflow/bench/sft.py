"""SFT benchmark: torchtune's recipe against TRL's SFTTrainer on the same sequences, and the
held-out loss before and after, in one run.

Data: the demo task set's golden trajectories, replayed from the gold patches through the
agent's tools in real sandboxes (parse and cachetools train, toolz is held out), rendered with
SmolLM2-135M-Instruct's chat template. For a like-for-like throughput every training sequence is
exactly ``SEQ_LEN`` tokens (conversations at least that long, truncated), batch 1, fp32 on the
CPU, activation (gradient) checkpointing on, the same steps, learning rate and optimizer for
both trainers: TRL is given the implementation torchtune's recipe.yaml names (torch's AdamW, not
fused on a CPU; TRL's default is the fused one). The two trainers run in turn, ``reps`` times
each, so that machine noise hits both alike, and the figures are the medians. tokens/s counts all
tokens of the steady steps (the first, which loads and warms up, is left out); peak RSS is each
trainer's own process. Held-out loss: the mean loss on the assistant tokens of the toolz replays,
through transformers, of the base model and of torchtune's first result.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from sweflow.agent.runs.jobs import replay_collect
from sweflow.bench import DEMO, BenchError, bench_root, wheelhouse
from sweflow.envcache.dataset import Dataset
from sweflow.progress import Progress
from sweflow.serving import resolve_model
from sweflow.training.chat import ChatEncoder
from sweflow.training.sft import data as sft_data
from sweflow.training.sft.config import SFTConfig
from sweflow.training.sft.losses import mean_loss
from sweflow.training.sft.train import SFTResult, train_sft

EVAL_REPO = "pypi/toolz"
SEQ_LEN = 1024
LEARNING_RATE = 2e-5


def run(quick: bool = False, progress: Progress = print) -> dict:
    steps, reps = (6, 2) if quick else (16, 3)
    train_tasks, eval_tasks = (8, 4) if quick else (24, 12)
    root = bench_root("sft")
    data, store = Dataset.load(DEMO), root / "store"
    train_rows = [r for r in data.rows if r.repo != EVAL_REPO][:train_tasks]
    eval_rows = [r for r in data.rows if r.repo == EVAL_REPO][:eval_tasks]
    chosen = train_rows + eval_rows
    progress(f"building {len(chosen)} demo environments (cached after the first run)")
    built = data.builder(store, wheelhouse=wheelhouse()).build(chosen)
    if failed := [r for r in built if r.status == "error"]:
        raise BenchError(f"{failed[0].instance_id} did not build: {failed[0].error}")
    base = resolve_model("smollm2-135m-instruct")
    encoder = ChatEncoder(base)
    with tempfile.TemporaryDirectory(prefix="sweflow-bench-sft-") as scratch:
        tmp = Path(scratch)
        progress("replaying the gold patches through the agent's tools (golden trajectories)")
        for name, rows in (("train", train_rows), ("eval", eval_rows)):
            replay_collect(rows, store=store, specs=data.specs, out_dir=tmp / name)
        train = _long_enough(tmp / "train" / "sft.jsonl", encoder, tmp / "train-long.jsonl")
        if train < steps:
            raise BenchError(f"only {train} replays reach {SEQ_LEN} tokens; {steps} are needed")
        config = SFTConfig(
            max_seq_len=SEQ_LEN,
            max_steps_per_epoch=steps,
            device="cpu",
            learning_rate=LEARNING_RATE,
            activation_checkpointing=True,
        )
        tuned: list[SFTResult] = []
        trl: list[dict] = []
        for rep in range(reps):  # in turn, so that the machine's noise hits both alike
            work = tmp / f"tt-{rep}"
            progress(f"rep {rep + 1}/{reps}: torchtune, {steps} steps of {SEQ_LEN} tokens")
            tuned.append(train_sft(tmp / "train-long.jsonl", base, work, work / "model", config))
            progress(f"rep {rep + 1}/{reps}: TRL SFTTrainer, the same steps and sequences")
            trl.append(_baseline(base, work, steps, tmp / f"trl-{rep}.json"))
        progress("held-out loss (toolz replays) of the base and the fine-tuned model")
        sft_data.prepare(
            tmp / "eval" / "sft.jsonl",
            encoder,
            tmp / "heldout",
            max_seq_len=2048,
            overlength="truncate",
        )
        heldout = sft_data.load_examples(tmp / "heldout" / "train.jsonl")
        before, after = mean_loss(base, heldout), mean_loss(tmp / "tt-0" / "model", heldout)
    ours = [r.tokens_per_s or 0.0 for r in tuned]
    theirs = [round(SEQ_LEN * (steps - 1) / sum(t["step_times"][1:]), 1) for t in trl]
    return {
        "model": "SmolLM2-135M-Instruct",
        "seq_len": SEQ_LEN,
        "steps": steps,
        "reps": reps,
        "optimizer": trl[0]["optimizer"],
        "train_sequences": train,
        "heldout_conversations": len(heldout),
        "tokens_per_s": statistics.median(ours),
        "baseline_tokens_per_s": statistics.median(theirs),
        "tokens_per_s_vs_baseline": round(statistics.median(ours) / statistics.median(theirs), 3),
        "tokens_per_s_samples": ours,
        "baseline_tokens_per_s_samples": theirs,
        "peak_rss_mb": statistics.median(r.peak_rss_mb for r in tuned),
        "baseline_peak_rss_mb": round(statistics.median(t["peak_rss_mb"] for t in trl), 1),
        "final_train_loss": tuned[0].final_loss,
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


def trl_optimizer(recipe_yaml: Path) -> str:
    """TRL's name for the optimizer torchtune's recipe ran with (``optim`` of its arguments)."""
    body = yaml.safe_load(recipe_yaml.read_text())
    optimizer = body["optimizer"]
    if optimizer["_component_"] != "torch.optim.AdamW" or optimizer.get("weight_decay"):
        raise BenchError(f"no TRL equivalent of torchtune's optimizer {optimizer}")
    return "adamw_torch_fused" if optimizer.get("fused") else "adamw_torch"


def _baseline(model: Path, torchtune_work: Path, steps: int, out: Path) -> dict:
    """TRL on the sequences and with the optimizer of the torchtune run in ``torchtune_work``."""
    optimizer = trl_optimizer(torchtune_work / "recipe.yaml")
    argv = [
        sys.executable,
        "-m",
        "sweflow.bench.sft_baseline",
        str(model),
        str(torchtune_work / "data" / "train.jsonl"),
        str(steps),
        str(LEARNING_RATE),
        optimizer,
        str(out),
    ]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchError(f"the TRL baseline failed: {done.stderr[-2000:]}")
    return json.loads(out.read_text()) | {"optimizer": f"torch.optim.AdamW ({optimizer})"}
