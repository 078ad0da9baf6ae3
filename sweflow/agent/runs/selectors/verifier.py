"""``verifier``: execution-free selection, as R2E-Gym's verifier does it: a served model reads
each sample's run (the issue, every step's thought, action and output, the final patch) and is
asked whether the patch resolves the issue; its answer's probability of YES is the sample's
score, and the highest score wins (a tie: the first sample).

The format (docs/selectors.md says it for people): a system message that sets the task and
asks for one word, YES or NO; a user message of ``<issue>``, ``<steps>`` (``<step n=..>``
with ``<thought>``, ``<action>``, ``<output>``) and ``<patch>`` blocks, then the question.
The patch lists the repository's files first and the files it creates (a reproduction
script) after. Outputs, then actions, are folded longest first until the prompt fits
``max_prompt_chars``; past that the middle steps are left out, then the patch's tail is cut.

The reply is asked at temperature 0 with the top logprobs of each token: at the first token
whose alternatives include YES or NO (any case, spaces stripped, so ``<judgement>YES`` reads
too), the score is P(YES) / (P(YES) + P(NO)). An endpoint without logprobs gives the reply's
first word: YES 1.0, NO 0.0; anything else is no score (ranked below every score).
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from sweflow.agent.actions import Action
from sweflow.agent.client import Completion, ModelClient
from sweflow.agent.runs.selectors import SelectorContext
from sweflow.agent.runs.selectors.view import Candidate, Choice, TaskView
from sweflow.agent.trajectory import ActionRecord
from sweflow.errors import ConfigError

SYSTEM = (
    "You review the work of a software engineer on an issue in a code repository. You are "
    "shown the issue, each step the engineer took (its reasoning, the action it ran and the "
    "output it saw) and the final patch. Judge whether the final patch resolves the issue: it "
    "changes the code the issue is about, in the way the issue asks, and breaks nothing that "
    "worked. Answer with one word: YES if the patch resolves the issue, NO if it does not."
)
QUESTION = "Does the patch resolve the issue? Answer YES or NO."
TOP_LOGPROBS = 5
REPLY_TOKENS = 8  # room for "<judgement>YES" and the like


@dataclass
class _Step:
    thought: str
    actions: list[str]
    outputs: list[str]

    def render(self, n: int) -> str:
        parts = [f'<step n="{n}">']
        if self.thought.strip():
            parts.append(f"<thought>\n{self.thought.strip()}\n</thought>")
        for action, output in zip(self.actions, self.outputs, strict=True):
            parts.append(f"<action>\n{action}\n</action>\n<output>\n{output}\n</output>")
        return "\n".join([*parts, "</step>"])


def _action_text(record: ActionRecord) -> str:
    try:
        return Action(record.tool, record.args).command_line()
    except KeyError:  # a tool this agent no longer has
        return f"{record.tool} {json.dumps(record.args)}"


def verifier_messages(task: TaskView, candidate: Candidate, max_chars: int) -> list[dict]:
    """The verifier's conversation for one sample, within ``max_chars`` (see the docstring)."""
    steps = [
        _Step(s.thought, [_action_text(a) for a in s.actions], [a.observation for a in s.actions])
        for s in candidate.steps
    ]
    head = f"<issue>\n{task.problem_statement.strip()}\n</issue>\n\n"
    patch = review_order(candidate.patch).strip() or "(no change)"
    numbered = list(enumerate(steps, start=1))

    def user(patch_text: str = patch) -> str:
        body = "\n".join(step.render(n) for n, step in numbered)
        return f"{head}<steps>\n{body}\n</steps>\n\n<patch>\n{patch_text}\n</patch>\n\n{QUESTION}"

    budget = max_chars - len(SYSTEM)
    for kind in ("outputs", "actions"):  # the longest outputs first, then the longest actions
        blocks = sorted(
            (
                (len(text), i, j)
                for i, s in enumerate(steps)
                for j, text in enumerate(getattr(s, kind))
            ),
            reverse=True,
        )
        for size, i, j in blocks:
            if len(user()) <= budget:
                break
            getattr(steps[i], kind)[j] = f"[{size} characters of {kind[:-1]} folded]"
    while len(numbered) > 2 and len(user()) > budget:
        del numbered[len(numbered) // 2]  # then the middle steps
    text = user()
    if len(text) > budget:  # and last the patch's tail
        room = max(200, len(patch) - (len(text) - budget))
        text = user(patch[:room] + "\n[patch cut]")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text[:budget]}]


def review_order(patch: str) -> str:
    """The patch with the repository's files first and the files it creates (a reproduction
    script) after, so that a cut keeps the change itself."""
    try:
        files = PatchSet(patch or "")
    except UnidiffParseError:
        return patch
    ordered = [f for f in files if not f.is_added_file] + [f for f in files if f.is_added_file]
    return "".join(str(f) for f in ordered) if files else patch


def judgement(completion: Completion) -> float | None:
    """P(YES) / (P(YES) + P(NO)) at the first token that offers either; else the reply's
    first word (YES 1.0, NO 0.0); None when it says neither."""
    for _, alternatives in completion.logprobs or []:
        yes = _probability(alternatives, "YES")
        no = _probability(alternatives, "NO")
        if yes or no:
            return yes / (yes + no)
    words = (completion.message.get("content") or "").replace("<", " ").replace(">", " ").split()
    for word in words:
        word = word.strip(".,:;!\"'").upper()
        if word in ("YES", "NO"):
            return 1.0 if word == "YES" else 0.0
    return None


def _probability(alternatives: dict[str, float], word: str) -> float:
    return sum(math.exp(lp) for token, lp in alternatives.items() if token.strip().upper() == word)


class Verifier:
    def __init__(self, context: SelectorContext) -> None:
        if context.verifier is None:
            raise ConfigError("the verifier selector needs a model endpoint to judge with")
        self.context = context
        self.model = context.verifier.model_copy(
            update={"temperature": 0.0, "max_tokens": REPLY_TOKENS}
        )

    async def choose(self, task: TaskView, candidates: list[Candidate]) -> Choice:
        ordered = sorted(candidates, key=lambda c: c.index)
        client = ModelClient(self.model)
        try:
            replies = await asyncio.gather(
                *(
                    client.complete(
                        verifier_messages(task, c, self.context.max_prompt_chars),
                        top_logprobs=TOP_LOGPROBS,
                    )
                    for c in ordered
                )
            )
        finally:
            await client.close()
        scores = {c.index: judgement(r) for c, r in zip(ordered, replies, strict=True)}
        best = max(ordered, key=lambda c: -1.0 if scores[c.index] is None else scores[c.index])
        shown = "none" if scores[best.index] is None else f"{scores[best.index]:.3f}"
        return Choice(best.index, {i: s for i, s in scores.items()}, f"P(YES) {shown}")
