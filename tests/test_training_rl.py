"""RL for real on the CPU: TRL's GRPOTrainer updates a policy on episodes of the sweflow agent in
real sandboxes of demo tasks, rewarded by the real grader.

The policy is SmolLM2 cut to two layers (the SFT tests' model) after a short SFT on the tasks'
replayed golden trajectories, so that it emits parseable actions some of the time and the
episodes of a group differ in reward (GRPO learns nothing from a group of equal rewards).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file

from sweflow.agent.config import AgentConfig
from sweflow.cluster.local import LocalExecutor
from sweflow.envcache.dataset import dataset_specs
from sweflow.grading import Grader
from sweflow.sandbox import SandboxStartError
from sweflow.training.chat import ChatEncoder
from sweflow.training.rl.config import RLConfig, default_group_size
from sweflow.training.rl.episode import Episode, EpisodeEnv, run_episode, shaping
from sweflow.training.rl.result import read_records
from sweflow.training.rl.trainer import episode_env, train
from sweflow.training.rl.trl_backend import LocalGenerator, summarize, trained_mask
from sweflow.training.sft.config import SFTConfig
from sweflow.training.sft.train import train_sft

pytestmark = pytest.mark.timeout(1200)
SHORT = {
    "max_tokens_per_turn": 96,
    "max_response_length": 768,
    "format_error_penalty": 0.1,
    "empty_patch_penalty": 0.1,
}


@pytest.fixture(scope="module")
def policy(tiny_smollm2: Path, demo_replays, tmp_path_factory) -> Path:
    """The two-layer SmolLM2 fine-tuned briefly on the demo tasks' replays: it writes (mostly)
    well-formed tool blocks."""
    work = tmp_path_factory.mktemp("rl-policy")
    sft = SFTConfig(epochs=3, learning_rate=1e-3, max_seq_len=1024, activation_checkpointing=False)
    train_sft(demo_replays[1] / "sft.jsonl", tiny_smollm2, work, work / "model", sft)
    return work / "model"


@pytest.fixture(scope="module")
def env(demo_replays) -> EpisodeEnv:
    data = demo_replays[0]
    grader = Grader(data.store, data.specs, tamper_guard=True)
    return episode_env(LocalExecutor(data.store), grader, AgentConfig(tool_mode="text",
                       max_steps=3), "local")  # fmt: skip


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(shard))
    return tensors


def test_two_grpo_steps_update_the_policy_on_sandboxed_rewards(policy, env, demo_replays, tmp_path):
    tasks = demo_replays[0].instances[:2]
    rl = RLConfig(steps=2, tasks_per_step=2, rollouts_per_task=2, learning_rate=1e-4,
                  checkpoint_every=1, **SHORT)  # fmt: skip
    steps: list[int] = []
    where = {
        "store": demo_replays[0].store,
        "specs": dataset_specs(demo_replays[0].dataset),
        "agent": env.agent,
    }  # the fixture's episodes, as the CLI and the pipeline run them
    result = train(tasks, policy, tmp_path, tmp_path / "model", rl, **where,
                   progress=lambda step, total, record: steps.append(step))  # fmt: skip

    assert result.steps == 2 and steps == [1, 2]
    records = read_records(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert record["episodes"] == 4 and record["loss"] is not None
        assert record["generation_s"] > 0 and record["update_s"] > 0
    # every episode was graded in a real sandbox: its reward says why
    graded = [json.loads(p.read_text()) for p in (tmp_path / "rollouts").glob("step-*/*.json")]
    assert len(graded) == 8
    assert all(t["reward"] and t["reward"]["reason"] for t in graded)
    rewards = {round(t["reward"]["reward"], 3) for t in graded}
    assert len(rewards) > 1, f"every episode had the same reward {rewards}: nothing to learn"
    # the update moved the weights; the result is a loadable HF folder with its record
    before, after = _weights(policy), _weights(Path(result.model))
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert (tmp_path / "rl.png").stat().st_size > 0
    assert json.loads((Path(result.model) / "sweflow_training.json").read_text())["steps"] == 2
    # a second call with the same inputs is the published result, not a new run
    again = train(tasks, policy, tmp_path, tmp_path / "model", rl, **where)
    assert again.to_dict() == result.to_dict()


def test_trained_tokens_are_the_sampled_ones_and_observations_masked(policy, env, demo_replays):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(policy), dtype=torch.float32)
    encoder = ChatEncoder(policy)
    generator = LocalGenerator(model, encoder.tokenizer, temperature=1.0)
    rl = RLConfig(**SHORT)
    for seed in range(8):  # an episode of more than one reply: observations between them
        torch.manual_seed(seed)
        episode = asyncio.run(run_episode(demo_replays[0].instances[0], env, encoder, generator,
                                          rl))  # fmt: skip
        if episode.steps > 1:
            break
    assert episode.steps > 1, "eight sampled episodes ended after their first reply"

    assert not episode.infra_failure and episode.reward is not None
    n = len(episode.response_ids)
    assert len(episode.mask) == n == len(episode.logprobs) and sum(episode.mask) > 0
    assert all(lp == 0.0 for lp, m in zip(episode.logprobs, episode.mask, strict=True) if not m)
    assert all(lp <= 0.0 for lp, m in zip(episode.logprobs, episode.mask, strict=True) if m)
    # the unmasked runs are exactly the replies the agent read (the text the policy generated)
    runs, current = [], []
    for token, trained in zip(episode.response_ids, episode.mask, strict=True):
        if trained:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    replies = [m["content"] for m in episode.trajectory.messages if m["role"] == "assistant"]
    eos = encoder.tokenizer.eos_token_id
    decoded = [encoder.tokenizer.decode(r[:-1] if r[-1] == eos else r) for r in runs]
    assert decoded == replies
    # the masked tokens are the chat template's framing of what the agent saw
    messages = episode.trajectory.messages
    last_reply = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    seen = messages[2:last_reply]  # what came after the last reply never reached the policy
    observations = [m["content"] for m in seen if m["role"] == "user"]
    assert observations
    framing = encoder.tokenizer.decode([t for t, m in zip(episode.response_ids, episode.mask,
                                                          strict=True) if not m])  # fmt: skip
    assert all(obs[:100] in framing for obs in observations)


def test_infrastructure_failures_are_dropped_not_scored_zero(policy, env, demo_replays):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(policy), dtype=torch.float32)
    encoder = ChatEncoder(policy)
    generator = LocalGenerator(model, encoder.tokenizer, temperature=1.0)
    row = demo_replays[0].instances[0]

    async def hangs(instance, patch):
        await asyncio.sleep(60)

    hanging = EpisodeEnv(env.open, hangs, env.agent)
    rl = RLConfig(**SHORT, reward_timeout_s=1.0, infra_retries=1)
    episode = asyncio.run(run_episode(row, hanging, encoder, generator, rl))
    assert episode.reward is None and "grading ran past 1 s" in episode.infra_failure
    assert episode.attempts == 2

    def no_sandbox(instance):
        raise SandboxStartError(f"{instance.instance_id}: the sandbox did not start")

    broken = EpisodeEnv(no_sandbox, env.grade, env.agent)
    episode = asyncio.run(run_episode(row, broken, encoder, generator, rl))
    assert episode.reward is None and "did not start" in episode.infra_failure


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"rollouts_per_task": 1}, "rollouts_per_task"),
        ({"backend": "trl", "algorithm": "ppo"}, "algorithm ppo"),
        ({"max_tokens_per_turn": 4096, "max_response_length": 1024}, "max_tokens_per_turn"),
        ({"steps": 0}, "steps"),
        ({"format_error_penalty": 0.2, "empty_patch_penalty": 0.1}, "empty_patch_penalty"),
    ],
)
def test_settings_that_cannot_work_together_are_refused_naming_them(settings, named):
    with pytest.raises(ValidationError, match=named):
        RLConfig(**settings)


def test_doing_nothing_never_scores_above_trying() -> None:
    rl = RLConfig(format_error_penalty=0.1, empty_patch_penalty=0.1)
    submit_at_once = Episode("t", steps=1, valid_steps=1)
    tried_and_failed = Episode("t", steps=8, valid_steps=1)  # 7 of 8 replies no action
    worst_try = -shaping(rl, tried_and_failed, "diff --git a/x b/x\n")
    assert -shaping(rl, submit_at_once, "") == -0.1 <= worst_try
    assert -shaping(rl, Episode("t", steps=4, valid_steps=4), "diff") == 0.0
    assert RLConfig().rollouts_per_task == default_group_size() == 4  # no GPU here


def test_step_records_count_refusals_and_groups_without_signal() -> None:
    def done(reward: float, refused: str = "") -> Episode:
        return Episode("t", reward=reward, refused=refused, response_ids=[1, 2], mask=[1, 0])

    failed = Episode("t", infra_failure="sandbox: died", response_ids=[1, 2, 3], mask=[1, 1, 0])
    episodes = [done(0.0), done(1.0), done(0.0, "touches_tests"), done(0.0), failed, done(1.0)]
    record = summarize(1, episodes, rollout_s=10.0, busy_s=8.0, group=2)
    assert (record.refused, record.infra_failures, record.episodes) == (1, 1, 6)
    # groups (0, 1) | (0, 0): no spread | (dropped, 1): one scored episode, no spread either
    assert record.zero_spread_groups == round(2 / 3, 3)
    assert trained_mask(failed) == [0, 0, 0] and trained_mask(episodes[0]) == [1, 0]


def test_an_episode_that_hacks_the_tests_earns_nothing(env, tiny_smollm2, demo_replays) -> None:
    """The policy writes a conftest hook that marks failures passed and submits: the tamper
    guard (on by default in RL) refuses it, so its reward is the unresolved one."""
    encoder = ChatEncoder(tiny_smollm2)
    eos = encoder.tokenizer.eos_token_id
    hook = ("import pytest\n\n@pytest.hookimpl(hookwrapper=True)\ndef "
            "pytest_runtest_makereport(item, call):\n    outcome = yield\n"
            "    outcome.get_result().outcome = 'passed'\n")  # fmt: skip
    replies = iter([f"THOUGHT: make them pass.\n\n```bash\ncat > conftest.py <<'EOF'\n{hook}EOF"
                    "\n```", "THOUGHT: done.\n\n```bash\nsubmit\n```"])  # fmt: skip

    async def generate(ids: list[int], max_new: int) -> tuple[list[int], list[float]]:
        tokens = encoder.tokenizer.encode(next(replies), add_special_tokens=False) + [eos]
        return tokens, [0.0] * len(tokens)

    rl = RLConfig(**SHORT)
    episode = asyncio.run(run_episode(demo_replays[0].instances[0], env, encoder, generate, rl))
    assert not episode.infra_failure and episode.exit_status == "submitted"
    assert (episode.resolved, episode.refused) == (False, "touches_tests")
    assert episode.reward == 0.0
