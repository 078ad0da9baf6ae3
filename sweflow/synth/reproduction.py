"""A reproduction a user would paste into a bug report: one failing test, standing alone.

Synthesized tasks hide the failing tests' files, so the agent can read their names but run none
of them. A test that needs nothing from pytest (no fixture argument, no decorator, no set-up
pytest runs for its class) runs as a plain script: the imports it uses, the module-level
helpers it uses (functions, classes, constants), the test, and a call to it. A test method
comes with its class cut down to what the test reads (class attributes, ``setUp`` and
``tearDown`` of a ``unittest.TestCase``, the methods it calls), and runs as
``Case("test_x").debug()`` (unittest's way to run one test and let its exception through) or,
in a plain pytest class, ``Case().test_x()``. Its traceback then names the code that fails, as
a user's report would. A test that imports a module from its own folder (tabulate's
``from common import ...``) stays out: only pytest puts that folder on the path.

Only the imported names the script reads are kept, as a user trims a report to what shows the
bug: a test module's import block lists what all its tests need (toolz's names 40), and an
agent that runs the reproduction must copy it without a slip, in one reply: a script longer
than :data:`MAX_CHARS` is not pasted.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

FENCE = "```"  # a snippet holding a fence could not be quoted in a Markdown issue
# The agent writes the script in one reply of at most 768 tokens (sweflow bench learn);
# SmolLM2's tokenizer spends up to 0.46 tokens a character on test code.
MAX_CHARS = 1500
Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Assign | ast.AnnAssign
# what pytest (never ``debug()`` or a plain call) runs around a test method
PYTEST_SET_UP = frozenset(
    {
        "setup_method",
        "teardown_method",
        "setup_class",
        "teardown_class",
        "setup",
        "teardown",
        "setUpClass",
        "tearDownClass",
    }
)
UNITTEST_SET_UP = ("setUp", "tearDown")  # what ``debug()`` runs around a test method


@dataclass(frozen=True)
class Runnable:
    """What the script defines to run a test (the test function, or its class cut down to what
    the test reads) as source text and as a node, and the line that runs it."""

    node: ast.stmt
    text: str
    call: str


def standalone(source: str, test: str, beside: AbstractSet[str] = frozenset()) -> str | None:
    """The script that runs test ``test`` of module ``source`` on its own (``name``, or
    ``Class::name`` for a method), or None when the test cannot stand alone (a fixture, a
    decorator, a parameter, pytest's set-up, an unknown name, an import of a module in
    ``beside``: those beside the test file, which only pytest puts on the path) or its script
    is too long."""
    try:
        module = ast.parse(source)
    except SyntaxError:
        return None
    imports = [n for n in module.body if isinstance(n, ast.Import | ast.ImportFrom)]
    if any(_relative_import(n) for n in imports):
        return None
    owner, _, name = test.rpartition("::")
    if not name.isidentifier():  # parametrized
        return None
    runnable = _method(module, source, owner, name) if owner else _function(module, source, name)
    if runnable is None:
        return None
    helpers = _helpers(module, runnable.node, _imported(imports) | set(dir(builtins)))
    if helpers is None or any(_relative_import(n) for n in [*helpers, runnable.node]):
        return None
    used = set().union(*(_free_names(n) for n in [*helpers, runnable.node]))
    kept = [(n, text) for n in imports if (text := _import_of(source, n, used))]
    if any(_top_modules(n) & beside for n, _ in kept):
        return None
    blocks = [
        "\n".join(text for _, text in kept),
        *(_segment(source, n) for n in helpers),
        runnable.text,
        runnable.call,
    ]
    script = "\n\n\n".join(b for b in blocks if b) + "\n"
    return None if FENCE in script or len(script) > MAX_CHARS else script


def _function(module: ast.Module, source: str, name: str) -> Runnable | None:
    found = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not found or not _plain(found[0], 0):
        return None
    return Runnable(found[0], _segment(source, found[0]), f"{name}()")


def _method(module: ast.Module, source: str, owner: str, name: str) -> Runnable | None:
    """Class ``owner`` cut down to what its test ``name`` reads (the method may come from a
    base class of the module, which the script then takes whole as a helper)."""
    classes = {n.name: n for n in module.body if isinstance(n, ast.ClassDef)}
    lineage = _lineage(owner, classes)
    method = next((m for c in lineage for m in c.body if _defines(m) == [name]), None)
    if (
        not isinstance(method, ast.FunctionDef)
        or not _plain(method, 1)
        or any(c.decorator_list or PYTEST_SET_UP & _members(c) for c in lineage)
        or any(_is_fixture(m) for c in lineage for m in c.body)
    ):
        return None
    case = lineage[0]
    testcase = _is_testcase(case, classes)
    kept = _reads(case, name, UNITTEST_SET_UP if testcase else ())
    first = case.body[0]
    start = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", []))])
    header = "\n".join(source.splitlines()[case.lineno - 1 : start - 1]).rstrip()
    if not header:  # a class on one line
        return None
    body = [m for m in case.body if m in kept]
    node = ast.ClassDef(
        name=case.name,
        bases=case.bases,
        keywords=case.keywords,
        body=body or [ast.Pass()],
        decorator_list=[],
    )
    text = header + "\n" + ("\n\n".join(_segment(source, m) for m in body) or "    pass")
    call = f'{owner}("{name}").debug()' if testcase else f"{owner}().{name}()"
    return Runnable(node, text, call)


def _top_modules(node: ast.Import | ast.ImportFrom) -> set[str]:
    """The top-level modules an import loads (``a`` for ``import a.b`` and ``from a.b ...``)."""
    if isinstance(node, ast.ImportFrom):
        return {(node.module or "").split(".")[0]}
    return {alias.name.split(".")[0] for alias in node.names}


def _relative_import(node: ast.AST) -> bool:
    """Whether ``node`` imports relative to its package (``from . import x`` in a ``setUp``):
    a script run on its own has no package."""
    return any(isinstance(n, ast.ImportFrom) and n.level for n in ast.walk(node))


def _plain(function: ast.FunctionDef, arguments: int) -> bool:
    """Undecorated and taking exactly ``arguments`` positional arguments (``self``): no
    fixture, no parameter."""
    args = function.args
    return (
        not function.decorator_list
        and len(args.args) == arguments
        and not (args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg)
    )


def _lineage(name: str, classes: dict[str, ast.ClassDef]) -> list[ast.ClassDef]:
    """Class ``name`` and the module's classes it inherits from, nearest first (empty: no such
    class)."""
    found: list[ast.ClassDef] = []
    waiting = [name]
    while waiting:
        cls = classes.get(waiting.pop(0))
        if cls is not None and cls not in found:
            found.append(cls)
            waiting += [b.id for b in cls.bases if isinstance(b, ast.Name)]
    return found


def _is_testcase(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> bool:
    """Whether ``cls`` inherits from unittest's ``TestCase`` (spelled so, as imported)."""
    bases = {ast.unparse(b) for c in _lineage(cls.name, classes) for b in c.bases}
    return any(b.rsplit(".", 1)[-1] == "TestCase" for b in bases - classes.keys())


