"""Does training make the agent better at fixing code? ``sweflow bench learn``.

The learning set (data/learn: synthesized tasks, their held-out projects named in split.json;
the demo set, toolz held out, when data/learn is absent) goes through the training half:

1. golden trajectories from the replay teacher on the train tasks (text mode, tamper guard on),
   and the share of their steps a student could imitate;
2. SFT of SmolLM2-135M-Instruct on them (torchtune): the SFT model, three epochs over the whole
   trajectories of as many tasks as fit 60 windows (one pass over 340 windows of 201 tasks never
   taught the exact text of an edit: 0 of 25 edits of trained windows came out token for token,
   teacher forced; three passes did, and RL got a task to train on). No round of the teacher's
   corrections (``sweflow correct``) follows: on the full run's models one round made the
   held-out right-file rate worse (0.26 -> 0 at b351665; 0.10 with corrections cut at the
   student's first loop), where a second run of 100 windows on golden runs alone gave 0.38
   (one run of 340 golden windows gives 0.26, as 240 did);
3. the base model, the SFT model and the SFT+RL model, each served by vLLM as ``infer`` serves
   it, run as the agent with the same limits on the held-out tasks (projects never trained on);
   per model the run scores of sweflow.agent.scores as counts and rates;
4. "can RL learn at all": on train tasks the SFT model trained on and resolves sometimes (a
   rate strictly between 0 and 1 at temperature 1), GRPO steps from the SFT model, and the
   resolve rate over many samples per task before and after. The SFT+RL model of step 3 is
   this one.

Everything lands in a run folder (trajectories, models, the JSON, PNG plots); ``quick`` runs a
smaller plan with the same keys.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from itertools import zip_longest
from pathlib import Path

from sweflow.agent.jobs import replay_collect
from sweflow.agent.scores import FUNNEL
from sweflow.agent.trajectory import Trajectory
from sweflow.bench import REPO, BenchError, bench_root, wheelhouse
from sweflow.bench.learn_runs import ModelURL, agent_runs, resolve_rates, served_model
from sweflow.bench.run_folder import RunFolder, open_run_folder
from sweflow.envcache.dataset import dataset_specs
from sweflow.grading.dataset import GradingData
from sweflow.instances import Instance
from sweflow.serving import resolve_model
from sweflow.training.rl.config import RLConfig
from sweflow.training.rl.trainer import train as train_rl
from sweflow.training.sft.config import SFTConfig
from sweflow.training.sft.train import SFTResult, train_sft
from sweflow.training.workdir import work_lock

Progress = Callable[[str], None]
LEARN = REPO / "data" / "learn" / "tasks.jsonl"
DEMO = REPO / "data" / "demo" / "tasks.jsonl"
DEMO_HELDOUT = ["pypi/toolz"]
RESULT = "learn.json"  # written last: a run folder without it is continued by a re-run
UNGUARDED = "sft_without_repeat_guard"  # the SFT model again, its repeated replies run again


@dataclass(frozen=True)
class Plan:
    """How much of everything a run does (the quick plan keeps every step, smaller)."""

    train_tasks: int | None  # golden trajectories from this many train tasks (None: all)
    heldout_tasks: int | None
    sft_epochs: int
    sft_steps_per_epoch: int | None  # a sample of sequences an epoch (parts of conversations)
    candidates: int  # train tasks tried for the RL check
    candidate_samples: int  # samples per candidate at temperature 1
    rl_tasks: int  # tasks the RL check trains on
    rl_steps: int
    overfit_samples: int  # samples per RL task before and after
    max_steps: int = 12  # agent steps per run; the teacher keeps routes that fit in them
    unguarded: bool = True  # run the SFT model once more without the agent's repeat guard
    max_tokens: int = 768  # per reply: the teacher's longest (a reproduction script) fit
    learning_rate: float = 1e-4  # full fine-tune of a 135M model on a few hundred examples
    sft_sequences: int | None = None  # whole conversations that fit in this many, every epoch
    # GRPO's step size: at 1e-5, 8 steps on funcy (0df320f's one-off) moved each weight by at
    # most 8e-5 (Adam), against SFT's 180 steps of 1e-4, and the resolve rate by 1 of 16 samples
    rl_learning_rate: float = 5e-5
    # DAPO's dynamic sampling: a group of 4 episodes with no success is drawn again, up to 3 more
    # times, and masked if none differs (the full run at f897ae1 trained on 24 episodes without a
    # success among them: every update followed the shaping alone, toward a first action that
    # never resolves)
    rl_dynamic_rounds: int = 3


# The plan's fields that only the RL check reads: a run that differs from an earlier one only in
# these starts from that run's teacher, SFT and held-out stages (their folders copied)
RL_ONLY = ("candidates", "candidate_samples", "rl_tasks", "rl_steps", "overfit_samples",
           "rl_learning_rate", "rl_dynamic_rounds")  # fmt: skip
BEFORE_RL = ("gold", "sft", "base")


# The full plan fits the 3 hours on 2 cores: SFT (about 13 s a 2,048-token window) runs
# 3 epochs over the whole trajectories of the tasks that fit 60 windows (20 tasks, 42.7 minutes
# at 0df320f); the RL check trains on 1 task, 4 steps (with dynamic sampling a step of glom drew
# 16 episodes in 8.5 minutes and updated on 4 of them in 5.5, a test run beside it), a
# checkpoint after each; the unguarded re-run is off (the 45274b4 run measured the
# guard: 20 of 50 runs loop without it, 1 with it); 32 samples a side for the check (two draws
# of 16 of the same SFT model on glom resolved 0 and 4 at f897ae1: as far apart as the target).
# Until 19845af one epoch over 340 of ~610 windows (145.6 minutes with no RL: no task qualified).
# The quick one fits 30 minutes (25.5 at 122b7d3, alone) with the full plan's shape: 3 epochs
# over the whole trajectories of the tasks that fit 15 windows (5 tasks, 42 steps). The same day,
# 1 epoch of 40 windows sampled from 24 tasks (18.0 minutes) submitted at once: held out, it
# reproduced 1 of 6 and opened the gold file in 1, against 5 and 2; neither found an RL task in
# 4 samples of each trained task (none resolved in 8 either: 5.4 minutes more).
# Were a task to qualify, RL redraws a failed group once, not 3 times: a step draws at most 8
# episodes (a full-plan step drew 16 in 8.5 minutes).
FULL = Plan(None, None, 3, None, 16, 4, 1, 4, 32, unguarded=False, sft_sequences=60)
QUICK = Plan(48, 6, 3, None, 8, 4, 1, 2, 8, max_steps=8, unguarded=False, sft_sequences=15,
             rl_dynamic_rounds=1)  # fmt: skip


def heldout_repos(dataset: Path) -> list[str]:
    """The projects held out of training: the learning set's split.json, or the demo's toolz."""
    split = dataset.parent / "split.json"
    return json.loads(split.read_text())["eval"] if split.is_file() else DEMO_HELDOUT


def across_projects(rows: list[Instance], n: int | None) -> list[Instance]:
    """``n`` of ``rows`` taking each project in turn (a dataset lists its tasks project by
    project: the first ``n`` would all come from one)."""
    queues: dict[str, list[Instance]] = {}
    for row in rows:
        queues.setdefault(row.repo, []).append(row)
    turns = [row for group in zip_longest(*queues.values()) for row in group if row is not None]
    return turns[:n]


def run(quick: bool = False, progress: Progress = print, dataset: Path | None = None,
        seed: int = 0) -> dict:  # fmt: skip
    """The plan on ``dataset``; ``seed`` picks the SFT's windows and their order (another seed
    is another sample of the trained model: greedy held-out runs repeat a seed's figures)."""
    plan = QUICK if quick else FULL
    dataset = dataset or (LEARN if LEARN.is_file() else DEMO)
    root = bench_root("learn")
    named = dataset.relative_to(REPO) if dataset.is_relative_to(REPO) else dataset
    settings = {"dataset": str(named), "plan": asdict(plan), "seed": seed}
    run_folder = open_run_folder(root / "runs", settings, RESULT, BEFORE_RL, _before_rl)
    out = run_folder.path
    if run_folder.resumed:
        progress(f"continuing {out} (an unfinished run with these settings; delete it to start "
                 "over)")  # fmt: skip
    elif run_folder.stages_from:
        progress(f"starting from the teacher, SFT and held-out stages of {run_folder.stages_from}"
                 " (the same settings up to RL)")  # fmt: skip
    with work_lock(out):  # a second bench in the same folder is refused, not interleaved
        try:
            return _measure(plan, dataset, settings, run_folder, _saving_time(progress, run_folder))
        finally:  # Ctrl-C or a failed stage: the next run continues with the time spent so far
            run_folder.save_time()


