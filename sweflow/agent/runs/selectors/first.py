"""``first``: the first sample, what one run per task would have given (the baseline the other
selectors are measured against)."""

from __future__ import annotations

from sweflow.agent.runs.selectors import SelectorContext
from sweflow.agent.runs.selectors.view import Candidate, Choice, TaskView


class First:
    def __init__(self, context: SelectorContext) -> None:
        self.context = context

    async def choose(self, task: TaskView, candidates: list[Candidate]) -> Choice:
        first = min(c.index for c in candidates)
        return Choice(first, {}, "the first sample")
