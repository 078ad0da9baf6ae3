"""sweflow bench learn's choices that a run depends on, checked without training anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweflow.bench import BenchError
from sweflow.bench.learn import DEMO, LEARN, RESULT, heldout_repos
from sweflow.bench.learn_tasks import across_operators, operator_of
from sweflow.envcache.dataset import across_repos
from sweflow.instances import Instance, load_instances


def test_the_learning_set_is_sampled_across_projects_and_its_held_out_ones_never_train() -> None:
    rows = load_instances(LEARN).raise_for_errors()
    held = set(heldout_repos(LEARN))
    assert held == set(json.loads((LEARN.parent / "split.json").read_text())["eval"])
    train = across_repos([r for r in rows if r.repo not in held], 8)
    heldout = across_repos([r for r in rows if r.repo in held], 6)
    assert len({r.repo for r in train}) == 8 and not held & {r.repo for r in train}
    assert {r.repo for r in heldout} == held and len(heldout) == 6
    assert sorted(r.instance_id for r in across_repos(rows, 0)) == sorted(
        r.instance_id for r in rows
    )


def test_the_operators_order_puts_every_bug_type_among_sfts_first_tasks() -> None:
    """Issue 59's lever: SFT takes the train tasks in their order while they fit its budget;
    taken project by project, the full plan's first 20 tasks covered 4 of the 13 operators.
    Taken operator by operator (each one's tasks across projects), the first tasks cover them
    all, and no task is lost or repeated."""
    rows = load_instances(LEARN).raise_for_errors()
    held = set(heldout_repos(LEARN))
    train = across_repos([r for r in rows if r.repo not in held], 0)
    operators = {operator_of(r) for r in train}
    stratified = across_operators(train)
    assert sorted(r.instance_id for r in stratified) == sorted(r.instance_id for r in train)
    assert len(operators) >= 10 and "" not in operators
    assert {operator_of(r) for r in stratified[: len(operators)]} == operators

    def bug_types_in_first_20(order: list) -> int:
        return len({operator_of(r) for r in order[:20]})

    assert bug_types_in_first_20(train) < bug_types_in_first_20(stratified) == len(operators)


def test_without_a_split_the_demo_holds_out_toolz(tmp_path: Path) -> None:
    assert heldout_repos(tmp_path / "tasks.jsonl") == ["pypi/toolz"]


def test_the_teacher_declines_routes_longer_than_the_students_step_limit(demo_replays, tmp_path):
    """The bench's teacher keeps only routes the student can finish in its own step limit (a
    route cut by the limit would teach running out of steps)."""
    from sweflow.agent.config import AgentConfig
    from sweflow.agent.runs.jobs import replay_collect

    data, store = demo_replays.data, demo_replays.store
    agent = AgentConfig(tool_mode="text", max_steps=3)
    short = replay_collect(data.rows, store=store, specs=data.specs, out_dir=tmp_path, agent=agent)
    assert short.kept == 0 and set(short.skipped) == {r.instance_id for r in data.rows}
    assert all("more than the agent's 3 steps" in why for why in short.skipped.values())


def test_another_seed_is_another_sample_of_the_fine_tune_and_a_bad_one_is_refused() -> None:
    """The held-out runs are greedy, so a re-run repeats a seed's figures: only another seed (the
    windows SFT keeps, their order) samples the trained model again; it is checked up front."""
    from typer.testing import CliRunner

    from sweflow.bench.learn import FULL, load_plan, sft_config
    from sweflow.cli.main import app

    full = load_plan(FULL)
    assert sft_config(full, 0).seed == 0 and sft_config(full, 3).seed == 3
    assert sft_config(full, 3).max_steps_per_epoch == full.sft_steps_per_epoch
    assert sft_config(full, 3).max_sequences == full.sft_sequences
    windows = full.model_copy(update={"sft_max_seq_len": 8192})  # the agent's context
    assert sft_config(windows, 0).max_seq_len == 8192 and sft_config(full, 0).max_seq_len == 2048
    refused = CliRunner().invoke(app, ["bench", "learn", "--json", "--seed", "-1"])
    assert refused.exit_code == 2 and "--seed" in refused.output


def test_a_plan_is_a_yaml_file_and_a_wrong_one_is_refused_naming_its_field(tmp_path) -> None:
    """The shipped plans load (the quick one smaller in every count), and ``--plan FILE`` with
    a misspelt key or a count of 0 is refused before any work, naming the file and the field."""
    from typer.testing import CliRunner

    from sweflow.bench.learn import FULL, QUICK, load_plan
    from sweflow.cli.main import app
    from sweflow.errors import ConfigError

    full, quick = load_plan(FULL), load_plan(QUICK)
    assert quick.train_tasks == 48 and full.train_tasks is None  # None: every train task
    assert quick.rl_steps < full.rl_steps and quick.overfit_samples < full.overfit_samples
    plan = tmp_path / "plan.yaml"
    plan.write_text(FULL.read_text().replace("sft_epochs: 3", "sft_epoch: 3"))
    with pytest.raises(ConfigError, match=r"plan\.yaml: sft_epochs: Field required; sft_epoch: "):
        load_plan(plan)
    plan.write_text(FULL.read_text() + "teacher_edits: edit\n")
    with pytest.raises(ConfigError, match=r"teacher_edits: Input should be 'str_replace' or"):
        load_plan(plan)
    plan.write_text(FULL.read_text() + "teacher_edits: replace_lines\nsft_max_seq_len: 8192\n")
    assert load_plan(plan).teacher_edits == "replace_lines"
    plan.write_text(FULL.read_text().replace("rl_steps: 4", "rl_steps: 0"))
    for dry in ([], ["--dry-run"]):  # refused before its work starts: a dry run refuses it too
        refused = CliRunner().invoke(app, [*dry, "bench", "learn", "--json", "--plan", str(plan)])
        assert refused.exit_code != 0 and "rl_steps" in refused.output, refused.output
    checked = CliRunner().invoke(app, ["--dry-run", "bench", "learn", "--plan", str(QUICK)])
    assert checked.exit_code == 0 and "would collect golden" in checked.output, checked.output


def test_without_json_a_person_reads_the_held_out_funnel_per_model() -> None:
    """The table takes every funnel step from what the run scores produce, per model."""
    from rich.console import Console

    from sweflow.agent.runs.scores import FUNNEL, RunScore, rates
    from sweflow.cli.bench_measures import print_learn_report

    sft = [RunScore(replies=4, valid_replies=3, right_file=True, edited=True), RunScore(replies=2)]
    report = {
        "heldout_tasks": 2,
        "heldout_repos": ["pypi/toolz"],
        "train_tasks": 9,
        "golden_kept": 5,
        "imitable_fraction": 1.0,
        "seed": 1,
        "minutes": 3.5,
        "run_dir": "runs/x",
        "sft": {"steps": 6, "loss_first": 1.5, "loss_last": 0.25, "loss_epochs": [1.0, 0.375]},
        "dev": {
            "base": rates([RunScore(replies=3)] * 2).as_dict(),
            "sft": rates(sft).as_dict(),
        },
        "test": {"scripted": rates([RunScore(replies=2, valid_replies=2)] * 3).as_dict()},
        "rl_overfit": {"note": "no train task is resolved sometimes by the SFT model"},
        "teacher_forced": {
            "sft": {
                "edit_token_accuracy": 0.625,
                "edit_tokens": 80,
                "fix_token_accuracy": 0.25,
                "fix_tokens": 8,
                "view_token_accuracy": None,
                "view_tokens": 0,
                "conversations": 2,
            }
        },
    }
    greedy = {"k": 1, "tasks": 2, "resolved": 0.0, "right_hunk": 0.0, "greedy": True}
    for figures in report["dev"].values():  # greedy pass@1 repeats the funnel's columns
        figures["pass_at_k"] = greedy
    console = Console(record=True, width=200)
    print_learn_report(report, console)
    assert "pass@" not in console.export_text()
    report["dev"]["sft"]["pass_at_k"] = {"k": 8, "tasks": 2, "resolved": 0.0, "right_hunk": 0.5}
    console = Console(record=True, width=200)
    print_learn_report(report, console)
    text = console.export_text()
    assert all(name.replace("_", " ") in text for name in FUNNEL)
    sft_row = next(line for line in text.splitlines() if line.lstrip("│ ").startswith("sft"))
    assert "50% of 6 replies" in sft_row and sft_row.count("1 (0.50)") == 2  # right file, edited
    assert "loss 1.500 -> 0.250, each epoch's mean 1.000 -> 0.375" in text
    assert "seed 1" in text and "no train task" in text
    assert "dev tasks (2, of pypi/toolz)" in text and "test tasks (3, run once)" in text
    assert "pass@8 resolved / right hunk" in text and sft_row.endswith("0.00 / 0.50 │")
    assert (
        "teacher-forced accuracy of sft on 2 dev trajectories: edit 0.625 of 80 tokens, "
        "fix 0.250 of 8 tokens, view -"
    ) in text


def test_sfts_loss_is_reported_as_each_epochs_mean_beside_its_first_and_last_step() -> None:
    """A single step's loss is one window's: each epoch (the same windows) is averaged."""
    from sweflow.bench.learn_figures import epoch_means

    assert epoch_means([2.0, 1.0, 0.5, 0.5, 0.25, 0.25], 3) == [1.5, 0.5, 0.25]
    assert epoch_means([3.0, 1.0, 2.0, 0.5, 0.5], 2) == [2.0, 1.0]  # 5 steps: 2 and 3
    assert epoch_means([1.0], 3) == []


def test_pass_at_k_counts_each_tasks_graded_samples_by_the_unbiased_estimator() -> None:
    """Two samples of four resolve one task (pass@2 = 1 - C(2,2)/C(4,2) = 5/6), the right hunk
    without resolving on two of four of the other's; an ungraded sample is left out of n, and
    a task with fewer than k graded samples out of the mean."""
    from sweflow.agent.trajectory import Trajectory
    from sweflow.bench.learn_runs import pass_at_k_rates
    from sweflow.instances import load_instances

    one, two, three = load_instances(DEMO).raise_for_errors()[:3]

    def run(row, i: int, resolved: bool | None, gold: bool = False) -> Trajectory:
        reward = None if resolved is None else {"resolved": resolved}
        patch = row.patch if gold or resolved else ""
        return Trajectory(instance_id=row.instance_id, run=i, reward=reward, patch=patch)

    runs = [run(one, i, i < 2) for i in range(4)]
    runs += [run(two, i, False, gold=i < 2) for i in range(4)] + [run(two, 4, None)]
    runs += [run(three, 0, True)]  # one graded sample: fewer than k
    figures = pass_at_k_rates(runs, [one, two, three], 2)
    assert figures == {
        "k": 2,
        "tasks": 2,
        "resolved": round((5 / 6 + 0) / 2, 4),
        "right_hunk": round((5 / 6 + 5 / 6) / 2, 4),
    }


def _heldout_only(tmp_path: Path) -> Path:
    """The demo's held-out tasks alone (toolz): a run on them stops before any work."""
    dataset = tmp_path / "tasks.jsonl"
    lines = DEMO.read_text().splitlines(keepends=True)
    dataset.write_text("".join(line for line in lines if '"repo": "pypi/toolz"' in line))
    return dataset


