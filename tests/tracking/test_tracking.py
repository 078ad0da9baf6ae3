"""Experiment tracking against the real trackers: an MLflow tracking server started here on
loopback (tests/tracking_servers.py), W&B in offline mode with its run folders read back.
Settings that cannot work are refused before any work, naming the tracker; the stages of one
pipeline run share one tracking run; verl's loggers are pointed at it.

The real SFT and RL runs that report to these trackers are tests/training/test_tracking_training.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tracking_servers import offline_wandb, wandb_config, wandb_history  # noqa: F401
from typer.testing import CliRunner

from sweflow.cli import app
from sweflow.errors import ConfigError
from sweflow.pipeline.config import PipelineConfigError, load_pipeline_config
from sweflow.pipeline.stages.common import StageContext, StageResult
from sweflow.pipeline.tracked import close_stage, report_stage
from sweflow.ports import free_port
from sweflow.tracking import TrackingConfig, open_tracking, tracking_problems
from sweflow.tracking.run import finish_run
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.verl_backend import overrides

ROOT = Path(__file__).resolve().parents[2]
DEMO_CONFIG = ROOT / "configs" / "demo.yaml"
runner = CliRunner()


def _said(argv: list[str]) -> str:
    result = runner.invoke(app, argv)
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.replace("│", " ").split())


def test_an_unreachable_tracking_uri_is_refused_before_training(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    data = tmp_path / "sft.jsonl"
    data.write_text("{}\n")
    out = tmp_path / "out"
    said = _said(
        ["--dry-run", "train", "sft", "--data", str(data), "-o", str(out)]
        + [
            "--mlflow",
            closed,
        ]
    )
    assert f"{closed} is not reachable" in said and "dry run" not in said
    assert not out.exists()  # nothing started
    said = _said(["pipeline", "config", str(DEMO_CONFIG), f"tracking.mlflow.tracking_uri={closed}"])
    assert f"tracking.mlflow.tracking_uri: {closed} is not reachable" in said
    said = _said(["--dry-run", "bench", "learn", "--quick", "--mlflow", closed])
    assert f"{closed} is not reachable" in said


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--mlflow", "127.0.0.1:5000"], "is no tracking URI"),
        (["--experiment", "e"], "--experiment needs --mlflow URI"),
        (["--wandb-offline"], "--wandb-entity and --wandb-offline need --wandb PROJECT"),
        (["--wandb", "a/b"], "W&B names take letters"),
        (["--wandb", "p"], "online needs an API key"),
    ],
)
def test_tracking_options_that_cannot_work_are_named(tmp_path, argv, named) -> None:
    data = tmp_path / "sft.jsonl"
    data.write_text("{}\n")
    said = _said(
        ["--dry-run", "train", "sft", "--data", str(data), "-o", str(tmp_path / "o")] + argv
    )
    assert named in said, said


def test_a_store_folder_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    uri = f"file:{blocker}/mlruns"
    problems = tracking_problems(TrackingConfig(mlflow={"tracking_uri": uri}))
    assert len(problems) == 1 and problems[0].startswith(f"tracking.mlflow.tracking_uri: {uri}: ")
    assert tracking_problems(TrackingConfig(mlflow={"tracking_uri": f"file:{tmp_path}/m"})) == []


def test_the_stages_of_a_pipeline_run_share_one_mlflow_run(mlflow_uri, tmp_path: Path) -> None:
    config = load_pipeline_config(
        DEMO_CONFIG,
        [f"tracking.mlflow.tracking_uri={mlflow_uri}", f"run_dir={tmp_path / 'run'}"],
        root=ROOT,
    )
    tracking = config.tracking.for_run("end-to-end [demo]", "flow-run-1")
    config = config.model_copy(update={"tracking": tracking})
    for stage, counts in (("build_envs", {"built": 2}), ("evaluate", {"resolved": 1})):
        ctx = StageContext(config)
        links = report_stage(ctx, StageResult(stage, "d", counts=counts, markdown="all went well"))
        close_stage(ctx)
    assert set(links) == {"mlflow"} and links["mlflow"].startswith(f"{mlflow_uri}/#/experiments/")
    assert finish_run(config.tracking, failed=False) == links

    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_uri)
    experiment = client.get_experiment_by_name("sweflow")
    runs = client.search_runs([experiment.experiment_id], "tags.`sweflow.run_key` = 'flow-run-1'")
    assert len(runs) == 1, "two stages of one pipeline run made two tracking runs"
    run = runs[0]
    assert run.info.run_name == "end-to-end [demo]" and run.info.status == "FINISHED"
    assert run.data.metrics == {"build_envs/built": 2.0, "evaluate/resolved": 1.0}
    reports = client.download_artifacts(run.info.run_id, "evaluate", str(tmp_path / "down"))
    assert "all went well" in (Path(reports) / "report.md").read_text()
    assert json.loads((Path(reports) / "rows.json").read_text()) == []


def test_wandb_offline_keeps_a_run_across_stages_in_its_folders(tmp_path: Path) -> None:
    config = TrackingConfig(wandb={"project": "sweflow", "mode": "offline"}, run_key="k")
    first = open_tracking(config, "demo", tmp_path)
    first.params("sft", {"learning_rate": 1e-4, "lora": {"rank": 8}})
    for step in (1, 2):
        first.metrics("sft", {"loss": 1.0 / step, "note": "text is no metric"}, step)
    sample = tmp_path / "sample.json"
    sample.write_text('{"messages": []}')
    first.files("sft", [sample], "samples")
    first.close()
    second = open_tracking(config, "demo", tmp_path)  # the next stage, as another process would
    second.metrics("rl", {"mean_reward": 0.5}, 1)
    second.finish()

    folders = sorted((tmp_path / "wandb").glob(f"offline-run-*-{second.wandb_id}"))
    assert len(folders) == 2 and first.wandb_id == second.wandb_id
    assert (
        folders[0] / "files" / "sft" / "samples" / "sample.json"
    ).read_text() == sample.read_text()
    rows = wandb_history(folders)
    assert [(r.get("sft/step"), r.get("sft/loss")) for r in rows if "sft/loss" in r] == [
        (1, 1.0),
        (2, 0.5),
    ]
    assert [r["rl/mean_reward"] for r in rows if "rl/mean_reward" in r] == [0.5]
    assert not any("sft/note" in r for r in rows)
    config_seen = wandb_config(folders)
    assert config_seen["sft.learning_rate"] == "0.0001" and config_seen["sft.lora.rank"] == "8"
    assert "wandb sync --id" in second.links()["wandb"]


def test_verl_reports_to_the_run_through_its_loggers(mlflow_uri, tmp_path: Path) -> None:
    config = TrackingConfig(
        mlflow={"tracking_uri": mlflow_uri, "experiment": "verl"},
        wandb={"project": "swe", "mode": "offline"},
        tensorboard=False,
        run_name="cookbook",
    )
    run = open_tracking(config, "rl", tmp_path)
    rl = RLConfig(backend="verl", algorithm="rloo", scale_advantages="none", rollouts_per_task=4)
    settings = overrides(
        rl, Path("p"), Path("t.parquet"), Path("l.yaml"), tmp_path / "w", tracking=run
    )
    assert "trainer.logger=[console,file,mlflow,wandb]" in settings
    assert "trainer.project_name=swe" in settings and "trainer.experiment_name=cookbook" in settings
    env = run.env()
    assert env["MLFLOW_RUN_ID"] == run.mlflow.run_id and env["MLFLOW_TRACKING_URI"] == mlflow_uri
    assert env["WANDB_RUN_ID"] == run.wandb_id and env["WANDB_MODE"] == "offline"
    run.finish()
    assert "trainer.logger=[console,tensorboard,file]" in overrides(
        rl, Path("p"), Path("t.parquet"), Path("l.yaml"), tmp_path / "w"
    )


def test_a_tracker_that_cannot_take_the_run_is_a_config_error(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PipelineConfigError, match="not reachable"):
        load_pipeline_config(DEMO_CONFIG, [f"tracking.mlflow.tracking_uri={closed}"], root=ROOT)
    with pytest.raises(PipelineConfigError, match="online needs an API key"):
        load_pipeline_config(DEMO_CONFIG, ["tracking.wandb.project=p"], root=ROOT)
    assert issubclass(PipelineConfigError, ConfigError)
