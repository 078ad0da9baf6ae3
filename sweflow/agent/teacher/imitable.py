"""Could a student have taken these steps? Each action that opens, edits, runs or searches the
repository must rest on what the run had seen before it: the issue, or an earlier observation.

- an editor action (view, create, str_replace, replace_lines, insert) is grounded when its
  file was named;
- a search (``grep``, ``git grep``) when each of its terms appeared and each path it names was;
- a script fed to Python on stdin (a reproduction) when its code appeared;
- any other command when every repository path it names was named; a command that names none
  (``pytest -q``, ``git status``) is not checked.

Actions of one step are judged on what was seen before the step: a model chooses them together.
"""

from __future__ import annotations

import re
import shlex

from sweflow.agent.teacher.clues import grep_operands, identifiers, names_path, repo_relative
from sweflow.agent.tools import BASH, EDITOR
from sweflow.agent.trajectory import ActionRecord, Imitability, StepRecord

HEREDOC = re.compile(r"^python3? - <<'?(?P<end>\w+)'?\n(?P<code>.*)\n(?P=end)\s*$", re.DOTALL)
PATH_WORD = re.compile(
    r"(?<![\w/.-])(?:\./)?(?:[\w.-]+/)*[\w-]+\.(?:py|pyi|cfg|toml|ini|txt|rst|md|json|ya?ml)\b"
)
SEARCHES = {("grep",), ("git", "grep"), ("rg",)}
STRUCTURE = {"def", "class"}  # words of a pattern that say where, not what


def imitability(issue: str, steps: list[StepRecord], workdir: str) -> Imitability:
    """How many of the run's checked actions were grounded, with a note on each that was not."""
    result = Imitability()
    seen = issue
    for step in steps:
        for action in step.actions:
            problem = _problem(action, seen, workdir)
            if problem is None:
                continue
            result.checked += 1
            if problem:
                result.ungrounded.append(f"step {step.index}: {problem}")
            else:
                result.grounded += 1
        seen += "".join("\n" + action.observation for action in step.actions)
    return result


def _problem(action: ActionRecord, seen: str, workdir: str) -> str | None:
    """None: not checked; "": grounded; else what was not grounded."""
    if action.tool == EDITOR:
        path = repo_relative(str(action.args.get("path", "")), workdir)
        if not path or names_path(seen, path, workdir):
            return ""
        return f"{action.args.get('command')} {path}: not named before"
    if action.tool != BASH:
        return None
    command = str(action.args.get("command", ""))
    if script := HEREDOC.match(command.strip()):
        code = script["code"].strip()
        return "" if code in seen else "runs a script that appeared nowhere before"
    try:
        words = shlex.split(command)
    except ValueError:
        return f"{command.splitlines()[0][:80]}: cannot be read"
    if any(tuple(words[: len(s)]) == s for s in SEARCHES):
        return _search_problem(words, seen, workdir)
    paths = [repo_relative(p, workdir) for p in PATH_WORD.findall(command)]
    unnamed = [p for p in paths if p and not names_path(seen, p, workdir)]
    if not paths:
        return None
    return f"runs with {', '.join(unnamed)}: not named before" if unnamed else ""


def _search_problem(words: list[str], seen: str, workdir: str) -> str:
    flags = "".join(w[1:] for w in words if w.startswith("-") and not w.startswith("--"))
    operands = grep_operands(words)
    if not operands:
        return ""
    pattern, paths = operands[0], operands[1:]
    if "F" in flags:
        terms = [pattern]
    else:
        terms = [w for w in identifiers(re.sub(r"\\.", " ", pattern)) if w not in STRUCTURE]
    missing = [t for t in terms if t not in seen]
    relative = [repo_relative(p, workdir) for p in paths]
    unnamed = [p for p in relative if p and not names_path(seen, p, workdir)]
    if missing:
        return f"searches for {', '.join(map(repr, missing))}: seen nowhere before"
    return f"searches in {', '.join(unnamed)}: not named before" if unnamed else ""