def test_a_cut_short_run_is_continued_by_the_same_command(tmp_path, monkeypatch) -> None:
    """A run that stopped (here a stage refused its data; Ctrl-C and a lost session alike) keeps
    its folder, and the same command continues it, adding up the time spent; other settings or a
    finished run start a new folder."""
    from sweflow.bench.learn import run
    from sweflow.training.workdir import WorkDirBusyError, work_lock

    monkeypatch.setenv("SWEFLOW_CACHE", str(tmp_path / "cache"))
    runs = tmp_path / "cache" / "bench" / "learn" / "runs"
    dataset = _heldout_only(tmp_path)
    said: list[str] = []
    spent = []
    for _ in range(2):
        with pytest.raises(BenchError, match="no train or no held-out task"):
            run(quick=True, progress=said.append, dataset=dataset)
        (folder,) = runs.iterdir()
        spent.append(json.loads((folder / "spent.json").read_text())["seconds"])
    assert said[0].startswith(f"continuing {folder} ") and len(said) == 1
    assert 0 < spent[0] < spent[1]  # the second invocation added its time to the first's
    with work_lock(folder), pytest.raises(WorkDirBusyError, match=str(folder)):
        run(quick=True, progress=said.append, dataset=dataset)  # one still running in it
    assert json.loads((folder / "settings.json").read_text())["dataset"] == str(dataset)

    with pytest.raises(BenchError):
        run(quick=True, progress=said.append, dataset=dataset, seed=1)
    assert len(list(runs.iterdir())) == 2 and len(said) == 2  # another seed: a new run
    (folder / RESULT).write_text("{}")
    with pytest.raises(BenchError):
        run(quick=True, progress=said.append, dataset=dataset)
    assert len(list(runs.iterdir())) == 3 and len(said) == 2  # a finished run stays as it is