def _measure(plan: Plan, dataset: Path, settings: dict, run_folder: RunFolder,
             progress: Progress) -> dict:  # fmt: skip
    """The plan's stages, in ``run_folder`` (each finds the work a cut-short run saved)."""
    root, out = bench_root("learn"), run_folder.path
    # the demo builds offline from the test wheelhouse; the learning set's projects need their
    # build backends and test dependencies from the package index, as its synthesis did
    offline = wheelhouse() if dataset == DEMO else None
    data = GradingData.load(dataset, root / "store", offline)
    held = set(heldout_repos(dataset))
    train_rows = across_projects(
        [r for r in data.instances if r.repo not in held], plan.train_tasks
    )
    eval_rows = across_projects([r for r in data.instances if r.repo in held], plan.heldout_tasks)
    if not train_rows or not eval_rows:
        raise BenchError(f"{dataset}: no train or no held-out task (held out: {sorted(held)})")
    data.instances = train_rows + eval_rows
    progress(f"building {len(data.instances)} environments ({len(eval_rows)} held out)")
    if failed := [r for r in data.build() if r.status == "error"]:
        raise BenchError(f"{failed[0].instance_id} did not build: {failed[0].error}")
    report: dict = {**settings, "train_tasks": len(train_rows), "heldout_tasks": len(eval_rows),
                    "heldout_repos": sorted(held), "run_dir": str(out)}  # fmt: skip
    if run_folder.stages_from:  # its minutes are not in this run's
        report["stages_from"] = str(run_folder.stages_from)

    progress(f"golden trajectories: the replay teacher on {len(train_rows)} train tasks")
    gold = replay_collect(train_rows, store=data.store, specs=data.specs, out_dir=out / "gold",
                          max_steps=plan.max_steps)  # fmt: skip
    report.update(golden_kept=gold.kept, golden_declined=len(gold.skipped),
                  imitable_fraction=gold.imitable_fraction)  # fmt: skip
    if not gold.kept:
        raise BenchError("the replay teacher kept no trajectory: nothing to fine-tune on")

    base = resolve_model("smollm2-135m-instruct")
    progress(f"SFT on {gold.kept} golden trajectories ({plan.sft_epochs} epoch(s))")
    sft = train_sft(Path(gold.outputs["openai"]), base, out / "sft", out / "sft" / "model",
                    sft_config(plan, settings["seed"]))  # fmt: skip
    report["sft"] = _sft_figures(sft)

    heldout: dict[str, dict] = {}
    with served_model(base, out / "base", progress) as model:
        heldout["base"] = _runs(model, data, eval_rows, out / "base" / "heldout", plan)
    taught = set(sft.data["instances"])  # RL's candidates: tasks the SFT data holds
    trained = [r for r in train_rows if r.instance_id in taught]
    sft_model = Path(sft.model)
    with served_model(sft_model, out / "sft", progress) as model:
        heldout["sft"] = _runs(model, data, eval_rows, out / "sft" / "heldout", plan)
        if plan.unguarded:
            heldout[UNGUARDED] = _runs(model, data, eval_rows, out / "sft" / "heldout-unguarded",
                                       plan, repeat_guard=False)  # fmt: skip
        chosen, before = _rl_tasks(model, data, trained, out / "sft", plan, progress)
    overfit: dict = {"tasks": [r.instance_id for r in chosen], "steps": plan.rl_steps,
                     "samples_per_task": plan.overfit_samples,
                     **_sampled("before", before)}  # fmt: skip
    if chosen:
        progress(f"GRPO: {plan.rl_steps} steps on {len(chosen)} task(s) the SFT model "
                 "resolves sometimes")  # fmt: skip
        rl = train_rl(chosen, sft_model, out / "rl", out / "rl" / "model", _rl_config(plan,
                      len(chosen)), store=data.store, specs=dataset_specs(dataset),
                      agent=_agent(plan), progress=None)  # fmt: skip
        rl_model = Path(rl.model)
        first, last = rl.quarter_rewards()
        overfit.update(reward_first_quarter=first, reward_last_quarter=last, curves=rl.curves)
    if chosen:
        with served_model(rl_model, out / "rl", progress) as model:
            heldout["rl"] = _runs(model, data, eval_rows, out / "rl" / "heldout", plan)
            samples = _runs(model, data, chosen, out / "rl" / "overfit", plan,
                                 rollouts=plan.overfit_samples, temperature=1.0)  # fmt: skip
            overfit.update(_sampled("after", samples["trajectories"]))
    else:  # no RL ran: the SFT+RL model is the SFT model
        heldout["rl"] = heldout["sft"]
        overfit["note"] = "no train task is resolved sometimes by the SFT model: RL did not run"
    report["heldout"] = {name: _with_resolve_rate(figures["rates"])
                         for name, figures in heldout.items()}  # fmt: skip
    report["rl_overfit"] = {"resolve_after": None, **overfit}
    report["minutes"] = run_folder.minutes()  # every invocation's, when a re-run continued it
    report["plots"] = _plots(report, out)
    (out / RESULT).write_text(json.dumps(report, indent=1) + "\n")
    return report


