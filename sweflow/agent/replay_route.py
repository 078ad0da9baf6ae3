"""How the replay teacher reaches a place the gold patch changes, along clues only.

The teacher knows the repository's source (sweflow.agent.source_map) and where the fix goes;
the student knows neither. So the teacher plans with what it knows but moves only by what the
issue and its own observations name (sweflow.agent.clues): a view of a line a traceback frame
or a search hit points at, a search (``grep``) for a name the issue or a view showed or for
an error message's words, or reading on from a page it viewed. The route is the cheapest such
chain (in actions) that ends on a page showing the whole hunk; the next step is its first move,
and the route is planned again after each observation. No route within :data:`MAX_COST` actions:
the place cannot be found the way a student could find it.
"""

from __future__ import annotations

import heapq
import itertools
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from sweflow.agent.actions import Action
from sweflow.agent.clues import (
    called,
    code_blocks,
    error_messages,
    fragments,
    frames,
    grep_hits,
    identifiers,
    inline_code,
    quoted_names,
    subject,
)
from sweflow.agent.source_map import Definition, SourceMap
from sweflow.agent.tools import BASH, EDITOR

PAGE = 40  # lines one view shows
LEAD_IN = 10  # lines shown above the line a clue points at, inside a long definition
MAX_DEFINITIONS = 3  # a name defined in more places is too vague a clue to follow
MAX_HITS = 3  # likewise, a message found on more lines
MAX_COST = 12  # actions: a place further away than this is not found
NUMBERED = re.compile(r"^ *(\d+)\t(.*)$", re.MULTILINE)  # a line of a ``view`` observation


@dataclass(frozen=True)
class Page:
    """Lines ``start``..``end`` of a file, as one ``view`` shows them, and the definition they
    belong to (reading on stays inside it; None: module-level lines, which are not read on)."""

    path: str
    start: int
    end: int
    reading: Definition | None = None

    def holds(self, path: str, first: int, last: int) -> bool:
        return self.path == path and self.start <= first and last <= self.end


@dataclass(frozen=True)
class Target:
    """The lines a hunk covers (context included) in the file as it is before any edit."""

    path: str
    first: int
    last: int


@dataclass(frozen=True)
class Move:
    """One step of a route: the thought and action, and the page it shows (None: a search)."""

    thought: str
    action: Action
    page: Page | None = None
    about: str = ""  # what a view shows: "`a definition`", or "The code in <file>"
    term: str = ""  # what a search looks for


@dataclass
class Knowledge:
    """What the issue and the observations so far name: the clues the teacher may follow."""

    issue: str
    workdir: str
    pages: dict[Page, str] = field(default_factory=dict)  # viewed page -> its observation
    hits: dict[tuple[str, int], str] = field(default_factory=dict)  # search hit -> the term
    frames: dict[tuple[str, int], str] = field(default_factory=dict)  # frame -> its function
    leads: dict[str, str] = field(default_factory=dict)  # a name to look up -> why
    searched: set[str] = field(default_factory=set)
    text: str = ""

    def __post_init__(self) -> None:
        # leads in order of preference (a route's first move is the first of equal cost): the
        # failing tests' subjects, what the issue names, what its reproduction calls, ...
        self.text = self.issue
        named = identifiers("\n".join(inline_code(self.issue)))
        for word in named:
            if name := subject(word):
                self.leads.setdefault(name, f"The failing test `{word}` is about `{name}`")
        for word in named:
            self.leads.setdefault(word, f"The issue names `{word}`")
        for block in code_blocks(self.issue):
            for word in called(block):
                self.leads.setdefault(word, f"The reproduction calls `{word}`")
        for message in error_messages(self.issue):
            for word in quoted_names(message):
                self.leads.setdefault(word, f"The error names `{word}`")
        for word in called(self.issue):
            self.leads.setdefault(word, f"The issue mentions `{word}`")

    def learn(self, move: Move | None, observation: str) -> None:
        """Take in an observation (``move`` None: a run of code, such as the reproduction)."""
        self.text += "\n" + observation
        if move is not None and move.page is not None:
            self.pages[move.page] = observation
            for word in called(observation):
                self.leads.setdefault(word, f"{move.about} calls `{word}`")
            return
        if move is not None:
            self.searched.add(move.term)
            for hit in grep_hits(observation):
                self.hits.setdefault(hit, move.term)
            return
        for frame in frames(observation, self.workdir):
            self.frames.setdefault((frame.path, frame.line), frame.func)
            self.leads.setdefault(frame.func, f"The traceback goes through `{frame.func}`")
        for word in called(observation):
            self.leads.setdefault(word, f"The traceback shows a call to `{word}`")

    def shown(self, target: Target) -> str | None:
        """The file text around the target as the views showed it (the run of lines seen
        without a gap that holds the whole target), or None while some of it is unseen."""
        seen: dict[int, str] = {}
        for page, observation in self.pages.items():
            if page.path == target.path:
                seen.update((int(m[1]), m[2]) for m in NUMBERED.finditer(observation))
        if not all(n in seen for n in range(target.first, target.last + 1)):
            return None
        first, last = target.first, target.last
        while first - 1 in seen:
            first -= 1
        while last + 1 in seen:
            last += 1
        return "".join(seen[n] + "\n" for n in range(first, last + 1))


