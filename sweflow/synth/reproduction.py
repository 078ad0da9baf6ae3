"""A reproduction a user would paste into a bug report: one failing test, standing alone.

Synthesized tasks hide the failing tests' files, so the agent can read their names but run none
of them. A test function that needs nothing from pytest (no fixture argument, no decorator, not
in a class) runs as a plain script: the imports it uses, the module-level helpers it uses
(functions, classes, constants), the function, and a call to it. Its traceback then names the
code that fails, as a user's report would.

Only the imported names the script reads are kept, as a user trims a report to what shows the
bug: a test module's import block lists what all its tests need (toolz's names 40), and an
agent that runs the reproduction must copy it without a slip.
"""

from __future__ import annotations

import ast
import builtins

FENCE = "```"  # a snippet holding a fence could not be quoted in a Markdown issue
Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Assign | ast.AnnAssign


def standalone(source: str, test: str) -> str | None:
    """The script that runs test function ``test`` of module ``source`` on its own, or None
    when the test cannot stand alone (a fixture, a decorator, a class, an unknown name)."""
    try:
        module = ast.parse(source)
    except SyntaxError:
        return None
    imports = [n for n in module.body if isinstance(n, ast.Import | ast.ImportFrom)]
    tests = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == test]
    if not tests or any(isinstance(n, ast.ImportFrom) and n.level for n in imports):
        return None
    function = tests[0]
    if function.decorator_list or _takes_arguments(function.args):
        return None
    helpers = _helpers(module, function, _imported(imports) | set(dir(builtins)))
    if helpers is None:
        return None
    used = set().union(*(_free_names(n) for n in [*helpers, function]))
    blocks = [
        "\n".join(kept for n in imports if (kept := _import_of(source, n, used))),
        *(_segment(source, n) for n in helpers),
        _segment(source, function),
        f"{test}()",
    ]
    script = "\n\n\n".join(b for b in blocks if b) + "\n"
    return None if FENCE in script else script


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


def _takes_arguments(args: ast.arguments) -> bool:
    return bool(args.posonlyargs or args.args or args.vararg or args.kwonlyargs or args.kwarg)


def _imported(imports: list[ast.Import | ast.ImportFrom]) -> set[str]:
    return {_bound_name(alias) for node in imports for alias in node.names}


def _bound_name(alias: ast.alias) -> str:
    """The name an import binds: ``import a.b`` binds ``a``, ``import a as b`` binds ``b``."""
    return alias.asname or alias.name.split(".")[0]


def _helpers(
    module: ast.Module, function: ast.FunctionDef, known: set[str]
) -> list[ast.stmt] | None:
    """The module-level definitions ``function`` needs, in module order (None: a name it needs
    is defined nowhere the script can take it from)."""
    defined: dict[str, ast.stmt] = {}
    for node in module.body:
        for name in _defines(node):
            defined.setdefault(name, node)
    needed, wanted = [], _free_names(function) - known
    while wanted:
        name = wanted.pop()
        node = defined.get(name)
        if node is None:
            return None
        if node not in needed and node is not function:
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