def test_the_full_plans_settings_with_its_test_split_are_saved_as_json(tmp_path, monkeypatch):
    """The full plan names a test split (a path): its run folder's settings hold it as text (a
    run of the full plan failed on it before any work: a path is no JSON)."""
    from sweflow.bench.learn import FULL, load_plan, run

    monkeypatch.setenv("SWEFLOW_CACHE", str(tmp_path / "cache"))
    dataset = _heldout_only(tmp_path)
    plan = load_plan(FULL)
    assert plan.test_dataset is not None
    with pytest.raises(BenchError, match="no train or no held-out task"):
        run(plan=plan, progress=lambda *a: None, dataset=dataset)
    (folder,) = (tmp_path / "cache" / "bench" / "learn" / "runs").iterdir()
    saved = json.loads((folder / "settings.json").read_text())["plan"]
    assert saved["test_dataset"] == str(plan.test_dataset)


def test_the_rl_check_reports_each_task_and_the_runs_behind_its_rates() -> None:
    """4 of 16 against 0 of 16 reads as +0.25; the counts go beside the rates, in the JSON and
    in the lines a person reads, task by task and pooled (the mean of the tasks' rates), so a
    draw that small, or one task carrying the others, is seen for what it is."""
    from rich.console import Console

    from sweflow.agent.trajectory import Trajectory
    from sweflow.bench.learn_figures import _sampled, rl_check_figures
    from sweflow.cli.bench_measures import print_learn_report

    def runs(task: str, resolved: int, of: int) -> list[Trajectory]:
        return [
            Trajectory(instance_id=task, run=k, reward={"resolved": k < resolved})
            for k in range(of)
        ]

    assert _sampled("before", runs("t", 0, 16)) == {
        "resolve_before": 0.0,
        "resolved_before": "0 of 16",
    }
    assert _sampled("before", []) == {"resolve_before": None}
    tasks = [
        Instance(instance_id=i, repo="a/b", base_commit="0" * 40)
        for i in ("a__t-1", "b__u-2", "c__v-3")
    ]
    before = runs("a__t-1", 0, 16) + runs("b__u-2", 4, 16) + runs("c__v-3", 8, 16)
    after = runs("a__t-1", 4, 16) + runs("b__u-2", 4, 16) + runs("c__v-3", 16, 16)
    figures = rl_check_figures(tasks, before, after)
    assert [(t["instance_id"], t["gain"]) for t in figures["tasks"]] == [
        ("a__t-1", 0.25),
        ("b__u-2", 0.0),
        ("c__v-3", 0.5),
    ]
    assert figures["tasks"][2]["resolved_after"] == "16 of 16"
    assert (figures["resolve_before"], figures["resolve_after"], figures["gain"]) == (
        0.25,
        0.5,
        0.25,
    )
    assert figures["resolved_before"] == "12 of 48"
    # no task qualified: nothing before or after, and no gain
    assert rl_check_figures([], [], []) == {
        "tasks": [],
        "resolve_before": None,
        "resolve_after": None,
        "gain": None,
    }
    report = {
        "heldout_tasks": 1,
        "heldout_repos": ["pypi/toolz"],
        "train_tasks": 3,
        "golden_kept": 3,
        "imitable_fraction": 1.0,
        "seed": 0,
        "minutes": 1.0,
        "run_dir": "runs/x",
        "sft": {"steps": 1, "loss_first": None, "loss_last": None},
        "dev": {},
        "rl_overfit": {"steps": 6, "samples_per_task": 16, **figures},
    }
    console = Console(record=True, width=200)
    print_learn_report(report, console)
    text = console.export_text()
    assert "resolve rate 0.25 -> 0.5 (12 of 48 -> 24 of 48 resolved; 16 samples each)" in text
    assert "c__v-3: 0.5 -> 1.0 (8 of 16 -> 16 of 16 resolved)" in text


