"""Samples, pass@k and selectors without a sandbox: the estimator against hand-computed values
and an enumeration of every draw, the report's counts, majority's notion of "the same patch",
the verifier's prompt and the reading of its answer, and the wall between selectors and what
the grader uses (a selector that asks for the hidden tests is refused)."""

from __future__ import annotations

import asyncio
import itertools
import math
from pathlib import Path

import pytest

from sweflow.agent.client import Completion
from sweflow.agent.runs.passk import pass_at_k, report_markdown, samples_report
from sweflow.agent.runs.samples import Sampling, check_saved
from sweflow.agent.runs.selectors import SelectorContext, make_selector
from sweflow.agent.runs.selectors.majority import changed_lines
from sweflow.agent.runs.selectors.verifier import judgement, verifier_messages
from sweflow.agent.runs.selectors.view import (
    Candidate,
    Choice,
    HiddenFromSelectors,
    TaskView,
)
from sweflow.agent.runs.tts import Selection, choose, pick_all
from sweflow.agent.trajectory import ActionRecord, StepRecord, Trajectory
from sweflow.errors import ConfigError
from sweflow.instances import Instance

ROW = Instance(
    instance_id="demo__task-1",
    repo="demo/task",
    base_commit="abc",
    patch="the gold patch",
    test_patch="the test patch",
    problem_statement="get() returns the wrong tuple",
    FAIL_TO_PASS=["tests/test_x.py::test_hidden"],
    PASS_TO_PASS=["tests/test_x.py::test_kept"],
    synth={"operator": "invert_if_else"},
)

FIX = """diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,3 +1,3 @@
 def get(x):
-    return x
+    return (x,)
 # end
"""
# the same change: other context, another hunk offset, other whitespace, an index line
FIX_AGAIN = """diff --git a/pkg/mod.py b/pkg/mod.py
index 111..222 100644
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -10,1 +10,1 @@ class Other:
-    return x
+    return  (x,)
"""
SCRIPT = """diff --git a/reproduce.py b/reproduce.py
new file mode 100644
--- /dev/null
+++ b/reproduce.py
@@ -0,0 +1 @@
+print('repro')
"""
OTHER = FIX.replace("(x,)", "[x]")


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),  # c / n
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2) / C(5,2)
        (5, 2, 3, 1 - 1 / 10),  # 1 - C(3,3) / C(5,3)
        (5, 2, 4, 1.0),  # n - c < k: every draw holds a success
        (10, 0, 5, 0.0),
        (4, 4, 1, 1.0),
        (200, 13, 10, 1 - math.comb(187, 10) / math.comb(200, 10)),
    ],
)
def test_pass_at_k_by_hand(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_is_the_share_of_draws_with_a_success() -> None:
    for n in range(1, 7):
        for c in range(n + 1):
            outcomes = [True] * c + [False] * (n - c)
            for k in range(1, n + 1):
                draws = list(itertools.combinations(outcomes, k))
                share = sum(any(d) for d in draws) / len(draws)
                assert pass_at_k(n, c, k) == pytest.approx(share)


def test_pass_at_k_refuses_impossible_counts() -> None:
    for n, c, k in [(3, 4, 1), (3, 1, 0)]:
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)
    with pytest.raises(ValueError, match="pass@4 needs at least 4 samples, not 3"):
        pass_at_k(3, 1, 4)


def run(iid: str, index: int, resolved: bool | None, patch: str = "", **kw) -> Trajectory:
    reward = None if resolved is None else {"resolved": resolved, "infrastructure": False}
    kw.setdefault("exit_status", "submitted")
    return Trajectory(instance_id=iid, run=index, patch=patch, reward=reward, **kw)


