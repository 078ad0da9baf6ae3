"""A real (tiny) SFT run and a real GRPO step report to one tracking run, as the pipeline's sft
and rl stages do: a real MLflow server on loopback (read back through MLflow's client) and W&B
offline (its run folders read back). The SFT's steps come from torchtune's own loggers in the
recipe's process, the RL step's from sweflow's records and from TRL's ``report_to``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_training_rl import SHORT
from tracking_servers import wandb_config, wandb_history, wandb_offline

from sweflow.tracking import TrackingConfig, open_tracking
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.trainer import train
from sweflow.training.sft.config import SFTConfig
from sweflow.training.sft.train import train_sft

# the fixtures (replays built in sandboxes, the RL policy fine-tuned) take most of it
# a real SFT run and a real GRPO step: the slow tier (CI runs it when time allows)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def trained(mlflow_uri, rl_policy, rl_env, demo_replays, tiny_smollm2, tmp_path_factory):
    """Two SFT steps, then one GRPO step (one task, two episodes), in one tracking run."""
    mp = pytest.MonkeyPatch()
    wandb_offline(tmp_path_factory.mktemp("wandb-home"), mp)
    work = tmp_path_factory.mktemp("tracked")
    config = TrackingConfig(
        mlflow={"tracking_uri": mlflow_uri, "experiment": "training"},
        wandb={"project": "sweflow", "mode": "offline"},
        run_name="sft then rl",
        run_key="training-1",
    )
    run = open_tracking(config, "unused", work)
    sft = train_sft(
        demo_replays.collected / "sft.jsonl",
        tiny_smollm2,
        work / "sft",
        work / "sft" / "model",
        SFTConfig(
            max_seq_len=1024,
            learning_rate=5e-4,
            activation_checkpointing=False,
            max_steps_per_epoch=2,
        ),
        tracking=run,
    )
    rl = train(
        demo_replays.data.rows[:1],
        rl_policy,
        work / "rl",
        work / "rl" / "model",
        RLConfig(steps=1, tasks_per_step=1, rollouts_per_task=2, checkpoint_every=1, **SHORT),
        store=demo_replays.store,
        specs=demo_replays.data.specs,
        agent=rl_env.agent,
        tracking=run,
    )
    run.finish()
    yield run, sft, rl, work
    mp.undo()


def test_mlflow_holds_the_stages_params_steps_and_artifacts(trained, mlflow_uri, tmp_path):
    from mlflow.tracking import MlflowClient

    run, sft, rl, _ = trained
    client = MlflowClient(mlflow_uri)
    found = client.get_run(run.mlflow.run_id)
    assert found.info.run_name == "sft then rl" and found.info.status == "FINISHED"
    params = found.data.params
    assert params["sft.learning_rate"] == "0.0005" and params["rl.steps"] == "1"
    assert params["rl.policy"].endswith("model") and params["sft.max_steps_per_epoch"] == "2"
    assert "per_device_train_batch_size" in params  # TRL's arguments, from its report_to

    def steps(name: str) -> list[int]:
        return [m.step for m in client.get_metric_history(run.mlflow.run_id, name)]

    # each SFT step from torchtune's MLFlowLogger in the recipe, and the summary at the end
    assert steps("sft/loss") == list(range(1, sft.steps + 1)) and sft.steps == 2
    assert steps("sft/final_loss") == [2] and "sft/heldout_loss_before" not in found.data.metrics
    assert steps("rl/mean_reward") == [1] and steps("rl/episodes") == [1]
    assert steps("loss") == [1]  # TRL's own loss, through transformers' MLflowCallback
    assert steps("rl/reward_first_quarter") == [1]

    down = Path(client.download_artifacts(run.mlflow.run_id, "", str(tmp_path)))
    assert (down / "sft" / "recipe.yaml").read_text().startswith("# full_finetune_single_device")
    assert (down / "sft" / "loss.png").read_bytes().startswith(b"\x89PNG")
    samples = (down / "sft" / "samples" / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 3 and all("messages" in json.loads(line) for line in samples)
    manifest = json.loads((down / "sft" / "model-manifest.json").read_text())
    assert manifest["path"] == str(Path(sft.model).resolve())
    weights = [name for name in manifest["files"] if name.endswith(".safetensors")]
    assert weights and manifest["bytes"] > 10_000_000
    assert not list((down / "sft" / "model").glob("*.safetensors"))  # a manifest, no copy
    assert json.loads((down / "sft" / "model" / "config.json").read_text())["num_hidden_layers"]
    episodes = sorted((down / "rl" / "samples" / "step-0001").glob("*.json"))
    assert len(episodes) == 2 and all(json.loads(p.read_text())["reward"] for p in episodes)
    assert (down / "rl" / "rl.png").is_file()
    rl_manifest = json.loads((down / "rl" / "model-manifest.json").read_text())
    assert rl_manifest["path"] == str(Path(rl.model).resolve())
    assert found.data.tags["rl.model"] == rl_manifest["path"]


def test_wandb_offline_folders_hold_the_same_run(trained):
    run, sft, _, work = trained
    folders = sorted((work / "wandb").glob(f"offline-run-*-{run.wandb_id}"))
    assert len(folders) >= 3  # this process's parts, and the recipe's
    rows = wandb_history(folders)
    losses = [r["sft/loss"] for r in rows if "sft/loss" in r and "global_step" in r]
    assert len(losses) == sft.steps  # torchtune's WandBLogger, in the recipe's process
    assert [r["rl/step"] for r in rows if "rl/mean_reward" in r] == [1]
    assert any("train/loss" in r for r in rows)  # TRL's, through transformers' WandbCallback
    config = wandb_config(folders)
    assert config["sft.learning_rate"] == "0.0005" and config["rl.rollouts_per_task"] == "2"
    files = {p.relative_to(f / "files").as_posix() for f in folders for p in f.rglob("files/**/*")}
    assert {"sft/recipe.yaml", "sft/model-manifest.json", "rl/model-manifest.json"} <= files
    assert any(name.startswith("rl/samples/step-0001/") for name in files)
