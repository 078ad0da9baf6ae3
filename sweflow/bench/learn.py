"""Does training make the agent better at fixing code? ``sweflow bench learn``.

The learning set (data/learn: synthesized tasks, their held-out projects named in split.json;
the demo set, toolz held out, when data/learn is absent) goes through the training half:

1. golden trajectories from the replay teacher on the train tasks (text mode, tamper guard on),
   and the share of their steps a student could imitate;
2. SFT of SmolLM2-135M-Instruct on them (torchtune): the SFT model, three epochs over the whole
   trajectories of as many tasks as fit 60 windows (one pass over many more windows never
   taught the exact text of an edit, teacher forced; three passes did, and RL got a task to
   train on). No round of the teacher's corrections (``sweflow correct``) follows: at 135M a
   round made the held-out right-file rate worse than more golden windows did
   (benchmarks/results/learn.md has both findings);
3. teacher-forced accuracy (sweflow.training.teacher_forced): the teacher's trajectories of
   the dev tasks fed to the base and the SFT model, the share of the edits' new text and the
   views' targets each predicts token by token (it moves before resolves do);
4. the base model, the SFT model and the SFT+RL model, each served by vLLM as ``infer`` serves
   it, run as the agent with the same limits on the held-out tasks (projects never trained on);
   per model the run scores of sweflow.agent.runs.scores as counts and rates;
5. "can RL learn at all": on train tasks the SFT model trained on and resolves sometimes (a
   rate strictly between 0 and 1 at temperature 1), GRPO steps from the SFT model, and the
   resolve rate over many samples per task before and after. The SFT+RL model of step 4 is
   this one.

Everything lands in a run folder (trajectories, models, the JSON, PNG plots). The plan (how
many tasks, steps, samples) is a YAML file: sweflow/data/bench/learn.yaml, ``quick``
learn-quick.yaml (the same keys, smaller), or any other (``--plan``). With ``tracking``, one
tracking run per run folder (a continued run reports to the same one) gets the SFT and RL
stages' settings, steps and models, and the figures, JSON and plots at the end.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from sweflow.agent.config import AgentConfig
from sweflow.agent.runs.jobs import JobSummary, replay_collect
from sweflow.agent.teacher.scripted_policy import scripted_clients
from sweflow.agent.templates import demonstration
from sweflow.agent.trajectory import Trajectory
from sweflow.bench import DEMO, BenchError, bench_root, heldout_repos, wheelhouse
from sweflow.bench.learn_figures import model_figures, rl_check_figures, sft_figures
from sweflow.bench.learn_plan import BEFORE_RL, FULL, QUICK, RL_ONLY, LearnPlan, load_plan
from sweflow.bench.learn_plots import learn_plots
from sweflow.bench.learn_runs import (
    MAX_MODEL_LEN,
    ModelURL,
    agent_runs,
    pass_at_k_rates,
    resolve_rates,
    served_model,
)
from sweflow.bench.learn_tasks import across_operators, leak_rate
from sweflow.bench.run_folder import RunFolder, open_run_folder
from sweflow.envcache.dataset import Dataset, across_repos
from sweflow.files import write_atomic
from sweflow.instances import Instance
from sweflow.progress import Progress
from sweflow.serving import resolve_model
from sweflow.serving.vllm import serving_python, vllm_installed
from sweflow.tracking import TrackingConfig, TrackingRun
from sweflow.tracking.run import tracked_run
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.trainer import train as train_rl
from sweflow.training.sft.config import SFTConfig
from sweflow.training.sft.train import train_sft
from sweflow.training.teacher_forced import KINDS, token_accuracy
from sweflow.training.workdir import work_lock

# The learning set of a checkout (35 MB, not shipped): the default when run from its root,
# else the demo that ships with the package
LEARN = Path("data") / "learn" / "tasks.jsonl"
RESULT = "learn.json"  # written last: a run folder without it is continued by a re-run
SPLITS = ("dev", "test")  # the dataset's held-out projects; the plan's test_dataset, run once
UNGUARDED = "sft_without_repeat_guard"  # the SFT model again, its repeated replies run again


def run(
    quick: bool = False,
    progress: Progress = print,
    dataset: Path | None = None,
    seed: int = 0,
    plan: LearnPlan | None = None,
    tracking: TrackingConfig | None = None,
) -> dict:
    """``plan`` (default: the shipped quick or full one) on ``dataset``; ``seed`` picks the
    SFT's windows and their order (another seed is another sample of the trained model: greedy
    held-out runs repeat a seed's figures); ``tracking``: where the run reports."""
    plan = plan or load_plan(QUICK if quick else FULL)
    dataset = dataset or (LEARN if LEARN.is_file() else DEMO)
    root = bench_root("learn")
    named = "sweflow/data/demo/tasks.jsonl" if dataset == DEMO else str(dataset)  # not the site
    settings = {"dataset": named, "plan": plan.model_dump(mode="json"), "seed": seed}
    run_folder = open_run_folder(root / "runs", settings, RESULT, BEFORE_RL, _before_rl)
    out = run_folder.path
    if run_folder.resumed:
        progress(
            f"continuing {out} (an unfinished run with these settings; delete it to start over)"
        )
    elif run_folder.stages_from:
        progress(
            f"starting from the teacher, SFT and held-out stages of {run_folder.stages_from}"
            " (the same settings up to RL)"
        )
    if tracking is not None:  # one tracking run per run folder: a continued run reports to it
        tracking = tracking.for_run(f"bench-learn {out.name}", str(out.resolve()))
    with work_lock(out):  # a second bench in the same folder is refused, not interleaved
        try:
            with tracked_run(tracking, "bench-learn", out) as tracker:
                announce = _saving_time(progress, run_folder)
                return _measure(plan, dataset, settings, run_folder, announce, tracker)
        finally:  # Ctrl-C or a failed stage: the next run continues with the time spent so far
            run_folder.save_time()


