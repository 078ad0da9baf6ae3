"""Option values and dataset companions checked before any work: one-line errors, exit 2.

Each case here was a traceback, a silent wrong answer or seconds of wasted building when sweflow
was tried as a new user would (issue 18).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sweflow.cli import app
from sweflow.cli.common import executor_parts
from sweflow.cli.datasets import load_dataset_rows
from sweflow.envcache.store import LayerStore
from sweflow.envcache.validate import validate
from sweflow.errors import ConfigError

DEMO = Path(__file__).resolve().parents[2] / "data" / "demo"
runner = CliRunner()


def _refused(argv: list[str], *needles: str) -> str:
    result = runner.invoke(app, argv)
    said = " ".join(result.output.replace("│", " ").split())  # typer boxes usage errors
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in said, said
    return said


@pytest.fixture
def demo_copy(tmp_path: Path) -> Path:
    """The demo tasks and specs in a folder of their own, without their repositories."""
    folder = tmp_path / "tasks"
    folder.mkdir()
    for name in ("tasks.jsonl", "specs.yaml"):
        shutil.copy(DEMO / name, folder / name)
    return folder


def test_validate_refuses_zero_runs(tmp_path: Path) -> None:
    """A validation that ran no test called every instance valid."""
    base = ["env", "validate", "-d", str(DEMO / "tasks.jsonl"), "--store", str(tmp_path / "s")]
    base += ["--out", str(tmp_path / "v.jsonl"), "--report", str(tmp_path / "r")]
    for runs in ("0", "-1"):
        _refused([*base, "--runs", runs], "--runs", "must be greater than 0")
    _refused([*base, "--timeout", "0"], "--timeout")
    with pytest.raises(ConfigError, match="runs must be positive"):
        validate([], tmp_path, runs=0)
    assert not (tmp_path / "s").exists()  # refused before any work


@pytest.mark.parametrize(
    "extra, needles",
    [
        (["-j", "0"], ["--max-workers", "must be greater than 0"]),
        (["--timeout", "0"], ["--timeout", "must be greater than 0"]),
        (["-b", "lcoal"], ["unknown sandbox backend 'lcoal'"]),
        (["--report-dir", "{file}"], ["is a file, not a folder"]),
        (["--executor", "lcoal"], ["unknown executor 'lcoal'", "local | ray"]),
    ],
)
def test_eval_option_values_are_checked_first(tmp_path: Path, extra, needles) -> None:
    afile = tmp_path / "a-file"
    afile.write_text("")
    extra = [value.replace("{file}", str(afile)) for value in extra]
    argv = ["eval", "-d", str(DEMO / "tasks.jsonl"), "-p", "gold", "--run-id", "r"]
    _refused([*argv, "--store", str(tmp_path / "s"), *extra], *needles)
    assert not (tmp_path / "s").exists()


def test_executor_names_an_address_after_a_registered_name_only() -> None:
    assert executor_parts("local") == ("local", None)
    assert executor_parts("ray") == ("ray", None)
    assert executor_parts("ray:auto") == ("ray", "auto")
    assert executor_parts("ray:10.0.0.1:6379") == ("ray", "10.0.0.1:6379")
    assert executor_parts("mypackage.mod:MyExecutor") == ("mypackage.mod:MyExecutor", None)


def test_a_store_that_is_a_file_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.write_text("not a folder")
    _refused(
        ["env", "build", "-d", str(DEMO / "tasks.jsonl"), "--store", str(store)],
        "--store",
        "is a file, not a folder",
    )


def test_repositories_without_a_source_fail_before_any_building(demo_copy: Path) -> None:
    store = demo_copy.parent / "store"
    said = _refused(
        ["env", "build", "-d", str(demo_copy), "--store", str(store)],
        "3 repositories have no source",
    )
    for repo in ("pypi/cachetools", "pypi/parse", "pypi/toolz"):
        assert f"{repo} is not in the repo mirror" in said
    assert not store.exists() or not any(LayerStore(store).layers.glob("*"))


def test_instances_take_commas_and_repeats() -> None:
    rows = json.loads("[" + ",".join((DEMO / "tasks.jsonl").read_text().splitlines()[:3]) + "]")
    ids = [r["instance_id"] for r in rows]
    picked = load_dataset_rows(str(DEMO), None, [f"{ids[0]},{ids[1]}", ids[2]])
    assert [r.instance_id for r in picked] == ids


def test_env_gc_speaks_in_sentences(tmp_path: Path) -> None:
    result = runner.invoke(app, ["env", "gc", "--store", str(tmp_path / "store")])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "nothing to remove"


def test_synth_names_an_unknown_operator(tmp_path: Path) -> None:
    argv = ["synth", "--source", "pypi:toolz==1.0.0", "--out", str(tmp_path / "t.jsonl")]
    said = _refused([*argv, "--operators", "nope"], "unknown operator(s) ['nope']", "off_by_one")
    assert "synth options: operators" in said
    assert not (tmp_path / "t.jsonl").exists()


@pytest.mark.parametrize("run_id", ["../../etc/x", "", "..", "a\nb"])
def test_run_ids_that_are_not_one_folder_name_are_refused(tmp_path: Path, run_id: str) -> None:
    """``--run-id ../../etc/x`` wrote outside the report folder, then raised; '' was taken."""
    argv = ["eval", "-d", str(DEMO), "--store", str(tmp_path / "s"), "-p", "gold"]
    _refused(
        [*argv, "--run-id", run_id, "--report-dir", str(tmp_path / "r")],
        "--run-id",
        "it becomes a folder name",
    )
    assert not (tmp_path / "s").exists() and not (tmp_path / "r").exists()


def test_names_that_become_paths_are_checked_wherever_they_come_from(tmp_path: Path) -> None:
    """An instance id or a model name from a file, a run id from a config or a library call."""
    from sweflow.grading.evaluate import evaluate
    from sweflow.grading.predictions import load_predictions
    from sweflow.instances import load_instances
    from sweflow.pipeline.config import PipelineConfigError, load_pipeline_config

    row = json.loads((DEMO / "tasks.jsonl").read_text().splitlines()[0])
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({**row, "instance_id": "../../x"}) + "\n" + json.dumps(row) + "\n")
    loaded = load_instances(tasks)
    assert [i.instance_id for i in loaded.instances] == [row["instance_id"]]
    assert "contains '/'" in str(loaded.errors[0]) and "instance_id" in str(loaded.errors[0])
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        json.dumps(
            {"instance_id": row["instance_id"], "model_patch": "", "model_name_or_path": ".."}
        )
        + "\n"
    )
    read = load_predictions(preds, loaded.instances)
    assert not read.items and "model_name_or_path" in read.errors[0], read.errors
    with pytest.raises(ConfigError, match="run id '..' is not a name"):
        evaluate(None, loaded.instances, [], "..")  # type: ignore[arg-type]
    config = tmp_path / "c.yaml"
    config.write_text(f"run_dir: {tmp_path / 'run'}\ndataset: {{path: {tasks}}}\n")
    with pytest.raises(PipelineConfigError, match="eval.run_id"):
        load_pipeline_config(config, ["eval.run_id=a/b"])
    _refused(["env", "shell", "../x", "--store", str(tmp_path / "s")], "it becomes a folder name")


@pytest.mark.parametrize("timeout", ["0", "-1"])
def test_sandbox_run_refuses_a_timeout_that_is_no_limit(timeout: str) -> None:
    """0 ran with no timeout at all; -1 ran and then said "timed out after -1.0 s"."""
    _refused(
        ["sandbox", "run", "--base", "host", "--timeout", timeout, "true"],
        "--timeout",
        "must be greater than 0",
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "sft", "--data", "{file}", "-o", "{file}"],
        ["train", "rl", "-d", str(DEMO), "--store", "{store}", "-o", "{file}"],
        ["collect", "-d", str(DEMO), "--store", "{store}", "--teacher", "replay", "-o", "{file}"],
        ["model", "prepare", "smollm2-135m-instruct", "--out", "{file}"],
    ],
    ids=["train sft", "train rl", "collect", "model prepare"],
)
def test_an_output_folder_that_is_a_file_is_refused(tmp_path: Path, argv: list[str]) -> None:
    """``train sft -o FILE`` was a FileExistsError traceback."""
    afile = tmp_path / "a-file"
    afile.write_text("")
    argv = [a.replace("{file}", str(afile)).replace("{store}", str(tmp_path / "s")) for a in argv]
    _refused(argv, "is a file, not a folder")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "sft", "--data", "{file}", "-o", "{out}", "-m", "no-such-model"],
        ["train", "rl", "-d", str(DEMO), "--store", "{out}", "-o", "{out}", "-m", "no-such-model"],
        ["serve", "--model", "no-such-model"],
    ],
    ids=["train sft", "train rl", "serve"],
)
def test_a_model_named_like_nothing_is_refused_before_any_work(tmp_path: Path, argv) -> None:
    """It was found out after the data was read, the dataset built or vLLM set up."""
    afile = tmp_path / "a-file"
    afile.write_text("")
    argv = [a.replace("{file}", str(afile)).replace("{out}", str(tmp_path / "o")) for a in argv]
    _refused(argv, "'no-such-model' is not a Hugging Face folder")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("command", [["env", "build"], ["bench", "swebench", "--json"]])
def test_a_wheelhouse_that_is_no_folder_is_refused_before_any_work(tmp_path, command) -> None:
    """A missing one failed every build in its sandbox ("bind source ...: No such file"), and
    ``bench swebench`` recorded those errors as the rows' results, which its re-runs keep."""
    store = tmp_path / "store"
    argv = [*command, "-d", str(DEMO / "tasks.jsonl"), "--store", str(store)]
    _refused([*argv, "--wheelhouse", str(tmp_path / "missing")], "--wheelhouse", "does not exist")
    (tmp_path / "wheel.txt").write_text("")
    _refused([*argv, "--wheelhouse", str(tmp_path / "wheel.txt")], "--wheelhouse", "is a file")
    assert not store.exists()


