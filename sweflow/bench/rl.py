"""RL benchmark: where the time of an RL step goes, and what the sandbox costs per rollout.

In one run, on the demo task set's train split (parse and cachetools; toolz is the held-out
repository), with SmolLM2-135M-Instruct:

- The environment per rollout, ``local`` vs ``docker`` vs bare: each task's golden trajectory
  (the gold patch replayed through the agent's tools: view, edit, test, submit, so the rollout
  ends with a patch and the grading runs the tests) is played again, the same actions in the
  same order, in a fresh sandbox of each backend and graded there; a rollout's time is sandbox
  start, the actions, the diff, the grading and the close (one untimed warm-up per task and
  backend). ``bare`` is the floor: the same work with no sandbox (the reward benchmark's
  HostChroot: the same layers, chroot, no namespace or cgroup): the trajectory's shell commands
  (its test run) on the patched checkout, then the same eval script on the same patch.
  ``overhead_ratio_docker_vs_local`` is docker's time over the floor divided by local's.
- The RL steps: the policy (the base after a short SFT on those golden trajectories, so that it
  writes tool blocks) trained with GRPO by the ``trl`` backend, ``tasks_per_step`` tasks times
  ``rollouts_per_task`` episodes a step, on the ``local`` backend. Per step: generation (the
  model's busy time), environment (the rest of the rollout phase: sandboxes, tools and grading
  the generation had to wait for) and update (TRL's log-probabilities, loss and optimizer step).
  ``env_share_of_step`` is the median of environment over step time; ``rollouts_per_min`` the
  episodes over the median step. The mean reward of the first and last quarter of the steps is
  reported, not asserted: a few CPU steps of a 135M model are not expected to learn much.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sweflow.agent.client import Completion
from sweflow.agent.config import AgentConfig
from sweflow.agent.jobs import replay_collect
from sweflow.agent.loop import run_agent
from sweflow.agent.trajectory import Trajectory
from sweflow.bench import DEMO, BenchError, bench_root, wheelhouse
from sweflow.bench.reward import HostChroot
from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.envcache.dataset import dataset_specs
from sweflow.envcache.store import LayerStore
from sweflow.grading import Grader
from sweflow.grading.dataset import GradingData
from sweflow.instances import Instance
from sweflow.sandbox import open_sandbox
from sweflow.serving import resolve_model
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.trainer import train
from sweflow.training.sft.config import SFTConfig
from sweflow.training.sft.train import train_sft

EVAL_REPO = "pypi/toolz"
Progress = Callable[[str], None]


def run(quick: bool = False, docker: bool = True, progress: Progress = print) -> dict:
    tasks, steps, reps = (2, 4, 4) if quick else (4, 8, 6)
    root = bench_root("rl")
    data = GradingData.load(DEMO, root / "store", wheelhouse())
    data.instances = data.sample(tasks, exclude={r.instance_id for r in data.instances
                                                 if r.repo == EVAL_REPO})  # fmt: skip
    progress(f"building {tasks} demo environments (cached after the first run)")
    if failed := [r for r in data.build() if r.status == "error"]:
        raise BenchError(f"{failed[0].instance_id} did not build: {failed[0].error}")
    report: dict[str, Any] = {"model": "SmolLM2-135M-Instruct", "tasks": tasks, "reps": reps}
    with tempfile.TemporaryDirectory(prefix="sweflow-bench-rl-") as scratch:
        tmp = Path(scratch)
        progress("replaying the gold patches through the agent's tools (the rollouts' actions)")
        gold = replay_collect(data.instances, store=data.store, specs=data.specs,
                              out_dir=tmp / "gold")  # fmt: skip
        data.instances = [r for r in data.instances if r.instance_id not in gold.skipped]
        if not data.instances:
            raise BenchError(f"the replay teacher declined every task: {gold.skipped}")
        report["tasks"] = len(data.instances)
        runs = sorted((tmp / "gold" / "trajectories").glob("*/run-*.json"))
        golden = {
            path.parent.name: traj for path in runs if (traj := Trajectory.load(path)).resolved
        }
        report |= _environment_times(data, golden, reps, docker, progress)
        report |= _rl_steps(data, tmp, steps, progress)
    local, bare = report["env_reward_s_per_rollout_local"], report["bare_tests_s_per_rollout"]
    dock = report.get("env_reward_s_per_rollout_docker")
    report["env_overhead_s_local"] = round(local - bare, 3)
    if dock is not None:
        report["env_overhead_s_docker"] = round(dock - bare, 3)
        if local > bare:
            report["overhead_ratio_docker_vs_local"] = round((dock - bare) / (local - bare), 2)
    return report


class Scripted:
    """A ChatModel that replies with a finished trajectory's assistant messages, in order: the
    same actions played again in another sandbox."""

    source = "replay"

    def __init__(self, trajectory: Trajectory) -> None:
        self.name = "scripted"
        self.replies = [m for m in trajectory.messages if m["role"] == "assistant"]

    async def complete(self, messages: list[dict], tools: list[dict] | None = None) -> Completion:
        turn = sum(m["role"] == "assistant" for m in messages)
        return Completion(self.replies[turn], 0, 0, 0.0, "stop")

    async def close(self) -> None:
        return None


async def _rollout(instance: Instance, trajectory: Trajectory, store: LayerStore,
                   grader: Grader, backend: str) -> float:  # fmt: skip
    """One rollout's environment work: sandbox, the actions, the diff, the grading, the close."""
    began = time.perf_counter()
    spec = instance_sandbox_spec(store, instance.instance_id)
    sandbox = await asyncio.to_thread(open_sandbox, spec, backend)
    async with sandbox:
        played = await run_agent(instance, sandbox, Scripted(trajectory), AgentConfig(
            tool_mode="text", max_steps=len(trajectory.steps) + 1))  # fmt: skip
    result = await grader.areward(instance, played.patch)
    if played.patch != trajectory.patch or not result.resolved:
        raise BenchError(f"{instance.instance_id}: the replayed actions did not resolve it on "
                         f"{backend} ({result.reason})")  # fmt: skip
    return time.perf_counter() - began


