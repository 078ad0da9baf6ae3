"""The replay teacher's corrections of a student's own runs (DAgger: Ross, Gordon and Bagnell,
2011), as SFT data.

A student fine-tuned on the teacher's trajectories has only seen states the teacher reached. On
its own it soon stands where no golden step starts (a search that found nothing, a page beside
the place), and nothing it learned says what to do from there: the fine-tuned SmolLM2 answered
a search that found nothing with a hit it made up. Here the teacher labels the states of the
student's run before its first edit: for each, what the teacher would do next knowing what the
run has seen (sweflow.agent.teacher.replay.next_step). Where that differs from what the student did,
the conversation up to that step, the student's replies kept as context (``weight`` 0), plus
the teacher's reply, is one SFT record: what the student has to learn.

A run is labelled only until the student repeats an action it took before: the reply that
repeats is corrected, the states after it are not, since every later state's history holds the
loop. A correction whose history holds a repeat teaches the student to repeat: a model trained
on such corrections looped where the one before them did not (benchmarks/results/learn.md, the
teacher's corrections).
"""

from __future__ import annotations

import shlex
from typing import Any

from sweflow.agent.actions import Action, same_actions
from sweflow.agent.config import TeacherEdits
from sweflow.agent.editor import view_span
from sweflow.agent.teacher.clues import grep_operands, repo_relative, reproduction
from sweflow.agent.teacher.imitable import HEREDOC
from sweflow.agent.teacher.replay import next_step, reply_message
from sweflow.agent.teacher.replay_route import Knowledge, Move, Page, Router
from sweflow.agent.teacher.source_map import SourceMap
from sweflow.agent.tools import BASH, EDITOR
from sweflow.agent.trajectory import ActionRecord, Trajectory
from sweflow.instances import Instance

SOURCE = "correction"  # the ``source`` of a correction's SFT record
# commands that only read (and run code); anything else may have changed the repository
READS = {"grep", "cat", "ls", "find", "head", "tail", "wc", "python", "python3", "pytest"}
GIT_READS = {"status", "diff", "log", "show", "grep"}


def corrections(
    run: Trajectory,
    instance: Instance,
    source: SourceMap,
    workdir: str,
    edits: TeacherEdits = "str_replace",
) -> list[dict[str, Any]]:
    """SFT records of the teacher's corrections along ``run`` (the student's), in step order;
    an edit it teaches is made with ``edits``, the editor command the golden runs used."""
    known = Knowledge(instance.problem_statement, workdir)
    router = Router(source, workdir)
    replies = [i for i, m in enumerate(run.messages) if m.get("role") == "assistant"]
    records, reproduced = [], reproduction(instance.problem_statement) is None
    taken: list[list[ActionRecord]] = []  # the student's actions, step by step
    for step, at in zip(run.steps, replies, strict=False):
        label = next_step(instance, known, router, source, workdir, reproduced, edits)
        if label is None:
            break
        thought, action = label
        if not same_actions([action], step.actions):
            reply = reply_message(thought, action, run.tool_mode, step.index)
            records.append(_record(run, at, reply))
        if any(same_actions(step.actions, before) for before in taken):
            return records  # the student loops: every later state's history holds the loop
        taken.append(step.actions)
        for done in step.actions:  # none when the reply did not parse
            if not _absorb(known, done, source, workdir):
                return records
            reproduced = reproduced or (done.tool == BASH and _feeds_python(done))
    return records


def _feeds_python(done: ActionRecord) -> bool:
    """A script fed to Python on stdin: the issue's reproduction, or the student's own version
    of it (its output is what the teacher wanted to see)."""
    return HEREDOC.match(str(done.args.get("command", "")).strip()) is not None


def _record(run: Trajectory, at: int, reply: dict[str, Any]) -> dict[str, Any]:
    """The conversation before the reply at message ``at``, the student's turns untrained."""
    context = [{**m, "weight": 0} if m.get("role") == "assistant" else m for m in run.messages[:at]]
    record: dict[str, Any] = {
        "instance_id": run.instance_id,
        "source": SOURCE,
        "tool_mode": run.tool_mode,
        "messages": [*context, reply],
    }
    if run.tools:
        record["tools"] = run.tools
    return record


def _absorb(known: Knowledge, done: ActionRecord, source: SourceMap, workdir: str) -> bool:
    """Take in what one of the student's actions showed; False for one that changes the
    repository or ends the run (the teacher's plan no longer holds after it)."""
    action = Action(done.tool, done.args)
    if done.tool == EDITOR and done.args.get("command") == "view":
        path = repo_relative(str(done.args.get("path", "")), workdir)
        if path in source.lines and done.observation.startswith("Here is the result"):
            known.learn(Move("", action, page=_viewed(path, done.args, source)), done.observation)
        return True
    if done.tool != BASH:
        return False
    try:
        words = shlex.split(str(done.args.get("command", "")))
    except ValueError:
        words = []
    reads = words[:1] == ["git"] and words[1:2] and words[1] in GIT_READS
    if not (reads or (words and words[0] in READS)) or {">", ">>", "tee"} & set(words):
        return False
    if words[:1] == ["grep"]:
        operands = grep_operands(words)
        known.learn(Move("", action, term=operands[0] if operands else ""), done.observation)
    else:
        known.learn(None, done.observation)
    return True


def _viewed(path: str, args: dict[str, Any], source: SourceMap) -> Page:
    """The page a student's ``view`` showed (the whole file without a range), as the editor
    showed it (the view succeeded, so its range is one the editor takes)."""
    length = source.length(path)
    if args.get("view_range") is None:
        return Page(path, 1, length)
    first, last = view_span(args["view_range"], length)
    return Page(path, first, min(last, length), source.enclosing(path, first))