def _measure(
    plan: LearnPlan,
    dataset: Path,
    settings: dict,
    run_folder: RunFolder,
    progress: Progress,
    tracking: TrackingRun | None,
) -> dict:
    """The plan's stages, in ``run_folder`` (each finds the work a cut-short run saved),
    reported to ``tracking``."""
    root, out = bench_root("learn"), run_folder.path
    # the demo builds offline from the test wheelhouse; the learning set's projects need their
    # build backends and test dependencies from the package index, as its synthesis did
    offline = wheelhouse() if dataset == DEMO else None
    data, store = Dataset.load(dataset), root / "store"
    held = set(heldout_repos(dataset))
    train_rows = across_repos([r for r in data.rows if r.repo not in held], plan.train_tasks or 0)
    if plan.sft_order == "operators":
        train_rows = across_operators(train_rows)
    eval_rows = across_repos([r for r in data.rows if r.repo in held], plan.heldout_tasks or 0)
    if not train_rows or not eval_rows:
        raise BenchError(f"{dataset}: no train or no held-out task (held out: {sorted(held)})")
    if not vllm_installed():  # said now, not after the builds, the teacher and SFT
        raise BenchError(
            f"vLLM is not installed for {serving_python()}: the benchmark serves every model "
            "with it (bash scripts/setup-serve.sh, or set SWEFLOW_SERVE_PYTHON)"
        )
    progress(
        f"building {len(train_rows) + len(eval_rows)} environments ({len(eval_rows)} held out)"
    )
    splits = {"dev": (data, eval_rows)}
    if (test_data := _test_split(plan, dataset)) is not None:
        splits["test"] = (test_data, test_data.rows)
    built = data.builder(store, wheelhouse=offline).build(train_rows + eval_rows)
    if "test" in splits:
        built += test_data.builder(store).build(test_data.rows)
    if failed := [r for r in built if r.status == "error"]:
        raise BenchError(f"{failed[0].instance_id} did not build: {failed[0].error}")
    report: dict = {
        **settings,
        "train_tasks": len(train_rows),
        "heldout_tasks": len(eval_rows),
        "heldout_repos": sorted(held),
        "leak_rate": {"train": leak_rate(train_rows)}
        | {split: leak_rate(rows) for split, (_, rows) in splits.items()},
        "run_dir": str(out),
    }
    if run_folder.stages_from:  # its minutes are not in this run's
        report["stages_from"] = str(run_folder.stages_from)
    if tracking is not None:
        tracking.params("learn", settings)

    teach = functools.partial(  # the replay teacher with the plan's limit and edits
        replay_collect,
        store=store,
        specs=data.specs,
        agent=_agent(plan),  # the student's: its step limit, durations cut (a seed repeats)
        edits=plan.teacher_edits,
    )
    progress(f"golden trajectories: the replay teacher on {len(train_rows)} train tasks")
    gold = teach(train_rows, out_dir=out / "gold")
    report.update(
        golden_kept=gold.kept,
        golden_declined=len(gold.skipped),
        imitable_fraction=gold.imitable_fraction,
    )
    if not gold.kept:
        raise BenchError("the replay teacher kept no trajectory: nothing to fine-tune on")

    base = resolve_model("smollm2-135m-instruct")
    progress(f"SFT on {gold.kept} golden trajectories ({plan.sft_epochs} epoch(s))")
    sft = train_sft(
        Path(gold.outputs["openai"]),
        base,
        out / "sft",
        out / "sft" / "model",
        sft_config(plan, settings["seed"]),
        tracking=tracking,
    )
    report["sft"] = sft_figures(sft, plan.sft_epochs)

    progress(f"teacher-forced accuracy on the teacher's trajectories of {len(eval_rows)} dev tasks")
    dev_gold = teach(eval_rows, out_dir=out / "gold-dev")
    models = {"base": base, "sft": Path(sft.model)}
    saved = out / "teacher-forced" / "accuracy.json"
    report["teacher_forced"] = _teacher_forced(models, dev_gold, saved)

    figures: dict[str, dict[str, dict]] = {split: {} for split in splits}

    def evaluate(name: str, model: ModelURL | None, **options) -> None:
        """``name``'s graded runs on every split (the dev split's folder keeps its old name),
        greedy, and the plan's samples at temperature 1 for pass@k (one run of a policy
        without a model: it samples nothing)."""
        for split, (split_data, rows) in splits.items():
            folder = out / name / ("heldout" if split == "dev" else split)
            runs = _runs(model, split_data, store, rows, folder, plan, **options)
            if plan.pass_k and model is not None:
                sampled = _runs(
                    model,
                    split_data,
                    store,
                    rows,
                    folder.with_name(f"{folder.name}-samples"),
                    plan,
                    rollouts=plan.pass_k,
                    temperature=1.0,
                    **options,
                )
                figures_k = pass_at_k_rates(sampled["trajectories"], rows, plan.pass_k)
                runs["pass_at_k"] = figures_k | {"greedy": False}
            else:  # one greedy run a task: its pass@1 (a deterministic policy's, every k's)
                runs["pass_at_k"] = pass_at_k_rates(runs["trajectories"], rows, 1) | {
                    "k": plan.pass_k or 1,
                    "greedy": True,
                }
            figures[split][name] = runs

    fewshot = _fewshot_agent(plan, Path(gold.outputs["openai"]))
    with served_model(base, out / "base", progress) as model:
        evaluate("base", model)
        evaluate("fewshot", model, agent=fewshot)
    progress("the scripted policy (no model) on the held-out tasks")
    evaluate("scripted", None, client_for=scripted_clients("text"))
    taught = set(sft.data["instances"])  # RL's candidates: tasks the SFT data holds
    trained = [r for r in train_rows if r.instance_id in taught]
    sft_model = Path(sft.model)
    with served_model(sft_model, out / "sft", progress) as model:
        evaluate("sft", model)
        if plan.unguarded:
            figures["dev"][UNGUARDED] = _runs(
                model,
                data,
                store,
                eval_rows,
                out / "sft" / "heldout-unguarded",
                plan,
                repeat_guard=False,
            )
        chosen, before = _rl_tasks(model, data, store, trained, out / "sft", plan, progress)
    overfit: dict = {"steps": plan.rl_steps, "samples_per_task": plan.overfit_samples}
    after: list[Trajectory] = []
    if chosen:
        progress(
            f"GRPO: {plan.rl_steps} steps on {len(chosen)} task(s) the SFT model resolves sometimes"
        )
        rl = train_rl(
            chosen,
            sft_model,
            out / "rl",
            out / "rl" / "model",
            _rl_config(plan, len(chosen)),
            store=store,
            specs=data.specs,
            agent=_agent(plan),
            progress=None,
            tracking=tracking,
        )
        rl_model = Path(rl.model)
        first, last = rl.quarter_rewards()
        overfit.update(reward_first_quarter=first, reward_last_quarter=last, curves=rl.curves)
    if chosen:
        with served_model(rl_model, out / "rl", progress) as model:
            # the check first: a run cut short after it has RL's answer on disk
            samples = _runs(
                model,
                data,
                store,
                chosen,
                out / "rl" / "overfit",
                plan,
                rollouts=plan.overfit_samples,
                temperature=1.0,
            )
            after = samples["trajectories"]
            evaluate("rl", model)
    else:  # no RL ran: the SFT+RL model is the SFT model
        for split in splits:
            figures[split]["rl"] = figures[split]["sft"]
        overfit["note"] = "no train task is resolved sometimes by the SFT model: RL did not run"
    for split in splits:
        report[split] = {name: model_figures(f) for name, f in figures[split].items()}
    report["rl_overfit"] = overfit | rl_check_figures(chosen, before, after)
    report["minutes"] = run_folder.minutes()  # every invocation's, when a re-run continued it
    report["plots"] = learn_plots(report, out)
    (out / RESULT).write_text(json.dumps(report, indent=1) + "\n")
    if tracking is not None:
        track(tracking, report, out)
    return report