class Router:
    """The cheapest clue-to-clue route from what is known to a target, by Dijkstra."""

    def __init__(self, source: SourceMap, workdir: str) -> None:
        self.source = source
        self.workdir = workdir.rstrip("/")

    def next_move(self, known: Knowledge, target: Target) -> Move | None:
        """The first move of the cheapest route to a page showing ``target``; None: none."""
        order = itertools.count()
        queue: list[tuple[int, int, Page, Move]] = []
        for cost, page, move in self._from_knowledge(known, target):
            heapq.heappush(queue, (cost, next(order), page, move))
        settled: set[Page] = set()
        while queue:
            cost, _, page, first = heapq.heappop(queue)
            if page in settled or cost > MAX_COST:
                continue
            if page.holds(target.path, target.first, target.last):
                return first
            settled.add(page)
            for step, following in self._from_page(page, known, target):
                heapq.heappush(queue, (cost + step, next(order), following, first))
        return None

    # -- edges ------------------------------------------------------------------------------
    def _from_knowledge(self, known: Knowledge, target: Target) -> Iterator[tuple[int, Page, Move]]:
        views: list[tuple[Page, str]] = []
        for (path, line), func in known.frames.items():
            if path in self.source.lines:
                why = f"The traceback goes through `{func}` in {path} at line {line}"
                views.append((self.page_at(path, line, target), f"{why}; let me look there."))
        for (path, line), term in known.hits.items():
            if path in self.source.lines:
                thought = self._hit_thought(path, line, term)
                views.append((self.page_at(path, line, target), thought))
        for page in known.pages:
            views.extend(self._scrolls(page, target))
        for page, thought in views:
            if page not in known.pages:
                yield 1, page, self.view(page, thought)
        for name, why in known.leads.items():
            term = definition_pattern(name)
            if term not in known.searched:
                for page in self._definitions(name, target):
                    yield 2, page, self.search(term, f"{why}; let me find where it is defined.")
        for fragment in fragments(known.text):
            hits = self.source.containing(fragment)
            if fragment not in known.searched and 0 < len(hits) <= MAX_HITS:
                thought = f'The error says "{fragment}"; let me find where that comes from.'
                for path, line in hits:
                    yield 2, self.page_at(path, line, target), self.search(fragment, thought)

    def _from_page(
        self, page: Page, known: Knowledge, target: Target
    ) -> Iterator[tuple[int, Page]]:
        yield from ((1, following) for following, _ in self._scrolls(page, target))
        text = "\n".join(self.source.lines[page.path][page.start - 1 : page.end])
        for name in called(text):
            cost = 1 if definition_pattern(name) in known.searched else 2
            yield from ((cost, following) for following in self._definitions(name, target))

    def _definitions(self, name: str, target: Target) -> list[Page]:
        found = self.source.by_name.get(name, [])
        if len(found) > MAX_DEFINITIONS or name.startswith("__"):
            return []
        return [self.page_at(d.path, d.start, target) for d in found]

    def _scrolls(self, page: Page, target: Target) -> Iterator[tuple[Page, str]]:
        """Reading on (or back) inside the definition the page belongs to."""
        held = page.reading
        if held is None:
            return
        if page.end < held.end:
            below = replace(page, start=page.end + 1, end=min(held.end, page.end + PAGE))
            thought = f"`{held.name}` goes on below line {page.end}; let me read on."
            yield self.fit(below, target), thought
        if page.start > held.start:
            above = replace(page, start=max(held.start, page.start - PAGE), end=page.start - 1)
            thought = f"Let me read `{held.name}` above line {page.start}."
            yield self.fit(above, target), thought

    # -- pages and actions ------------------------------------------------------------------
    def page_at(self, path: str, line: int, target: Target) -> Page:
        """The page a clue pointing at ``line`` leads to: the whole definition holding it when
        it is short, else from a little above the line."""
        held = self.source.enclosing(path, line)
        if held is None:
            start = max(1, line - LEAD_IN)
            end = min(self.source.length(path), start + PAGE - 1)
            return self.fit(Page(path, start, end), target)
        if held.end - held.start < PAGE:
            return self.fit(Page(path, held.start, held.end, held), target)
        start = max(held.start, line - LEAD_IN)
        return self.fit(Page(path, start, min(held.end, start + PAGE - 1), held), target)

    @staticmethod
    def fit(page: Page, target: Target) -> Page:
        """A page that shows part of the target is widened to show all of it."""
        if page.path != target.path or page.end < target.first or page.start > target.last:
            return page
        return replace(page, start=min(page.start, target.first), end=max(page.end, target.last))

    def view(self, page: Page, thought: str) -> Move:
        args = {"command": "view", "path": self.absolute(page.path)}
        args["view_range"] = [page.start, page.end]
        about = f"`{page.reading.name}`" if page.reading else f"The code in {page.path}"
        return Move(thought, Action(EDITOR, args), page=page, about=about)

    @staticmethod
    def search(term: str, thought: str) -> Move:
        """``grep -rn`` for a definition (a regular expression) or a message (fixed text)."""
        flag = "-rnE" if term.startswith(DEFINITION) else "-rnF"
        command = f"grep {flag} {shlex.quote(term)} --include='*.py' ."
        return Move(thought, Action(BASH, {"command": command}), term=term)

    def absolute(self, path: str) -> str:
        return f"{self.workdir}/{path}"

    def _hit_thought(self, path: str, line: int, term: str) -> str:
        if term.startswith(DEFINITION):
            name = term[len(DEFINITION) : -2]
            return f"`{name}` is defined in {path} at line {line}; let me read it."
        return f'{path} line {line} has "{term}"; let me read the code around it.'


DEFINITION = "(def|class) "


def definition_pattern(name: str) -> str:
    """The ``grep -E`` pattern of the line that defines ``name``."""
    return rf"{DEFINITION}{name}\b"