def test_a_stage_whose_runs_are_all_saved_serves_no_model(tmp_path: Path) -> None:
    """A continued run reads the stages it finished: their models are not started again (a
    vLLM start costs minutes on a CPU); a run left to do, or one an infrastructure failure
    ended, asks for the server, which then starts."""
    from sweflow.agent.runs.batch import trajectory_path
    from sweflow.agent.trajectory import Trajectory
    from sweflow.bench.learn_runs import runs_left, served_model
    from sweflow.serving import ServeError

    rows = load_instances(DEMO).raise_for_errors()[:2]
    for row in rows:
        Trajectory(instance_id=row.instance_id, exit_status="submitted").save(
            trajectory_path(tmp_path, row.instance_id, 0)
        )
    assert runs_left(tmp_path, rows) == 0 and runs_left(tmp_path, rows, rollouts=3) == 4
    Trajectory(instance_id=rows[0].instance_id, exit_status="sandbox_error").save(
        trajectory_path(tmp_path, rows[0].instance_id, 0)
    )
    assert runs_left(tmp_path, rows) == 1

    said: list[str] = []
    missing = tmp_path / "no-model"
    with served_model(missing, tmp_path / "serve", said.append):
        pass  # never asked for: nothing starts, so the missing folder goes unnoticed
    assert said == [] and not (tmp_path / "serve").exists()
    with (
        pytest.raises(ServeError, match="no-model"),
        served_model(missing, tmp_path, said.append) as url,
    ):
        url()


