"""The registries that make a new stage, backend or tool one module plus one registration line:
everything that derives from them must follow, and what cannot derive (the static deployments
file) must list every registered stage."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from sweflow.agent.actions import FormatError, from_tool_calls
from sweflow.agent.config import AgentConfig
from sweflow.agent.templates import text_instructions, tools_instructions
from sweflow.agent.tools import TOOL_SPECS, TOOLS, TOOLS_BY_NAME, Tool
from sweflow.cli import app
from sweflow.cluster.base import Node
from sweflow.cluster.executors import EXECUTORS, NOTIFYING, make_executor
from sweflow.cluster.local import LocalExecutor
from sweflow.envcache.builder import instance_sandbox_spec
from sweflow.envcache.dataset import Dataset
from sweflow.envcache.store import LayerStore
from sweflow.errors import ConfigError, InfrastructureError, is_infrastructure
from sweflow.grading import Grader
from sweflow.grading.evaluate import evaluate
from sweflow.grading.predictions import gold_predictions
from sweflow.pipeline.config import (
    STAGE_NAMES,
    PipelineConfig,
    PipelineConfigError,
    load_pipeline_config,
)
from sweflow.pipeline.registry import STAGES
from sweflow.pipeline.stages.common import make_executor as make_stage_executor
from sweflow.sandbox import (
    BACKENDS,
    SandboxConfigError,
    SandboxCrashError,
    SandboxStartError,
    backend_class,
    open_sandbox,
)
from sweflow.sandbox.base import Sandbox
from sweflow.sandbox.local import LocalSandbox
from sweflow.training.rl.backend import OnRLStep, RLBackend, RLRun, rl_backend
from sweflow.training.rl.backends import RL_BACKENDS, RLBackendError
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.result import RLResult
from sweflow.training.rl.trainer import train

ROOT = Path(__file__).resolve().parents[2]
DEMO_CONFIG = ROOT / "configs" / "demo.yaml"


# -- pipeline stages -------------------------------------------------------------------------------
def test_every_stage_has_its_section_task_flow_and_deployment() -> None:
    from flows import stage_flows
    from tasks import stage_tasks

    fields = PipelineConfig.model_fields
    deployments = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    entrypoints = {d["entrypoint"] for d in deployments["deployments"]}
    assert "flows/end_to_end.py:end_to_end" in entrypoints
    for stage in STAGES:
        assert callable(stage.function()), stage.run
        assert stage.source_file().is_file()
        if stage.section is not None:
            assert fields[stage.key].annotation is stage.section, stage.name
        for name in stage.reads:
            assert name in fields, (stage.name, name)
        earlier = set(STAGE_NAMES[: STAGE_NAMES.index(stage.name)])
        assert {*stage.upstream, *stage.after} <= earlier, stage.name
        assert stage.name in stage_tasks.TASKS
        assert getattr(stage_flows, stage.name).name == stage.flow_name
        assert f"flows/stage_flows.py:{stage.name}" in entrypoints, (
            f"deployments/prefect.yaml has no deployment for the stage {stage.name}"
        )
    assert len(entrypoints) == len(STAGES) + 1


def test_needed_and_forced_follow_the_declared_upstream() -> None:
    config = load_pipeline_config(DEMO_CONFIG)
    chain = [
        "build_envs",
        "validate_envs",
        "collect_trajectories",
        "sft",
        "rl",
        "infer",
        "evaluate",
    ]
    assert config.needed(["evaluate"]) == chain  # infer serves the run's fine-tuned model
    no_training = config.model_copy(update={"stages": ["build_envs", "infer", "evaluate"]})
    assert no_training.needed(["evaluate"]) == ["build_envs", "validate_envs", "infer", "evaluate"]
    forced = config.model_copy(update={"force": ["validate_envs"]}).forced()
    assert forced == {*chain[1:], "report"}  # the report reads every stage
    assert config.model_copy(update={"force": ["sft"]}).forced() == {*chain[3:], "report"}
    assert config.model_copy(update={"force": ["evaluate"]}).forced() == {"evaluate", "report"}


def test_dotted_overrides_reach_the_embedded_library_models(tmp_path: Path) -> None:
    config = load_pipeline_config(
        DEMO_CONFIG,
        [
            "agent.max_steps=12",
            "agent.command_timeout_s=30",
            "model.temperature=0.7",
            "eval.run_id=again",
            "dataset.instances=[a, b]",
            "sandbox.backend=docker",
        ],
    )
    agent = config.agent.agent_config("text")
    assert (agent.max_steps, agent.command_timeout_s, agent.tool_mode) == (12, 30.0, "text")
    assert config.model.temperature == 0.7 and config.eval.run_id == "again"
    assert config.dataset.instances == ["a", "b"] and config.sandbox.backend == "docker"
    for bad, named in (
        (["agent.max_stepz=3"], "agent.max_stepz"),
        (["agent.max_steps=0"], "agent.max_steps"),
        (["sandbox.backend=lcoal"], "unknown sandbox backend 'lcoal'"),
        (["agent"], "expected dotted.key=value"),
        (["name.x=1"], "name is not a section"),
    ):
        with pytest.raises(PipelineConfigError, match=named):
            load_pipeline_config(DEMO_CONFIG, bad)


def test_the_config_form_lists_the_backends() -> None:
    schema = PipelineConfig.model_json_schema()
    backend = schema["$defs"]["SandboxSection"]["properties"]["backend"]
    assert backend["examples"] == list(BACKENDS)


# -- sandbox backends ------------------------------------------------------------------------------
def test_backends_resolve_by_name_or_dotted_path() -> None:
    assert backend_class("local") is LocalSandbox
    assert backend_class("sweflow.sandbox.local.LocalSandbox") is LocalSandbox
    assert backend_class("sweflow.sandbox.local:LocalSandbox") is LocalSandbox
    for name in BACKENDS:
        assert issubclass(backend_class(name), Sandbox)
    with pytest.raises(SandboxConfigError, match="unknown sandbox backend 'lcoal'"):
        backend_class("lcoal")
    with pytest.raises(SandboxConfigError, match="cannot be imported"):
        backend_class("sweflow.no_such_module.Sandbox")
    with pytest.raises(SandboxConfigError, match="not a Sandbox class"):
        backend_class("pathlib.Path")


def test_cli_refuses_an_unknown_backend_before_any_work() -> None:
    result = CliRunner().invoke(app, ["sandbox", "run", "-b", "lcoal", "true"])
    assert result.exit_code == 2
    assert "unknown sandbox backend 'lcoal'" in result.output
    help_text = CliRunner().invoke(app, ["sandbox", "run", "--help"], env={"COLUMNS": "200"}).output
    assert " | ".join(BACKENDS) in help_text


def test_errors_say_whether_to_retry() -> None:
    assert is_infrastructure(SandboxStartError("no daemon"))
    assert is_infrastructure(SandboxCrashError("died"))
    assert is_infrastructure(ConnectionResetError())
    assert not is_infrastructure(SandboxConfigError("bad spec"))
    assert not is_infrastructure(PipelineConfigError("bad field"))
    assert not is_infrastructure(ValueError("a bug"))
    assert issubclass(SandboxConfigError, ConfigError)
    assert issubclass(SandboxStartError, InfrastructureError)


# -- executors -------------------------------------------------------------------------------------
class InlineExecutor:
    """A whole executor: work items one after another in the calling thread."""

    name = "inline"
    distributed = False
    ray_address = None

    def __init__(self, store: Path) -> None:
        self.node = Node("inline", Path(store))
        self.done: list[str] = []

    def map(self, work, items, outs, *, keys, max_workers, on_done=None):
        results = []
        for item, out, key in zip(items, outs, keys, strict=True):
            results.append(work(item, out, self.node))
            self.done.append(key)
            if on_done:
                on_done(results[-1])
        return results

    def retries(self) -> list:
        return []

    def node_of(self, key: str) -> str:
        return self.node.name

    def bring(self, store: Path, instance_ids: list[str]) -> int:
        return 0

    def open_sandbox(self, instance_id: str, backend: str):
        spec = instance_sandbox_spec(LayerStore(self.node.store), instance_id)
        return open_sandbox(spec, backend)

    async def run_near(self, instance_id: str, fn):
        return fn(self.node.store)

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return "inline: one item at a time"


def test_an_executor_is_one_class_and_one_registration(
    monkeypatch: pytest.MonkeyPatch, grading_data, grading_store, tmp_path: Path
) -> None:
    """Registered, the new executor is a config choice and grades real predictions through the
    stages' own entry points; unregistered, the config refuses it by name."""
    refused = re.escape("unknown executor 'inline'; choose one of local | ray")
    with pytest.raises(ValidationError, match=refused):
        PipelineConfig(executor={"name": "inline"})
    monkeypatch.setitem(EXECUTORS, "inline", f"{__name__}:InlineExecutor")
    config = PipelineConfig(executor={"name": "inline"}, envs={"store": grading_store})
    executor = make_stage_executor(config)
    assert isinstance(executor, InlineExecutor) and executor.node.store == grading_store
    instances = grading_data.rows[:2]
    summary = evaluate(
        Grader(grading_store, grading_data.specs),
        instances,
        gold_predictions(instances),
        "inline",
        root=tmp_path,
        report_dir=tmp_path,
        executor=executor,
    )
    assert executor.done == [i.instance_id for i in instances]
    assert [o.resolved for o in summary.outcomes] == [True, True]
    with executor.open_sandbox(instances[0].instance_id, "local") as sandbox:
        assert sandbox.exec("git status --short").output == ""


