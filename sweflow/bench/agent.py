"""Agent benchmark: what the agent itself costs per step, and rollouts per minute.

A scripted OpenAI-compatible server (its own process, on 127.0.0.1) answers every call after a
fixed latency, so whatever a step takes beyond it is the agent's: the client's HTTP and JSON,
the loop, the sandbox work of the action, saving. Each rollout opens a real local sandbox on a
small git repository, runs a realistic mix of actions (bash, view, str_replace), submits (a
diff) and saves its trajectory. Throughput is measured at several concurrency levels against
the ideal (concurrency x 60 s / model time per rollout).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from sweflow.agent import AgentConfig, Batch, ModelClient, ModelConfig, Trajectory
from sweflow.bench import BenchError
from sweflow.bench.sandbox import _summary
from sweflow.instances import Instance
from sweflow.progress import Progress, no_progress
from sweflow.sandbox import SandboxSpec
from sweflow.testing.scripted_model import scripted_endpoint, tool_turn

MODULE = "def area(w, h):\n    return w * w\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"


TURNS = [
    tool_turn("bash", command="ls -la && git log --oneline | head -3"),
    tool_turn("str_replace_editor", command="view", path="/testbed/shapes.py"),
    tool_turn(
        "str_replace_editor",
        command="str_replace",
        path="/testbed/shapes.py",
        old_str="return w * w",
        new_str="return w * h",
    ),
    tool_turn("bash", command="python3 -c 'import shapes; print(shapes.area(2, 3))'"),
    tool_turn("bash", command="git status --short"),
    tool_turn("submit"),
]


def repo_layer(root: Path) -> Path:
    """A layer with a one-commit git repository at /testbed."""
    repo = root / "testbed"
    repo.mkdir(parents=True)
    (repo / "shapes.py").write_text(MODULE)
    (repo / "README.md").write_text("# shapes\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.com"}
    env.update(GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@example.com")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return root


async def _batch(url: str, spec: SandboxSpec, out: Path, n: int, concurrency: int):
    client = ModelClient(ModelConfig(base_url=url, model="scripted", retry_budget_s=30))
    rows = [
        Instance(instance_id=f"bench__shapes-{i}", repo="bench/shapes", base_commit="HEAD")
        for i in range(n)
    ]
    try:
        batch = Batch(client, AgentConfig(), out, lambda _r: spec, max_open_sandboxes=concurrency)
        began = time.perf_counter()
        trajectories = await batch.run(rows)
        return trajectories, time.perf_counter() - began
    finally:
        await client.close()


def _cpu_busy() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _check(trajectories: list[Trajectory]) -> None:
    bad = [t for t in trajectories if t.exit_status != "submitted" or "w * h" not in t.patch]
    if bad:
        raise BenchError(f"{len(bad)} rollouts did not finish as scripted: {bad[0].error}")


def run(
    rootfs: Path,
    *,
    quick: bool = False,
    latency_s: float = 0.1,
    levels: tuple[int, ...] = (1, 8, 32),
    progress: Progress = no_progress,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sweflow-bench-agent-") as tmp:
        work = Path(tmp)
        spec = SandboxSpec(layers=[rootfs, repo_layer(work / "layer")], workdir="/testbed")
        script = work / "script.json"
        script.write_text(json.dumps({"default": TURNS}))
        with scripted_endpoint(script, latency_s=latency_s) as (url, _proc):
            progress("warm-up")
            asyncio.run(_batch(url, spec, work / "warm", 2, 2))
            n = 5 if quick else 20
            progress(f"overhead: {n} rollouts one at a time, {latency_s * 1000:.0f} ms a call")
            serial, _ = asyncio.run(_batch(url, spec, work / "serial", n, 1))
            _check(serial)
            throughput = []
            for c in levels:
                count = c * (2 if quick else 4)
                progress(f"throughput: {count} rollouts, {c} at once")
                busy0, total0 = _cpu_busy()
                trajs, wall = asyncio.run(_batch(url, spec, work / f"c{c}", count, c))
                busy1, total1 = _cpu_busy()
                _check(trajs)
                ideal = c * 60 / (len(TURNS) * latency_s)
                rate = count / wall * 60
                throughput.append(
                    {
                        "concurrency": c,
                        "rollouts": count,
                        "wall_s": round(wall, 2),
                        "rollouts_per_min": round(rate, 1),
                        "ideal_per_min": round(ideal, 1),
                        "efficiency": round(rate / ideal, 3),
                        # of all cores, by every process (the fake server and others included)
                        "machine_cpu_busy": round((busy1 - busy0) / max(1, total1 - total0), 2),
                    }
                )
    steps = [s for t in serial for s in t.steps]
    return {
        "cores": os.cpu_count(),
        "model_latency_ms": latency_s * 1000,
        "steps_per_rollout": len(TURNS),
        "per_step": {
            # everything but the model's fixed latency: HTTP + JSON + loop + sandbox action
            **_summary([s.step_s - latency_s for s in steps], "non_model"),
            # the loop's own bookkeeping: the step less the model call and the sandbox action
            **_summary([s.overhead_s for s in steps], "agent_only"),
            **_summary(
                [s.exec_s for s in steps if s.actions[0].tool != "submit"], "sandbox_action"
            ),
            **_summary([s.model_s - latency_s for s in steps], "http_client"),
        },
        "per_rollout": {
            **_summary([t.sandbox_open_s for t in serial], "sandbox_open"),
            **_summary(
                [t.wall_s - sum(s.step_s for s in t.steps) for t in serial], "diff_and_setup"
            ),
        },
        "throughput": throughput,
        "target": "non-model time per step p50 <= 10 ms; near-linear throughput until CPU-bound",
    }