def test_a_run_with_other_rl_settings_starts_from_the_earlier_runs_first_stages(tmp_path: Path):
    """Its teacher, SFT and held-out stages are copied from the newest run whose settings match
    up to RL (the published model hard-linked, checkpoints left out); the earlier run's files
    stay its own, and a run that differs before RL starts empty."""
    from sweflow.bench.learn import BEFORE_RL, _before_rl
    from sweflow.bench.run_folder import open_run_folder

    runs = tmp_path / "runs"
    first = {"dataset": "d", "seed": 0, "plan": {"sft_epochs": 3, "rl_steps": 6}}
    earlier = open_run_folder(runs, first, RESULT, BEFORE_RL, _before_rl).path
    for name, text in (
        ("gold/trajectories/t.json", "{}"),
        ("sft/model/w.safetensors", "w"),
        ("sft/checkpoints/epoch_0/w.bin", "c"),
        ("sft/vllm.log", "served\n"),
        ("rl/model/w.safetensors", "rl"),
    ):
        (earlier / name).parent.mkdir(parents=True, exist_ok=True)
        (earlier / name).write_text(text)
    (earlier / RESULT).write_text("{}")  # finished: its stages still serve a later run

    other_rl = {**first, "plan": {"sft_epochs": 3, "rl_steps": 8}}
    later = open_run_folder(runs, other_rl, RESULT, BEFORE_RL, _before_rl)
    assert later.stages_from == earlier and not later.resumed
    new = later.path
    assert (new / "gold/trajectories/t.json").read_text() == "{}"
    assert (new / "sft/model/w.safetensors").samefile(earlier / "sft/model/w.safetensors")
    assert not (new / "sft/checkpoints").exists() and not (new / "rl").exists()
    with (new / "sft/vllm.log").open("a") as log:  # a stage that serves again appends
        log.write("again\n")
    assert (earlier / "sft/vllm.log").read_text() == "served\n"
    assert json.loads((new / "settings.json").read_text()) == other_rl

    other_sft = {**first, "plan": {"sft_epochs": 2, "rl_steps": 8}}
    fresh = open_run_folder(runs, other_sft, RESULT, BEFORE_RL, _before_rl)
    assert fresh.stages_from is None
    assert list(fresh.path.iterdir()) == [fresh.path / "settings.json"]


