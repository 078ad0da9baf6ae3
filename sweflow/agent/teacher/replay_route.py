"""How the replay teacher reaches a place the gold patch changes, along clues only.

The teacher knows the repository's source (sweflow.agent.teacher.source_map) and where the fix
goes; the student knows neither. So the teacher plans with what it knows but moves only by what
the issue and its own observations name (sweflow.agent.teacher.clues): a view of a line a
traceback frame or a search hit points at, a search (``grep``) for a name the issue or a view
showed or for an error message's words, or reading on from a page it viewed. The route is the
cheapest such chain (in actions) that ends on a page showing lines of the hunk not seen yet; the
next step is its first move, and the route is planned again after each observation until the
whole hunk was seen. No route within :data:`MAX_COST` actions: the place cannot be found the
way a student could find it.

Three choices would otherwise rest on what only the teacher knows, so they follow fixed rules a
student can copy: the searches the issue suggests are made in the issue's order (one that finds
nothing is shown, and the next follows: a student cannot know beforehand which name is
defined); a traceback's frames are read from the one it ends in upwards (the frame holding the
bug is not always the deepest, but only the teacher knows which one it is); and every view is
one page of :data:`PAGE` lines from the line a clue names (a definition's ``def`` line, else
:data:`LEAD_IN` lines above it), never a range cut to where a definition or the gold hunk ends.
"""

from __future__ import annotations

import builtins
import heapq
import itertools
import keyword
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field

from sweflow.agent.actions import Action
from sweflow.agent.teacher.clues import (
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
    test_id_name,
)
from sweflow.agent.teacher.source_map import Definition, SourceMap
from sweflow.agent.tools import BASH, EDITOR

PAGE = 40  # lines one view shows
LEAD_IN = 10  # lines shown above the line a clue points at, inside a long definition
MAX_DEFINITIONS = 3  # a name defined in more places is too vague a clue to follow
MAX_HITS = 3  # likewise, a message found on more lines
MAX_COST = 12  # actions: a place further away than this is not found
# print, len, import (as in "from x import (a, b)"): never a lead worth searching for
UNDEFINABLE = frozenset(dir(builtins)) | frozenset(keyword.kwlist)
NUMBERED = re.compile(r"^ *(\d+)\t(.*)$", re.MULTILINE)  # a line of a ``view`` observation