def test_every_registry_takes_a_dotted_path_and_names_kind_name_and_choices(
    tmp_path: Path,
) -> None:
    """One loader for executors, RL backends, sandbox backends and stages: a dotted path works
    where a built-in name does, and a bad one is told with what it is and what exists."""
    inline = {"name": f"{__name__}:InlineExecutor"}
    executor = make_stage_executor(
        PipelineConfig(executor=inline, envs={"store": tmp_path / "store"})
    )
    assert isinstance(executor, InlineExecutor)
    assert isinstance(rl_backend(f"{__name__}:ToyRLBackend"), ToyRLBackend)
    assert RLConfig(backend=f"{__name__}.ToyRLBackend").backend == f"{__name__}.ToyRLBackend"
    with pytest.raises(ConfigError, match="executor 'sweflow.nowhere:X' cannot be imported"):
        make_stage_executor(PipelineConfig(executor={"name": "sweflow.nowhere:X"}))
    refused = re.escape(
        "unknown RL backend 'tr l'; choose one of trl | verl | skyrl, or a dotted path"
    )
    with pytest.raises(RLBackendError, match=refused):
        rl_backend("tr l")
    assert all(callable(stage.function()) for stage in STAGES)


def test_the_config_form_lists_the_executors() -> None:
    schema = PipelineConfig.model_json_schema()
    assert schema["$defs"]["ExecutorSection"]["properties"]["name"]["enum"] == list(EXECUTORS)
    for name in EXECUTORS:
        assert PipelineConfig(executor={"name": name}).executor.name == name