def _environment_times(data: GradingData, golden: dict[str, Trajectory], reps: int,
                       docker: bool, progress: Progress) -> dict:  # fmt: skip
    store = LayerStore(data.store)
    by_id = {row.instance_id: row for row in data.instances}
    samples: dict[str, list[float]] = {}
    with contextlib.ExitStack() as stack:
        backends = ["local"]
        if docker:
            from sweflow.sandbox.docker.daemon import docker_daemon

            stack.enter_context(docker_daemon())
            backends.append("docker")
        for backend in backends:
            progress(f"{backend}: the golden actions again, {reps} times per task")
            grader = Grader(data.store, data.specs, backend=backend)
            times = samples.setdefault(backend, [])
            for instance_id, trajectory in golden.items():
                play = _rollout(by_id[instance_id], trajectory, store, grader, backend)
                asyncio.run(play)  # warm-up: page cache, docker's image of the layers
                for _ in range(reps):
                    play = _rollout(by_id[instance_id], trajectory, store, grader, backend)
                    times.append(asyncio.run(play))
    progress("bare: the same commands and eval script on the same patches, no sandbox")
    grader = Grader(data.store, data.specs)
    bare: list[float] = []
    for instance_id, trajectory in golden.items():
        with tempfile.TemporaryDirectory(prefix="sweflow-bare-") as tmp:
            instance = by_id[instance_id]
            host = HostChroot(data, instance, grader.eval_script(instance), Path(tmp))
            commands = [action.args["command"] for step in trajectory.steps
                        for action in step.actions if action.tool == "bash"]  # fmt: skip
            try:
                host.time_eval(trajectory.patch)  # warm-up
                for _ in range(reps):
                    bare.append(host.time_commands(trajectory.patch, commands)
                                + host.time_eval(trajectory.patch))  # fmt: skip
            finally:
                host.close()
    report = {
        "env_reward_s_per_rollout_local": _p50(samples["local"]),
        "bare_tests_s_per_rollout": _p50(bare),
        "env_reward_samples": len(samples["local"]),
    }
    if docker:
        report["env_reward_s_per_rollout_docker"] = _p50(samples["docker"])
    return report


def _rl_steps(data: GradingData, tmp: Path, steps: int, progress: Progress) -> dict:
    base = resolve_model("smollm2-135m-instruct")
    sft = SFTConfig(epochs=2, learning_rate=1e-4, max_seq_len=2048)
    progress(f"SFT of the policy on {len(data.instances)} golden trajectories (2 epochs)")
    policy = train_sft(tmp / "gold" / "sft.jsonl", base, tmp / "sft", tmp / "sft" / "model", sft)
    rl = RLConfig(steps=steps, tasks_per_step=2, rollouts_per_task=2, learning_rate=1e-5,
                  max_tokens_per_turn=128, max_response_length=1536, format_error_penalty=0.1,
                  empty_patch_penalty=0.1,
                  checkpoint_every=steps)  # fmt: skip

    def on_step(step: int, total: int, record: Any) -> None:
        progress(f"RL step {step}/{total}: reward {record.mean_reward}, {record.step_s:.0f} s "
                 f"(generation {record.generation_s:.0f}, environment {record.env_s:.1f}, "
                 f"update {record.update_s:.0f})")  # fmt: skip

    progress(f"GRPO (trl): {steps} steps of {rl.episodes_per_step} episodes")
    result = train(data.instances, Path(policy.model), tmp / "rl", tmp / "rl" / "model", rl,
                   store=data.store, specs=dataset_specs(data.dataset),
                   agent=AgentConfig(tool_mode="text", max_steps=4), progress=on_step)  # fmt: skip
    records = result.records
    if not records:
        raise BenchError("the RL run recorded no step")
    step_s = _p50([r["step_s"] for r in records])
    first, last = result.quarter_rewards()
    return {
        "rl_steps": len(records),
        "episodes_per_step": rl.episodes_per_step,
        "step_s_p50": step_s,
        "generation_s_p50": _p50([r["generation_s"] for r in records]),
        "env_s_p50": _p50([r["env_s"] for r in records]),
        "update_s_p50": _p50([r["update_s"] for r in records]),
        "env_share_of_step": _p50([r["env_s"] / r["step_s"] for r in records if r["step_s"]]),
        "env_s_per_rollout_in_steps": _p50([r["env_s_per_rollout"] for r in records]),
        "rollouts_per_min": round(rl.episodes_per_step * 60 / step_s, 2) if step_s else None,
        "valid_action_rate": _p50([r["valid_action_rate"] for r in records]),
        "infra_failures": result.infra_failures,
        "reward_first_quarter": first,
        "reward_last_quarter": last,
    }


def _p50(samples: list[float]) -> float:
    if not samples:
        raise BenchError("no samples were taken")
    return round(statistics.median(samples), 3)