EVAL = ["eval", "-p", "gold", "--run-id", "r"]
INFER = ["infer", "--model-url", "http://127.0.0.1:9/v1", "-m", "m", "-o", "{out}"]
VALIDATE = ["env", "validate", "--out", "{out}/v.jsonl", "--report", "{out}/r"]
COLLECT = ["collect", "--teacher", "replay", "-o", "{out}"]


@pytest.mark.parametrize(
    "argv, needles",
    [
        ([*EVAL, "--timeout", "nan"], ["--timeout", "finite"]),
        ([*EVAL, "--timeout", "inf"], ["--timeout", "finite"]),
        ([*VALIDATE, "--timeout", "inf"], ["--timeout", "finite"]),
        ([*COLLECT, "--max-steps", "0"], ["--max-steps", "must be greater than 0"]),
        ([*INFER, "--temperature", "nan"], ["--temperature", "finite"]),
        ([*INFER, "--temperature", "-1"], ["--temperature", "must be 0 or more"]),
        (["train", "rl", "-o", "{out}", "--lr", "inf"], ["--lr", "finite"]),
        ([*EVAL, "--report-dir", "/etc"], ["--report-dir", "/etc is a folder of the system"]),
    ],
    ids=[
        "eval timeout nan",
        "eval timeout inf",
        "validate timeout inf",
        "collect max-steps 0",
        "temperature nan",
        "temperature -1",
        "rl lr inf",
        "report-dir /etc",
    ],
)
def test_numbers_that_are_no_setting_are_refused_naming_the_option(tmp_path, argv, needles):
    """``--timeout nan`` "timed out after nan s", ``inf`` was an OverflowError traceback with
    every verdict "error", ``--max-steps 0`` was taken and ignored, a temperature of nan or -1
    went to the model server (issue 54)."""
    store, out = tmp_path / "s", tmp_path / "o"
    argv = [a.replace("{out}", str(out)) for a in argv]
    command = argv[:2] if argv[0] in ("env", "train") else argv[:1]
    rest = argv[len(command) :]
    _refused([*command, "-d", str(DEMO), "--store", str(store), *rest], *needles)
    assert not store.exists() and not out.exists()