def test_an_executors_options_are_under_its_name_and_the_old_keys_say_where_they_went() -> None:
    """``executor.ray`` holds Ray's options and only the named executor gets its own; the
    earlier ``executor: NAME`` and top-level ``ray:`` are refused naming their new place."""
    config = PipelineConfig(executor={"name": "ray", "ray": {"address": "auto"}})
    assert config.executor.options()["address"] == "auto"
    assert PipelineConfig(executor={"ray": {"address": "auto"}}).executor.options() == {}
    for old, moved in (
        ({"ray": {}}, "ray moved to executor.ray"),
        ({"executor": "ray"}, "executor moved to executor.name"),
    ):
        with pytest.raises(ValidationError, match=moved):
            PipelineConfig(**old)
    with pytest.raises(ValidationError, match="executor.ray.max_retries"):
        PipelineConfig(executor={"ray": {"max_retries": -1}})


def test_the_registry_hands_notify_only_to_executors_that_wait(tmp_path: Path) -> None:
    """The CLI gives every executor its console; only those that wait (Ray's, NOTIFYING) take
    it, so that a local or dotted-path executor needs no such argument."""
    said: list[str] = []
    assert isinstance(make_executor("local", tmp_path, notify=said.append), LocalExecutor)
    inline = make_executor(f"{__name__}:InlineExecutor", tmp_path, notify=said.append)
    assert isinstance(inline, InlineExecutor) and NOTIFYING == {"ray"}