def track(tracking: TrackingRun, report: dict, out: Path) -> None:
    """The run's figures (``learn/<split>/<model>/<rate>``, the RL check's resolve rates and
    the teacher's counts), its JSON and its plots, in its tracking run."""
    figures = {
        f"{split}/{model}/{name}": value
        for split in SPLITS
        for model, rates in report.get(split, {}).items()
        for name, value in rates.items()
    }
    overfit = report["rl_overfit"]
    figures |= {f"rl_check/{key}": overfit.get(key) for key in ("resolve_before", "resolve_after")}
    figures |= {key: report[key] for key in ("golden_kept", "imitable_fraction", "minutes")}
    tracking.metrics("learn", figures, 0)
    tracking.files("learn", [out / RESULT, *(Path(p) for p in report["plots"])])


def _before_rl(settings: dict) -> dict:
    """The settings the stages before the RL check depend on."""
    plan = {name: value for name, value in settings["plan"].items() if name not in RL_ONLY}
    return {**settings, "plan": plan}


def _saving_time(progress: Progress, run_folder: RunFolder) -> Progress:
    """``progress`` that also records the run's time at each stage it announces, so that a
    re-run continuing a cut-short run adds up the minutes of both."""

    def announce(message: str, done: int = 0, total: int = 0) -> None:
        run_folder.save_time()
        progress(message, done, total)

    return announce


