"""rl.validation: held-out tasks measured with the current policy during RL (pass@1, unbiased
pass@k), in metrics.jsonl, TensorBoard and rl.png. The trl backend for real on the CPU: TRL
updates the RL tests' policy and, after each update, that policy plays the validation tasks in
real sandboxes, graded by the real grader. (verl's side: tests/training/test_rl_verl.py.)"""

from __future__ import annotations

import asyncio
import json
from math import comb
from pathlib import Path

import pytest
from pydantic import ValidationError

from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.generation import LocalGenerator
from sweflow.training.rl.result import read_records
from sweflow.training.rl.trainer import train
from sweflow.training.rl.validation import (
    ValidationSettings,
    ks,
    measure,
    pick,
    read,
)


def test_a_measurement_leaves_infrastructure_failures_unscored() -> None:
    assert ks(1) == [1] and ks(4) == [1, 2, 4] and ks(6) == [1, 2, 4, 6] and ks(8) == [1, 2, 4, 8]
    outcomes = [("a", True), ("a", None), ("a", False), ("b", False), ("b", False), ("b", True)]
    record = measure(3, outcomes, samples=3, seconds=1.23456)
    assert (record.tasks, record.episodes, record.infra_failures) == (2, 6, 1)
    # a: 1 of 2 scored; b: 1 of 3. pass@2 over both; pass@3 over b alone (a has 2 scored)
    assert record.pass_at == {
        "1": round((1 / 2 + 1 / 3) / 2, 6),
        "2": round((1.0 + (1 - comb(2, 2) / comb(3, 2))) / 2, 6),
        "3": 1.0,
    }
    assert record.resolve_rate == record.pass_at["1"] and record.seconds == 1.235


def test_validation_settings_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValidationError, match="greedy episodes of a task are all alike"):
        ValidationSettings(samples=4)
    with pytest.raises(ValidationError, match="empty list"):
        ValidationSettings(tasks=[])
    settings = ValidationSettings(every=3)
    assert [s for s in range(1, 8) if settings.due(s, last=7)] == [3, 6, 7]  # verl's test_freq


def test_validation_tasks_are_picked_by_split_or_id() -> None:
    from sweflow.envcache.dataset import Dataset

    rows = Dataset.load(Path(__file__).resolve().parents[2] / "data/demo/tasks.jsonl").rows
    train, held = rows[:3], rows[3:6]
    assert pick(ValidationSettings(tasks="train", limit=2), train, rows) == train[:2]
    assert pick(ValidationSettings(), train, rows, eval_split=held) == held
    with pytest.raises(ValueError, match="there is no eval split here"):
        pick(ValidationSettings(), train, rows)
    ids = [rows[5].instance_id, rows[4].instance_id]
    assert pick(ValidationSettings(tasks=ids), train, rows) == [rows[5], rows[4]]
    with pytest.raises(ValueError, match="not in the dataset: nope"):
        pick(ValidationSettings(tasks=["nope"]), train, rows)


def test_greedy_validation_generates_the_same_reply_twice(tiny_smollm2) -> None:
    """Temperature 0 is greedy decoding (not a division by zero), with log-probabilities."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_smollm2))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_smollm2), dtype=torch.float32)
    generator = LocalGenerator(model, tokenizer, temperature=1.5)
    ids = tokenizer("def add(a, b):")["input_ids"]
    first, logprobs = asyncio.run(generator(ids, 12, temperature=0.0))
    again, _ = asyncio.run(generator(ids, 12, temperature=0.0))
    assert first == again and len(logprobs) == len(first) and all(lp <= 0 for lp in logprobs)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the RL policy's fixture (env builds, replays, an SFT) included
def test_trl_measures_held_out_tasks_with_the_current_policy(
    rl_policy, rl_env, demo_replays, tmp_path
) -> None:
    data, store = demo_replays.data, demo_replays.store
    tasks, held = data.rows[:2], data.rows[2:]
    validation = {"tasks": [t.instance_id for t in held], "every": 1, "samples": 2}
    rl = RLConfig(
        steps=2,
        tasks_per_step=1,
        rollouts_per_task=2,
        learning_rate=1e-4,
        temperature=1.5,
        trl={"rollout": "hf"},
        max_tokens_per_turn=96,
        max_response_length=768,
        validation={**validation, "temperature": 1.5, "before_train": True},
    )
    where = {"store": store, "specs": data.specs, "agent": rl_env.agent}
    result = train(tasks, rl_policy, tmp_path, tmp_path / "model", rl, **where, val_tasks=held)

    rows = read(tmp_path / "metrics.jsonl")
    assert [row["step"] for row in rows] == [0, 1, 2]  # before training, after each update
    assert result.validation == rows
    assert [r["step"] for r in read_records(tmp_path / "metrics.jsonl")] == [1, 2]
    for row in rows:
        assert row["episodes"] == 2 * len(held) and row["seconds"] > 0
        assert set(row["pass_at"]) == {"1", "2"} or row["infra_failures"]
        # the figures are the saved episodes' own: every validation episode graded for real
        saved = sorted((tmp_path / "validation" / f"step-{row['step']:04d}").glob("*.json"))
        trajectories = [json.loads(p.read_text()) for p in saved]
        assert len(trajectories) == row["episodes"]
        assert all(t["reward"] and t["reward"]["reason"] for t in trajectories)
        resolved = [t["reward"]["resolved"] for t in trajectories]
        assert row["pass_at"]["1"] == round(sum(resolved) / len(resolved), 6)
        assert all(t["instance_id"] in validation["tasks"] for t in trajectories)
    # the policy trained on the train tasks only; TensorBoard has the validation's scalars
    trained = {p.name.split("-", 1)[1] for p in (tmp_path / "rollouts").glob("step-*/*.json")}
    assert not trained & {f"{t}.json" for t in validation["tasks"]}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard" / "sweflow")).Reload()
    assert [e.step for e in events.Scalars("val/pass@1")] == [0, 1, 2]
    assert (tmp_path / "rl.png").stat().st_size > 0
