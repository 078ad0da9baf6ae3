"""The pipeline's stages run as the Prefect tasks run them, without Prefect: build, validate,
collect with the replay teacher on the train split, SFT of a real (two-layer) SmolLM2 and a GRPO
step on its sandboxed rollouts, on six demo tasks offline. (The Prefect side:
tests/pipeline/test_pipeline_prefect.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sweflow.pipeline.config import PipelineConfig
from sweflow.pipeline.registry import BY_NAME
from sweflow.pipeline.stages.agents import newest_model
from sweflow.pipeline.stages.common import (
    StageContext,
    StageError,
    load_tasks,
    split_tasks,
    stage_inputs,
)

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "data" / "demo" / "tasks.jsonl"
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def config(tmp_path_factory, wheelhouse: Path, tiny_smollm2: Path) -> PipelineConfig:
    rows = [json.loads(line) for line in DEMO.read_text().splitlines()]
    ids = [
        r["instance_id"]
        for repo in ("parse", "cachetools", "toolz")
        for r in [r for r in rows if r["repo"] == f"pypi/{repo}"][:2]
    ]
    return PipelineConfig(
        name="stages",
        run_dir=tmp_path_factory.mktemp("run"),
        dataset={"path": DEMO, "instances": ids},
        envs={"wheelhouse": wheelhouse},
        model={"source": str(tiny_smollm2), "name": "tiny"},
        split={"by": "repo", "eval": ["pypi/toolz"]},
        collect={"teacher": "replay", "limit": None},
        sft={
            "max_steps_per_epoch": 2,
            "learning_rate": 5e-4,
            "max_seq_len": 1024,
            "activation_checkpointing": False,
        },
        rl={
            "trl": {"rollout": "hf"},
            "steps": 1,
            "tasks_per_step": 2,
            "rollouts_per_task": 2,
            "max_tokens_per_turn": 64,
            "max_response_length": 384,
            "learning_rate": 1e-5,
        },
    )


def run(config: PipelineConfig, names: list[str]) -> dict[str, dict]:
    results: dict[str, dict] = {}
    progress: list[str] = []
    for name in names:
        stage = BY_NAME[name]
        upstream = {u: results[u] for u in (*stage.upstream, *stage.after) if u in results}
        ctx = StageContext(config, upstream, lambda what, done=0, total=0: progress.append(what))
        results[name] = stage.function()(ctx).to_dict()
    return results


@pytest.fixture(scope="module")
def results(config) -> dict[str, dict]:
    return run(config, ["build_envs", "validate_envs", "collect_trajectories", "sft", "rl"])


def test_collect_replays_the_train_split_only(config, results) -> None:
    split = json.loads((config.run_dir / "split.json").read_text())
    assert split["by"] == "repo" and split["eval_names"] == ["pypi/toolz"]
    assert len(split["train"]) == 4 and all("toolz" in i for i in split["eval"])
    collected = results["collect_trajectories"]
    counts, markdown = collected["counts"], collected["markdown"]
    assert counts["runs"] == 4 and counts["kept"] >= 3 and counts["kept"] + counts["skipped"] == 4
    # declined with the reason: no clue leads to a hunk, or the route is longer than max_steps
    why = r"(?:no clue leads to |the replay needs more than the agent's 10 steps)"
    skipped = set(re.findall(rf"^- skipped `([^`]+)`: {why}", markdown, re.MULTILINE))
    assert len(skipped) == counts["skipped"] and skipped <= set(split["train"]), markdown
    assert "Imitable fraction of the kept runs: 1.000" in markdown
    records = [json.loads(line) for line in Path(collected["outputs"]["openai"]).open()]
    assert {r["instance_id"] for r in records} == set(split["train"]) - skipped
    assert {(r["source"], r["tool_mode"]) for r in records} == {("replay", "text")}


def test_sft_trains_the_run_model_and_infer_would_serve_it(config, results) -> None:
    sft = results["sft"]
    model = Path(sft["outputs"]["model"])
    assert (model / "config.json").is_file() and Path(sft["outputs"]["loss_plot"]).is_file()
    kept = results["collect_trajectories"]["counts"]["kept"]
    assert sft["counts"]["examples"] >= kept and sft["counts"]["steps"] == 2  # windows, when split
    assert [row["step"] for row in sft["rows"]] == [1, 2]
    assert "torchtune's `full_finetune_single_device`" in sft["markdown"]
    assert newest_model({"sft": sft}) == model and newest_model({}) is None
    collected = results["collect_trajectories"]
    inputs = stage_inputs(config, "sft", [collected])
    assert inputs["base_model"] and inputs["upstream"] == [collected["digest"]]


def test_rl_starts_from_the_sft_model_and_infer_would_serve_its_result(config, results) -> None:
    rl, sft = results["rl"], results["sft"]
    model = Path(rl["outputs"]["model"])
    assert (model / "config.json").is_file() and Path(rl["outputs"]["curves"]).is_file()
    assert rl["counts"] == {"tasks": 4, "steps": 1, "infra_failures": 0}
    assert [row["step"] for row in rl["rows"]] == [1]
    assert f"Trained `{sft['outputs']['model']}` with GRPO (trl)" in rl["markdown"]
    assert newest_model({"sft": sft, "rl": rl}) == model
    episodes = list((config.run_dir / "rl" / "rollouts" / "step-0001").glob("*.json"))
    assert len(episodes) == 4
    trained_on = {json.loads(path.read_text())["instance_id"] for path in episodes}
    assert not any("toolz" in i for i in trained_on)  # the train split only
    inputs = stage_inputs(config, "rl", [results["validate_envs"], sft])
    assert sft["digest"] in inputs["upstream"] and "policy" not in inputs


def test_a_split_naming_nothing_is_refused(config, results) -> None:
    rows_path = Path(results["validate_envs"]["outputs"]["dataset"])
    rows = load_tasks(config, rows_path)
    split = {"by": "repo", "eval": ["pypi/nope"]}
    wrong = PipelineConfig(**{**config.model_dump(), "split": split})
    with pytest.raises(StageError, match=r"split.eval names repositories .*'pypi/nope'"):
        split_tasks(wrong, rows)


def test_the_report_puts_the_base_model_beside_the_trained_one(config, results, tmp_path) -> None:
    """The trained model's held-out runs (here a scripted endpoint that reads the first eval
    task's gold file and submits) beside the base model's (the same endpoint, measured by the
    stage and cached), with the run's other figures; a second report reads the cache."""
    import asyncio

    from sweflow.agent import Batch, ModelClient, ModelConfig
    from sweflow.agent.config import AgentConfig
    from sweflow.agent.runs import jobs as agent_jobs
    from sweflow.envcache.builder import instance_sandbox_spec
    from sweflow.envcache.store import LayerStore
    from sweflow.pipeline.stages.agents import split_rows
    from sweflow.pipeline.stages.report import baseline_key, measured_baselines, report
    from sweflow.testing.scripted_model import scripted_endpoint

    ctx = StageContext(config, {"validate_envs": results["validate_envs"]})
    rows = split_rows(ctx, "eval", config.infer.limit)
    gold = rows[0].patch.split(" b/", 1)[1].split("\n", 1)[0]
    turns = [
        {"content": f"THOUGHT: read it.\n\n```bash\ncat {gold}\n```"},
        {"content": "THOUGHT: done.\n\n```bash\nsubmit\n```"},
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": [], "default": turns}))
    # right_file counts a view that showed a gold hunk's lines: the whole file, not cut short
    whole_file = {"tool_mode": "text", "max_observation_chars": 200_000}
    cache = tmp_path / "baselines.json"  # as the demo's committed file: read, never written
    cache.write_text("{}\n")
    with scripted_endpoint(script) as (url, _):
        scripted = config.model_copy(
            update={
                "model": config.model.model_copy(update={"url": url, "name": "scripted"}),
                "agent": config.agent.model_copy(update=whole_file),
                "report": config.report.model_copy(update={"baseline_cache": cache}),
            }
        )
        store = LayerStore(scripted.store())

        async def trained_runs() -> None:  # what infer would leave, from the same script
            client = ModelClient(ModelConfig(base_url=url, model="scripted"))
            batch = Batch(
                client=client,
                agent=AgentConfig(**whole_file),
                out_dir=scripted.run_dir / "infer",
                max_open_sandboxes=2,
                spec_for=lambda r: instance_sandbox_spec(store, r.instance_id),
            )
            await agent_jobs.infer(rows, batch, "scripted")
            await client.close()

        asyncio.run(trained_runs())
        graded = {"rows": [{"instance": r.instance_id, "resolved": False} for r in rows]}
        upstream = {**results, "evaluate": graded}
        first = report(StageContext(scripted, upstream))
    assert "base" in first.markdown or first.rows[0]["model"] == "trained"
    summary = json.loads(Path(first.outputs["summary"]).read_text())
    trained, base = summary["heldout"]["trained"], summary["heldout"]["base"]
    assert trained["runs"] == base["runs"] == len(rows)
    right = sum(r.patch.split(" b/", 1)[1].split("\n", 1)[0] == gold for r in rows)
    assert trained["right_file"] == base["right_file"] == right > 0
    # both submit without a change: an empty submission is not a submitted patch
    assert trained["submitted_rate"] == base["submitted_rate"] == 0.0
    assert summary["sft"] and summary["environments"]["valid"] == 6
    text = Path(first.outputs["text"]).read_text()
    assert "SFT loss:" in text and "right file" in text and "golden trajectories:" in text
    assert cache.read_text() == "{}\n"  # the given cache is left as it was
    assert list(json.loads(measured_baselines(scripted).read_text()).values()) == [base]
    assert "base measured in this run" in text
    page = Path(first.outputs["inspector"])  # every agent run of the run folder, linked
    assert page == scripted.run_dir / "report" / "inspector.html" and page.is_file()
    assert f"[Trajectory inspector]({page.as_uri()})" in first.markdown
    again = report(StageContext(scripted, upstream))  # the endpoint is gone: the cache answers
    assert json.loads(Path(again.outputs["summary"]).read_text())["heldout"]["base"] == base
    cache.write_text(measured_baselines(scripted).read_text())  # the entry kept, as committed
    measured_baselines(scripted).unlink()
    third = report(StageContext(scripted, upstream))
    assert json.loads(Path(third.outputs["summary"]).read_text())["heldout"]["base"] == base
    # a task whose statement was rewritten is another task: its base figures are measured again
    restated = rows[0].model_copy(update={"problem_statement": rows[0].problem_statement + "."})
    assert baseline_key(scripted, [restated, *rows[1:]]) != baseline_key(scripted, rows)


def test_the_demos_committed_base_figures_are_found_by_its_key(smollm2: Path, tmp_path) -> None:
    """configs/demo.yaml's report reads data/demo/baselines.json: the key its report computes
    for the held-out tasks from a fresh checkout (the model made anew, so by content) is there,
    so the demo measures no base model (a stale key cost the demo 446 s and rewrote the file)."""
    from sweflow.pipeline.config import load_pipeline_config
    from sweflow.pipeline.stages.report import baseline_key

    config = load_pipeline_config(REPO / "configs" / "demo.yaml", root=REPO)
    config = config.model_copy(update={"run_dir": tmp_path / "run"})
    models = config.run_dir / "models"
    models.mkdir(parents=True)
    (models / config.model.source).symlink_to(smollm2)  # the folder the run would make
    rows = split_tasks(config, load_tasks(config, config.dataset.path))["eval"]
    key = baseline_key(config, rows[: config.infer.limit])
    committed = json.loads(config.report.baseline_cache.read_text())
    assert key in committed, f"{key} not in {config.report.baseline_cache}: {sorted(committed)}"