def test_the_fewshot_prompt_ends_with_the_shortest_golden_trajectory(tmp_path: Path) -> None:
    from sweflow.bench import DATA as BENCH_DATA
    from sweflow.bench.learn import _fewshot_agent, load_plan

    def record(reply: str, output: str) -> dict:
        return {
            "messages": [
                {"role": "system", "content": "system prompt"},
                {"role": "user", "content": f"<issue>{reply}</issue>"},
                {"role": "assistant", "content": f"THOUGHT: {reply}\n\n```bash\nls\n```"},
                {"role": "user", "content": output},
            ]
        }

    golden = tmp_path / "sft.jsonl"
    rows = [record("long", "x" * 5000), record("short", "y" * 2000)]
    golden.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan = load_plan(BENCH_DATA / "bench" / "learn-quick.yaml")
    agent = _fewshot_agent(plan, golden)
    prompt = agent.system_template
    assert "THOUGHT: short" in prompt and "THOUGHT: long" not in prompt
    assert "system prompt" not in prompt  # the example's own system prompt is left out
    assert "OUTPUT:\n" + "y" * 1500 + "\n[...]" in prompt  # a long output is cut
    assert agent.max_steps == plan.max_steps and agent.tool_mode == "text"


def test_without_vllm_it_stops_before_any_work(tmp_path, monkeypatch) -> None:
    """The models are served by vLLM: a serving interpreter without it is said before the
    builds, the teacher and SFT (it was said 20 minutes in, when the base model was served)."""
    import sys

    from sweflow.bench.learn import run

    monkeypatch.setenv("SWEFLOW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SWEFLOW_SERVE_PYTHON", sys.executable)  # the project's venv: no vLLM
    with pytest.raises(BenchError, match="vLLM is not installed for .*setup-serve.sh"):
        run(quick=True, dataset=DEMO, progress=lambda *a: None)
    assert not (tmp_path / "cache" / "bench" / "learn" / "store").exists()


def test_the_rl_check_plot_says_why_rl_did_not_run_and_draws_each_task_when_it_did() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sweflow.bench.learn_plots import _rl_check

    note = "no train task is resolved sometimes by the SFT model: RL did not run"
    idle = {"steps": 2, "samples_per_task": 8, "note": note, "tasks": []}
    fig, (empty, trained) = plt.subplots(1, 2)
    _rl_check(empty, idle)
    assert not empty.patches and " ".join(empty.texts[0].get_text().split()) == note
    tasks = [
        {"instance_id": f"p__t-{i}", "resolve_before": 0.25, "resolve_after": 0.5} for i in range(3)
    ]
    ran = {"samples_per_task": 8, "tasks": tasks, "resolve_before": 0.25, "resolve_after": 0.5}
    _rl_check(trained, ran)
    assert len(trained.patches) == 2 * 4  # before and after, for 3 tasks and the pool
    assert "3 tasks" in trained.get_title()
    plt.close(fig)