@pytest.mark.parametrize("grace", ["inf", "nan"])
def test_env_gc_refuses_a_grace_that_is_no_number_of_seconds(tmp_path: Path, grace: str) -> None:
    """inf passed ``min=0`` and kept every lease live for ever."""
    _refused(["env", "gc", "--store", str(tmp_path / "s"), "--grace", grace], "--grace")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "change, said",
    [
        ({"repo": "pypi/../etc"}, "repository name 'pypi/../etc' is not of the form"),
        ({"base_commit": "notacommit"}, "pypi/parse: 'notacommit' is not a commit id"),
        ({"base_commit": "0" * 40}, f"pypi/parse: commit {'0' * 40} is not in"),
    ],
    ids=["repository name", "no commit id", "commit not in the mirror"],
)
def test_dry_run_refuses_what_the_build_refuses_at_once(tmp_path: Path, change, said) -> None:
    """``--dry-run env build`` said "checked" where the run refused the repository name at once,
    and a commit the mirror lacks was found missing after its environment had built (48 s)."""
    mirror = tmp_path / "mirror"
    bundle = DEMO / "repos" / "pypi__parse.bundle"
    subprocess.run(
        ["git", "clone", "-q", "--mirror", str(bundle), str(mirror / "pypi__parse.git")], check=True
    )
    rows = [json.loads(line) for line in (DEMO / "tasks.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["repo"] == "pypi/parse")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({**row, **change}) + "\n")
    shutil.copy(DEMO / "specs.yaml", tmp_path / "specs.yaml")
    store = tmp_path / "store"
    argv = ["env", "build", "-d", str(tasks), "--repo-mirror", str(mirror), "--store", str(store)]
    dry = _refused(["--dry-run", *argv], said)
    assert _refused(argv, said) == dry
    assert not store.exists()  # refused before any work