def _before_rl(settings: dict) -> dict:
    """The settings the stages before the RL check depend on."""
    plan = {name: value for name, value in settings["plan"].items() if name not in RL_ONLY}
    return {**settings, "plan": plan}


def _saving_time(progress: Progress, run_folder: RunFolder) -> Progress:
    """``progress`` that also records the run's time at each stage it announces, so that a
    re-run continuing a cut-short run adds up the minutes of both."""

    def announce(message: str) -> None:
        run_folder.save_time()
        progress(message)

    return announce


def sft_config(plan: Plan, seed: int) -> SFTConfig:
    """A full fine-tune with the plan's epochs, at most its windows an epoch, shuffled by
    ``seed`` (checkpointing activations would save 2.5 GB of the machine's 24 for steps about
    16% slower: off)."""
    return SFTConfig(epochs=plan.sft_epochs, learning_rate=plan.learning_rate, max_seq_len=2048,
                     max_steps_per_epoch=plan.sft_steps_per_epoch,
                     max_sequences=plan.sft_sequences, activation_checkpointing=False,
                     seed=seed)  # fmt: skip


def _sft_figures(sft: SFTResult) -> dict:
    return {"steps": sft.steps, "loss_first": sft.losses[0] if sft.losses else None,
            "loss_last": sft.final_loss, "loss_plot": sft.loss_plot}  # fmt: skip