def _is_fixture(member: ast.stmt) -> bool:
    decorators = getattr(member, "decorator_list", [])
    return any("fixture" in ast.unparse(d) for d in decorators)


def _members(cls: ast.ClassDef) -> set[str]:
    return {name for m in cls.body for name in _defines(m)}


def _reads(cls: ast.ClassDef, test: str, set_up: tuple[str, ...]) -> list[ast.stmt]:
    """The members of ``cls`` running ``test`` needs: its class attributes, the set-up that
    runs around it, the test, and the methods these read through ``self``, ``cls`` or the
    class's name."""
    by_name = {name: m for m in cls.body for name in _defines(m)}
    kept = [m for m in cls.body if isinstance(m, ast.Assign | ast.AnnAssign)]
    wanted = [test, *(n for n in set_up if n in by_name)]
    while wanted:
        member = by_name.get(wanted.pop())
        if member is None or member in kept:
            continue
        kept.append(member)
        wanted += [
            a.attr
            for a in ast.walk(member)
            if isinstance(a, ast.Attribute)
            and isinstance(a.value, ast.Name)
            and a.value.id in ("self", "cls", cls.name)
        ]
    return kept


def _segment(source: str, node: ast.stmt) -> str:
    """A statement's source, decorators included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return "\n".join(source.splitlines()[first - 1 : node.end_lineno])


def _import_of(source: str, node: ast.Import | ast.ImportFrom, used: set[str]) -> str:
    """The import statement with only the names in ``used`` ("": none of them; a
    ``__future__`` or ``*`` import stays whole), as written when it keeps all of them."""
    whole = isinstance(node, ast.ImportFrom) and node.module == "__future__"
    if whole or any(alias.name == "*" for alias in node.names):
        return _segment(source, node)
    names = [a for a in node.names if _bound_name(a) in used]
    if len(names) == len(node.names):
        return _segment(source, node)
    if not names:
        return ""
    if isinstance(node, ast.ImportFrom):
        return ast.unparse(ast.ImportFrom(node.module, names, node.level))
    return ast.unparse(ast.Import(names))


def _imported(imports: list[ast.Import | ast.ImportFrom]) -> set[str]:
    return {_bound_name(alias) for node in imports for alias in node.names}


def _bound_name(alias: ast.alias) -> str:
    """The name an import binds: ``import a.b`` binds ``a``, ``import a as b`` binds ``b``."""
    return alias.asname or alias.name.split(".")[0]


def _helpers(module: ast.Module, runnable: ast.stmt, known: set[str]) -> list[ast.stmt] | None:
    """The module-level definitions ``runnable`` needs, in module order (None: a name it needs
    is defined nowhere the script can take it from)."""
    defined: dict[str, ast.stmt] = {}
    for node in module.body:
        for name in _defines(node):
            defined.setdefault(name, node)
    needed, wanted = [], _free_names(runnable) - known
    while wanted:
        name = wanted.pop()
        node = defined.get(name)
        if node is None:
            return None
        if node not in needed and node is not runnable:
            needed.append(node)
            wanted |= _free_names(node) - known - set(_defines(node))
        wanted -= {n for taken in needed for n in _defines(taken)}
    return sorted(needed, key=lambda n: n.lineno)


def _defines(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _free_names(node: ast.AST) -> set[str]:
    """Names read under ``node`` that nothing under it binds."""
    loaded: set[str] = set()
    bound: set[str] = set()
    declared: set[str] = set()  # global or nonlocal: the module's names, never standalone
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            (loaded if isinstance(child.ctx, ast.Load) else bound).add(child.id)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(child.name)
        elif isinstance(child, ast.arg):
            bound.add(child.arg)
        elif isinstance(child, ast.alias):
            bound.add(_bound_name(child))
        elif isinstance(child, ast.ExceptHandler) and child.name:
            bound.add(child.name)
        elif isinstance(child, ast.Global | ast.Nonlocal):
            declared.update(child.names)
    return (loaded - bound) | declared