def sft_config(plan: LearnPlan, seed: int) -> SFTConfig:
    """A full fine-tune with the plan's epochs, at most its windows an epoch, shuffled by
    ``seed`` (checkpointing activations would save 2.5 GB of the machine's 24 for steps about
    16% slower: off)."""
    return SFTConfig(
        epochs=plan.sft_epochs,
        learning_rate=plan.learning_rate,
        max_seq_len=plan.sft_max_seq_len,
        max_steps_per_epoch=plan.sft_steps_per_epoch,
        max_sequences=plan.sft_sequences,
        activation_checkpointing=False,
        seed=seed,
    )


def _teacher_forced(models: dict[str, Path], gold: JobSummary, saved: Path) -> dict:
    """Each model's teacher-forced accuracy on the teacher's dev trajectories, read through the
    context the agent runs with (kept in ``saved``: a continued run does not compute it again)."""
    if saved.is_file():  # kept unless it lacks a measure added since
        figures = json.loads(saved.read_text())
        if all(f"{kind}_token_accuracy" in f for f in figures.values() for kind in KINDS):
            return figures
    records = _records(Path(gold.outputs["openai"])) if gold.kept else []
    figures = {
        name: token_accuracy(model, records, window=MAX_MODEL_LEN).figures()
        for name, model in models.items()
    }
    saved.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(saved, json.dumps(figures, indent=1) + "\n")
    return figures