def test_report_counts_tasks_samples_and_picks() -> None:
    runs = [
        run("a", 0, False),
        run("a", 1, True),
        run("a", 2, True),
        run("b", 0, False),
        run("b", 1, False),
        run("b", 2, None, exit_status="sandbox_error"),  # no verdict: left out, counted
    ]
    picks = {"first": {"a": 0, "b": 0}, "majority": {"a": 1, "b": None}}
    report = samples_report(runs, 3, picks)
    a = 1 - math.comb(1, 2) / math.comb(3, 2)  # 2 of 3 resolve
    assert report.pass_at_k[1] == pytest.approx(round((2 / 3 + 0) / 2, 4))
    assert report.pass_at_k[2] == pytest.approx(round((a + 0) / 2, 4))
    assert report.tasks_at_k == {1: 2, 2: 2, 3: 1}  # b has 2 graded samples
    assert report.pass_at_k[3] == 1.0
    assert report.best_of_n == {"first": 0.0, "majority": 0.5}
    assert report.best_of_n_counts["majority"].resolved == 1
    assert (report.oracle.resolved, report.oracle.tasks, report.oracle_pass_at_n) == (1, 2, 0.5)
    assert (report.graded, report.resolved_samples, report.ungraded) == (5, 2, 1)
    text = report_markdown(report)
    assert "| pass@1 | 0.333 | 2 of 5 samples resolved |" in text
    assert "| best-of-3 majority | 0.500 | 1 of 2 tasks |" in text
    assert "| oracle pass@3 | 0.500 | 1 of 2 tasks |" in text


def test_majority_compares_changed_lines_only() -> None:
    assert changed_lines(FIX) == changed_lines(FIX_AGAIN) != changed_lines(OTHER)
    assert changed_lines(FIX + SCRIPT) == changed_lines(FIX)  # a created script does not vote
    assert changed_lines(SCRIPT) == () == changed_lines("") == changed_lines("not a diff")

    majority = make_selector("majority", SelectorContext())
    candidates = [
        Candidate(0, OTHER, "submitted"),
        Candidate(1, "", "submitted"),
        Candidate(2, FIX + SCRIPT, "submitted"),
        Candidate(3, "", "submitted"),
        Candidate(4, FIX_AGAIN, "submitted"),
    ]
    choice = asyncio.run(choose(majority, TaskView.of(ROW), candidates))
    assert choice.index == 2  # two samples make FIX; the empty ones do not vote
    assert choice.scores == {0: 1, 1: 0, 2: 2, 3: 0, 4: 2}
    tie = asyncio.run(choose(majority, TaskView.of(ROW), candidates[:3]))
    assert tie.index == 0  # one vote each: the first group


def test_a_task_view_holds_only_what_the_agent_saw() -> None:
    view = TaskView.of(ROW)
    assert view.problem_statement == ROW.problem_statement and view.repo == "demo/task"
    for hidden in ("FAIL_TO_PASS", "PASS_TO_PASS", "test_patch", "patch", "eval_script"):
        with pytest.raises(HiddenFromSelectors, match=hidden):
            getattr(view, hidden, None)  # a default does not get around it
    with pytest.raises(AttributeError):
        view.synth  # noqa: B018  a row's extra fields are not carried either
    candidate = Candidate.of(run("demo__task-1", 0, True, FIX))
    with pytest.raises(HiddenFromSelectors, match="reward"):
        candidate.reward  # noqa: B018


class Peeking:
    """A selector that asks for the hidden tests."""

    def __init__(self, context: SelectorContext) -> None:
        pass

    async def choose(self, task: TaskView, candidates: list[Candidate]) -> Choice:
        hidden = task.FAIL_TO_PASS
        return Choice(candidates[0].index, {0: hidden})


class Honest:
    def __init__(self, context: SelectorContext) -> None:
        pass

    async def choose(self, task: TaskView, candidates: list[Candidate]) -> Choice:
        return Choice(candidates[-1].index, {})


def test_a_selector_that_asks_for_the_hidden_tests_is_refused(tmp_path: Path) -> None:
    runs = [run(ROW.instance_id, k, k == 1, FIX if k == 1 else "") for k in range(2)]
    peeking = Selection([f"{__name__}:Peeking"], f"{__name__}:Peeking", SelectorContext())
    with pytest.raises(HiddenFromSelectors, match="FAIL_TO_PASS"):
        asyncio.run(pick_all([ROW], runs, peeking, tmp_path))
    honest = Selection([f"{__name__}:Honest"], f"{__name__}:Honest", SelectorContext())
    assert asyncio.run(pick_all([ROW], runs, honest, tmp_path)) == {
        f"{__name__}:Honest": {ROW.instance_id: 1}
    }