@dataclass(frozen=True)
class Page:
    """Lines ``start``..``end`` of a file, as one ``view`` shows them, and the definition the
    clue that led here points into (reading on stays inside it; None: module-level lines,
    which are not read on)."""

    path: str
    start: int
    end: int
    reading: Definition | None = None


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
    # frame -> its function and how many frames lie below it in its traceback (0: it ends there)
    frames: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    leads: dict[str, str] = field(default_factory=dict)  # a name to look up -> why
    searched: set[str] = field(default_factory=set)
    asked: dict[str, str] = field(default_factory=dict)  # the issue's searches, in order -> why
    text: str = ""

    def __post_init__(self) -> None:
        # leads in order of preference (a route's first move is the first of equal cost): the
        # failing tests' subjects, what the issue names, what its reproduction calls, ...
        self.text = self.issue
        named = identifiers("\n".join(map(test_id_name, inline_code(self.issue))))
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
        for name, why in self.leads.items():
            if not (name.startswith("__") or subject(name) or name in UNDEFINABLE):
                self.asked.setdefault(definition_pattern(name), lookup_thought(why))
        for fragment in fragments(self.issue):
            self.asked.setdefault(fragment, message_thought(fragment))

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
        found = frames(observation, self.workdir)
        for below, frame in enumerate(reversed(found)):
            self.frames.setdefault((frame.path, frame.line), (frame.func, below))
        for frame in found:
            self.leads.setdefault(frame.func, f"The traceback goes through `{frame.func}`")
        for word in called(observation):
            self.leads.setdefault(word, f"The traceback shows a call to `{word}`")

    def seen(self, path: str) -> dict[int, str]:
        """The lines of ``path`` the views so far showed, by number."""
        lines: dict[int, str] = {}
        for page, observation in self.pages.items():
            if page.path == path:
                lines.update((int(m[1]), m[2]) for m in NUMBERED.finditer(observation))
        return lines

    def shown(self, target: Target) -> str | None:
        """The file text around the target as the views showed it (the run of lines seen
        without a gap that holds the whole target), or None while some of it is unseen."""
        seen = self.seen(target.path)
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
        """The first move of the cheapest route to a page showing lines of ``target`` not yet
        seen (a hunk across two pages takes two routes, the second mostly reading on); None:
        there is none."""
        seen = known.seen(target.path)
        unseen = [n for n in range(target.first, target.last + 1) if n not in seen]
        order = itertools.count()
        queue: list[tuple[int, int, Page, Move]] = []
        for cost, page, move in self._from_knowledge(known):
            heapq.heappush(queue, (cost, next(order), page, move))
        settled: set[Page] = set()
        while queue:
            cost, _, page, first = heapq.heappop(queue)
            if page in settled or cost > MAX_COST:
                continue
            if page.path == target.path and any(page.start <= n <= page.end for n in unseen):
                return first
            settled.add(page)
            for step, following in self._from_page(page, known):
                heapq.heappush(queue, (cost + step, next(order), following, first))
        return None

    # -- edges ------------------------------------------------------------------------------
    def _from_knowledge(self, known: Knowledge) -> Iterator[tuple[int, Page, Move]]:
        yield from self._up_the_traceback(known)
        views: list[tuple[Page, str]] = []
        for (path, line), term in known.hits.items():
            if path in self.source.lines:
                thought = self._hit_thought(path, line, term)
                lead_in = 0 if term.startswith(DEFINITION) else LEAD_IN
                views.append((self.page_at(path, line, lead_in), thought))
        for page in known.pages:
            views.extend(self._scrolls(page))
        for page, thought in views:
            if page not in known.pages:
                yield 1, page, self.view(page, thought)
        yield from self._asked(known)
        for name, why in known.leads.items():
            term = definition_pattern(name)
            if term not in known.searched and term not in known.asked:
                for page in self._definitions(name):
                    yield 2, page, self.search(term, lookup_thought(why))
        for fragment in fragments(known.text):
            if fragment not in known.searched and fragment not in known.asked:
                for page in self._found(fragment):
                    yield 2, page, self.search(fragment, message_thought(fragment))

    def _up_the_traceback(self, known: Knowledge) -> Iterator[tuple[int, Page, Move]]:
        """The pages of the traceback frames no view has shown yet, deepest first. Reaching the
        k-th one costs the k - 1 before it too, as the next move is always the first of them."""
        waiting = [
            (path, line, func, below)
            for (path, line), (func, below) in known.frames.items()
            if path in self.source.lines and line not in known.seen(path)
        ]
        if not waiting:
            return
        path, line, func, below = waiting[0]
        where = "The traceback ends in" if below == 0 else "Next up the traceback:"
        thought = f"{where} `{func}` in {path} at line {line}; let me look there."
        first = self.view(self.page_at(path, line, LEAD_IN), thought)
        for before, (path, line, _, _) in enumerate(waiting):
            yield 1 + before, self.page_at(path, line, LEAD_IN), first

    def _asked(self, known: Knowledge) -> Iterator[tuple[int, Page, Move]]:
        """The pages the issue's searches lead to. Reaching the k-th one not yet made costs the
        k - 1 before it too, as the next move is always the first of them."""
        waiting = [(term, why) for term, why in known.asked.items() if term not in known.searched]
        if not waiting:
            return
        first = self.search(*waiting[0])
        for before, (term, _) in enumerate(waiting):
            if term.startswith(DEFINITION):
                pages = self._definitions(term[len(DEFINITION) : -2])
            else:
                pages = self._found(term)
            for page in pages:
                yield 2 + before, page, first

    def _from_page(self, page: Page, known: Knowledge) -> Iterator[tuple[int, Page]]:
        yield from ((1, following) for following, _ in self._scrolls(page))
        text = "\n".join(self.source.lines[page.path][page.start - 1 : page.end])
        for name in called(text):
            cost = 1 if definition_pattern(name) in known.searched else 2
            yield from ((cost, following) for following in self._definitions(name))

    def _definitions(self, name: str) -> list[Page]:
        found = self.source.by_name.get(name, [])
        if len(found) > MAX_DEFINITIONS or name.startswith("__"):
            return []
        return [self.page_at(d.path, d.start, 0) for d in found]

    def _found(self, fragment: str) -> list[Page]:
        """The pages around the lines holding a message's words (none: too many lines do)."""
        hits = self.source.containing(fragment)
        if len(hits) > MAX_HITS:
            return []
        return [self.page_at(path, line, LEAD_IN) for path, line in hits]

    def _scrolls(self, page: Page) -> Iterator[tuple[Page, str]]:
        """Reading on (or back) inside the definition the page belongs to."""
        held = page.reading
        if held is None:
            return
        if page.end < held.end:
            thought = f"`{held.name}` goes on below line {page.end}; let me read on."
            yield self.page_from(page.path, page.end + 1, held), thought
        if page.start > held.start:
            thought = f"Let me read `{held.name}` above line {page.start}."
            yield self.page_from(page.path, page.start - PAGE, held), thought

    # -- pages and actions ------------------------------------------------------------------
    def page_at(self, path: str, line: int, lead_in: int) -> Page:
        """The page a clue naming ``line`` leads to: from ``lead_in`` lines above it, read as
        part of the definition holding the line."""
        return self.page_from(path, line - lead_in, self.source.enclosing(path, line))

    def page_from(self, path: str, start: int, reading: Definition | None) -> Page:
        """The page a view from line ``start`` shows."""
        start = max(1, start)
        return Page(path, start, min(self.source.length(path), start + PAGE - 1), reading)

    def view(self, page: Page, thought: str) -> Move:
        args = {"command": "view", "path": self.absolute(page.path)}
        args["view_range"] = [page.start, page.start + PAGE - 1]  # the editor stops at the end
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


def lookup_thought(why: str) -> str:
    return f"{why}; let me find where it is defined."


def message_thought(fragment: str) -> str:
    return f'The error says "{fragment}"; let me find where that comes from.'