def _rl_tasks(model: ModelURL, data: GradingData, rows: list[Instance], out: Path, plan: Plan,
              progress: Progress) -> tuple[list[Instance], list[Trajectory]]:  # fmt: skip
    """Of the train tasks the SFT model learned from (``rows``: the teacher kept them), those it
    resolves sometimes at temperature 1 (the most uncertain first), and ``overfit_samples``
    fresh runs on each of them (the samples that chose a task are a draw in its favour)."""
    candidates = rows[: plan.candidates]
    progress(f"RL check: the SFT model samples {plan.candidate_samples} runs on each of "
             f"{len(candidates)} train tasks")  # fmt: skip
    tried = _runs(model, data, candidates, out / "candidates", plan,
                       rollouts=plan.candidate_samples, temperature=1.0)  # fmt: skip
    rates = resolve_rates(tried["trajectories"])
    sometimes = sorted((abs(rate - 0.5), iid) for iid, rate in rates.items() if 0 < rate < 1)
    by_id = {r.instance_id: r for r in rows}
    chosen = [by_id[iid] for _, iid in sometimes[: plan.rl_tasks]]
    if not chosen:
        progress("RL check: no train task is resolved sometimes; nothing to train on")
        return [], []
    before = _runs(model, data, chosen, out / "overfit", plan,
                        rollouts=plan.overfit_samples, temperature=1.0)  # fmt: skip
    return chosen, before["trajectories"]