def _rl_tasks(
    model: ModelURL,
    data: Dataset,
    store: Path,
    rows: list[Instance],
    out: Path,
    plan: LearnPlan,
    progress: Progress,
) -> tuple[list[Instance], list[Trajectory]]:
    """Of the train tasks the SFT model learned from (``rows``: the teacher kept them), those it
    resolves sometimes at temperature 1 (the most uncertain first), and ``overfit_samples``
    fresh runs on each of them (the samples that chose a task are a draw in its favour)."""
    candidates = rows[: plan.candidates]
    progress(
        f"RL check: the SFT model samples {plan.candidate_samples} runs on each of "
        f"{len(candidates)} train tasks"
    )
    tried = _runs(
        model,
        data,
        store,
        candidates,
        out / "candidates",
        plan,
        rollouts=plan.candidate_samples,
        temperature=1.0,
    )
    rates = resolve_rates(tried["trajectories"])
    sometimes = sorted((abs(rate - 0.5), iid) for iid, rate in rates.items() if 0 < rate < 1)
    by_id = {r.instance_id: r for r in rows}
    chosen = [by_id[iid] for _, iid in sometimes[: plan.rl_tasks]]
    if not chosen:
        progress("RL check: no train task is resolved sometimes; nothing to train on")
        return [], []
    before = _runs(
        model,
        data,
        store,
        chosen,
        out / "overfit",
        plan,
        rollouts=plan.overfit_samples,
        temperature=1.0,
    )
    return chosen, before["trajectories"]


def _rl_config(plan: LearnPlan, tasks: int) -> RLConfig:
    return RLConfig(
        steps=plan.rl_steps,
        tasks_per_step=tasks,
        rollouts_per_task=4,
        learning_rate=plan.rl_learning_rate,
        temperature=1.0,
        dynamic_sampling_rounds=plan.rl_dynamic_rounds,
        max_tokens_per_turn=plan.max_tokens,
        max_response_length=3072,
        max_prompt_length=1536,
        format_error_penalty=0.1,
        empty_patch_penalty=0.1,
        checkpoint_every=1,
    )


def _agent(plan: LearnPlan, repeat_guard: bool = True) -> AgentConfig:
    """Every model's agent, and the teacher's (``teach``): it cuts durations, so a seed's golden
    trajectories, and so its SFT model, repeat, and the models read what the teacher read."""
    return AgentConfig(
        tool_mode="text",
        max_steps=plan.max_steps,
        max_wall_s=900,
        repeat_guard=repeat_guard,
        hide_durations=True,
    )


def _test_split(plan: LearnPlan, dataset: Path) -> Dataset | None:
    """The plan's test split, for the learning set it was synthesized beside (a run on another
    dataset has none)."""
    if plan.test_dataset is None or dataset != LEARN:
        return None
    if not plan.test_dataset.is_file():
        raise BenchError(
            f"the plan's test_dataset {plan.test_dataset} does not exist (run from a checkout's "
            "root; `sweflow synth --config configs/synth-learn-test.yaml` makes it)"
        )
    return Dataset.load(plan.test_dataset)


def _records(path: Path) -> list[dict]:
    """The conversations of a collect's OpenAI-format file (its sft.jsonl)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _fewshot_agent(plan: LearnPlan, golden: Path) -> AgentConfig:
    """The plan's agent whose system prompt ends with one golden trajectory of a train task
    (the shortest, so the example leaves the most context): the few-shot baseline, the base
    model given the reply format instead of learning it."""
    records = _records(golden)
    shortest = min(records, key=lambda r: sum(len(m.get("content") or "") for m in r["messages"]))
    agent = _agent(plan)
    prompt = agent.system_template + demonstration(shortest["messages"])
    return agent.model_copy(update={"system_template": prompt})


def _runs(
    model: ModelURL | None,
    data: Dataset,
    store: Path,
    rows: list[Instance],
    out: Path,
    plan: LearnPlan,
    repeat_guard: bool = True,
    agent: AgentConfig | None = None,
    **sampling,
) -> dict:
    """Graded agent runs with the plan's limits (see learn_runs.agent_runs); ``agent``: another
    prompt with the same limits."""
    agent = agent or _agent(plan, repeat_guard)
    return agent_runs(model, data, store, rows, out, agent, plan.max_tokens, **sampling)