# -- agent tools -----------------------------------------------------------------------------------
def test_tools_are_registered_once_and_dispatched_by_name() -> None:
    assert [spec["function"]["name"] for spec in TOOL_SPECS] == [t.name for t in TOOLS]
    assert [t.name for t in TOOLS if t.ends_run] == ["submit"]
    calls = [{"id": "1", "function": {"name": "str_replace_editor", "arguments": "{}"}}]
    assert from_tool_calls(calls)[0].tool in TOOLS_BY_NAME
    with pytest.raises(FormatError, match="unknown tool 'edit'; the tools are bash, "):
        from_tool_calls([{"id": "1", "function": {"name": "edit", "arguments": "{}"}}])


def test_the_prompts_name_every_registered_tool() -> None:
    """A new tool reaches the instructions of both modes with no edit to the templates."""
    grep = Tool(
        "grep",
        "Search files.",
        {"type": "object", "properties": {}},
        TOOLS[0].run,
        brief="searches files",
        text_examples=("grep -rn 'text' /testbed",),
    )
    tools = (*TOOLS[:-1], grep, TOOLS[-1])
    assert "`grep` searches files" in tools_instructions(tools)
    assert "`grep`" not in tools_instructions(TOOLS)
    text = text_instructions(tools)
    assert "grep -rn 'text' /testbed" in text
    assert text.endswith(f"only command is `{TOOLS[-1].name}`.")


# -- RL backends -----------------------------------------------------------------------------------
ASKED: list[str] = []  # what the entry point asked ToyRLBackend, in order


class ToyRLBackend:
    """A whole RL backend: publishes nothing, resumes nothing, "trains" by returning a result."""

    def result(self, run: RLRun) -> RLResult | None:
        ASKED.append("result")
        return None

    def resume(self, run: RLRun) -> Path | None:
        ASKED.append("resume")
        return None

    def train(self, run: RLRun, resume: Path | None, progress: OnRLStep | None) -> RLResult:
        ASKED.append("train")
        return RLResult(
            model=str(run.out),
            base_model=run.base_model,
            backend="toy",
            inputs_digest=run.inputs,
            tasks=len(run.tasks),
            steps=run.rl.steps,
        )


def test_a_new_rl_backend_is_one_class_and_one_registry_line(monkeypatch, tmp_path: Path) -> None:
    refused = re.escape("unknown RL backend 'toy'; choose one of trl | verl | skyrl")
    with pytest.raises(ValidationError, match=refused):
        RLConfig(backend="toy")
    monkeypatch.setitem(RL_BACKENDS, "toy", f"{__name__}:ToyRLBackend")
    ASKED.clear()
    rl = RLConfig(backend="toy", steps=3)
    demo = Dataset.load(ROOT / "data" / "demo" / "tasks.jsonl", limit=2)
    tasks = demo.rows
    policy = tmp_path / "policy"
    policy.mkdir()
    (policy / "config.json").write_text("{}")
    result = train(
        tasks,
        policy,
        tmp_path / "rl",
        tmp_path / "rl" / "model",
        rl,
        store=tmp_path / "store",
        specs=demo.specs,
        agent=AgentConfig(),
        policy_name="toy-policy",
    )
    assert ASKED == ["result", "resume", "train"]
    assert result.backend == "toy" and result.model == str(tmp_path / "rl" / "model")
    assert (result.base_model, result.tasks, result.steps) == ("toy-policy", 2, 3)
    assert re.fullmatch("[0-9a-f]{64}", result.inputs_digest)
    schema = PipelineConfig.model_json_schema()
    assert "toy" in schema["$defs"]["RLSection"]["properties"]["backend"]["enum"]


def test_the_rl_backend_field_lists_exactly_the_registry() -> None:
    schema = PipelineConfig.model_json_schema()
    assert schema["$defs"]["RLSection"]["properties"]["backend"]["enum"] == list(RL_BACKENDS)
    assert RLConfig.model_json_schema()["properties"]["backend"]["enum"] == list(RL_BACKENDS)
    for name in RL_BACKENDS:
        assert RLConfig(backend=name).backend == name
        assert isinstance(rl_backend(name), RLBackend)
    with pytest.raises(RLBackendError, match="unknown RL backend 'trll'"):
        rl_backend("trll")
    help_text = CliRunner().invoke(app, ["train", "rl", "--help"], env={"COLUMNS": "200"}).output
    assert " | ".join(RL_BACKENDS) in help_text