def _rl_config(plan: Plan, tasks: int) -> RLConfig:
    return RLConfig(steps=plan.rl_steps, tasks_per_step=tasks, rollouts_per_task=4,
                    learning_rate=plan.rl_learning_rate, temperature=1.0,
                    dynamic_sampling_rounds=plan.rl_dynamic_rounds,
                    max_tokens_per_turn=plan.max_tokens,
                    max_response_length=3072, max_prompt_length=1536,
                    format_error_penalty=0.1, empty_patch_penalty=0.1,
                    checkpoint_every=1)  # fmt: skip


def _agent(plan: Plan, repeat_guard: bool = True):
    from sweflow.agent.config import AgentConfig

    return AgentConfig(tool_mode="text", max_steps=plan.max_steps, max_wall_s=900,
                       repeat_guard=repeat_guard)  # fmt: skip


def _runs(model: ModelURL, data: GradingData, rows: list[Instance], out: Path, plan: Plan,
          repeat_guard: bool = True, **sampling) -> dict:  # fmt: skip
    """Graded agent runs with the plan's limits (see learn_runs.agent_runs)."""
    agent = _agent(plan, repeat_guard)
    return agent_runs(model, data, rows, out, agent, plan.max_tokens, **sampling)


def _with_resolve_rate(rates: dict) -> dict:
    """The scores' rates plus ``resolve_rate``, the name the learning issue gives resolved_rate."""
    return {**rates, "resolve_rate": rates["resolved_rate"]}


def _sampled(when: str, runs: list[Trajectory]) -> dict:
    """``resolve_<when>`` (the mean of the tasks' resolve rates) and the counts behind it: 4 of
    16 against 0 of 16 reads as +0.25, and a second draw of 16 can move a rate that much."""
    if not runs:
        return {f"resolve_{when}": None}
    per_task = list(resolve_rates(runs).values())
    resolved = sum(run.resolved for run in runs)
    return {f"resolve_{when}": round(sum(per_task) / len(per_task), 3),
            f"resolved_{when}": f"{resolved} of {len(runs)}"}  # fmt: skip


def _plots(report: dict, out: Path) -> list[str]:
    """Held-out rates per model, and the RL check before/after, as PNGs in the run folder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["valid_action_rate", *(f"{name}_rate" for name in FUNNEL)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 4.5), width_ratios=[3, 1])
    models = report["heldout"]
    width = 0.8 / len(models)
    for i, (model, rates) in enumerate(models.items()):
        xs = [x + (i - (len(models) - 1) / 2) * width for x in range(len(names))]
        left.bar(xs, [rates.get(n, 0) for n in names], width, label=model)
    left.set_xticks(range(len(names)), [n.removesuffix("_rate") for n in names], rotation=20)
    left.set_ylim(0, 1)
    left.set_title(f"held-out tasks ({report['heldout_tasks']}): base vs SFT vs SFT+RL")
    left.legend()
    overfit = report["rl_overfit"]
    values = [overfit.get("resolve_before") or 0, overfit.get("resolve_after") or 0]
    labels = [f"{name}\n{overfit.get(f'resolved_{when}') or ''}"
              for name, when in (("SFT", "before"), ("SFT+RL", "after"))]  # fmt: skip
    right.bar(labels, values, color=["tab:orange", "tab:green"])
    right.set_ylim(0, 1)
    tasks = len(overfit["tasks"])
    right.set_title(f"RL check: resolve rate\n({tasks} task{'s' * (tasks != 1)}, "
                    f"{overfit['samples_per_task']} samples each)")  # fmt: skip
    fig.tight_layout()
    path = out / "learn.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [str(path)]