def test_a_selector_handed_the_task_row_or_a_run_is_refused() -> None:
    honest = Honest(SelectorContext())
    with pytest.raises(HiddenFromSelectors, match="Instance"):
        asyncio.run(choose(honest, ROW, [Candidate(0, FIX, "submitted")]))  # type: ignore[arg-type]
    traj = run(ROW.instance_id, 0, True, FIX)
    with pytest.raises(HiddenFromSelectors, match="Trajectory"):
        asyncio.run(choose(honest, TaskView.of(ROW), [traj]))  # type: ignore[list-item]


def test_selection_checks_its_names_before_work() -> None:
    with pytest.raises(ConfigError, match="not among"):
        Selection(["first"], "majority", SelectorContext())
    with pytest.raises(ConfigError, match="unknown selector"):
        make_selector("best", SelectorContext())
    with pytest.raises(ConfigError, match="endpoint"):
        make_selector("verifier", SelectorContext())
    with pytest.raises(ConfigError, match="store"):
        make_selector("tests", SelectorContext())


def test_sample_seeds_differ_repeat_and_are_recorded(tmp_path: Path) -> None:
    sampling = Sampling(temperature=1.0, seed=7)
    seeds = [sampling.seed_of(k) for k in range(16)]
    assert len(set(seeds)) == 16 and all(0 <= s < 2**31 for s in seeds)
    assert seeds == [Sampling(1.0, 7).seed_of(k) for k in range(16)]
    assert set(seeds).isdisjoint(Sampling(1.0, 8).seed_of(k) for k in range(16))
    saved = run("t", 3, True, sampling=sampling.record(3))
    saved.save(tmp_path / "trajectories" / "t" / "run-3.json")
    check_saved(tmp_path, sampling)  # the same settings resume
    with pytest.raises(ConfigError, match="run-3.json"):
        check_saved(tmp_path, Sampling(temperature=1.0, seed=8))
    with pytest.raises(ConfigError, match="temperature 1.0"):
        check_saved(tmp_path, Sampling(temperature=0.7, seed=7))


def verdict(content: str, logprobs=None) -> float | None:
    message = {"role": "assistant", "content": content}
    return judgement(Completion(message, 0, 0, 0.0, "stop", logprobs=logprobs))


def test_the_verifier_reads_yes_and_no() -> None:
    lp = [("<", {"<": 0.0}), ("YES", {"YES": math.log(0.6), " No": math.log(0.2)})]
    assert verdict("<judgement>YES", lp) == pytest.approx(0.75)
    assert verdict("yes, it does") == 1.0 and verdict("<judgement>NO</judgement>") == 0.0
    assert verdict("I cannot tell") is None


def test_the_verifier_prompt_fits_keeping_the_issue_and_patch() -> None:
    steps = [
        StepRecord(
            index=i,
            thought=f"thought {i}",
            actions=[
                ActionRecord(tool="bash", args={"command": f"ls {i}"}, observation="x" * 3000)
            ],
        )
        for i in range(12)
    ]
    candidate = Candidate.of(run(ROW.instance_id, 0, None, FIX, steps=steps))
    whole = verifier_messages(TaskView.of(ROW), candidate, 10**6)[1]["content"]
    assert whole.count("<step n=") == 12 and "x" * 3000 in whole and "ls 11" in whole
    short = verifier_messages(TaskView.of(ROW), candidate, 6000)
    text = short[1]["content"]
    assert len(short[0]["content"]) + len(text) <= 6000
    assert ROW.problem_statement in text and "+    return (x,)" in text
    assert "characters of output folded" in text and "thought 0" in text
    assert text.endswith("Does the patch resolve the issue? Answer YES or NO.")


def test_every_registered_selector_loads_and_is_documented(tmp_path: Path) -> None:
    from sweflow.agent.config import ModelConfig
    from sweflow.agent.runs.selectors import SELECTORS

    page = (Path(__file__).resolve().parents[2] / "docs" / "selectors.md").read_text()
    endpoint = ModelConfig(base_url="http://127.0.0.1:9/v1", model="judge")
    context = SelectorContext(store=tmp_path, verifier=endpoint)
    for name in SELECTORS:
        assert callable(make_selector(name, context).choose)
        assert f"| `{name}` |" in page, name
