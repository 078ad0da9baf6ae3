"""Procedural bug operators: small, deterministic libcst rewrites inside function bodies.

Each operator says which nodes it can change (``matches``) and how (``mutate``). A *site* is the
n-th matching node of a module in traversal order, so ``(file, operator, n)`` names one bug and
applying it twice gives the same code. Only code inside a function is touched, as SWE-smith
does: module-level changes break imports and yield nothing but collection errors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

Mutation = cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel


@dataclass(frozen=True)
class Operator:
    name: str
    description: str
    matches: Callable[[cst.CSTNode], bool]
    mutate: Callable[[cst.CSTNode], Mutation]


# -- conditionals ----------------------------------------------------------------------------
def _if_with_else(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.If) and isinstance(node.orelse, cst.Else)


def _invert_if_else(node: cst.If) -> cst.If:
    assert isinstance(node.orelse, cst.Else)
    return node.with_changes(body=node.orelse.body, orelse=node.orelse.with_changes(body=node.body))


def _negate(node: cst.If | cst.While) -> cst.CSTNode:
    test = node.test
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return node.with_changes(test=test.expression)
    paren = [cst.LeftParen()], [cst.RightParen()]
    return node.with_changes(
        test=cst.UnaryOperation(cst.Not(), test.with_changes(lpar=paren[0], rpar=paren[1]))
    )


# -- operators and operands -------------------------------------------------------------------
_BINARY_SWAPS: dict[type, type] = {
    cst.Add: cst.Subtract,
    cst.Subtract: cst.Add,
    cst.Multiply: cst.FloorDivide,
    cst.FloorDivide: cst.Multiply,
    cst.Divide: cst.Multiply,
    cst.Modulo: cst.FloorDivide,
    cst.BitAnd: cst.BitOr,
    cst.BitOr: cst.BitAnd,
    cst.LeftShift: cst.RightShift,
    cst.RightShift: cst.LeftShift,
}
_COMPARE_SWAPS: dict[type, type] = {
    cst.LessThan: cst.LessThanEqual,
    cst.LessThanEqual: cst.LessThan,
    cst.GreaterThan: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.GreaterThan,
    cst.Equal: cst.NotEqual,
    cst.NotEqual: cst.Equal,
    cst.In: cst.NotIn,
    cst.NotIn: cst.In,
    cst.Is: cst.IsNot,
    cst.IsNot: cst.Is,
}


def _swap_op(op: cst.CSTNode, table: dict[type, type]) -> cst.CSTNode:
    """The other operator, with standard spacing."""
    return table[type(op)]()


def _changeable_operator(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.BinaryOperation):
        return type(node.operator) in _BINARY_SWAPS
    if isinstance(node, cst.Comparison):
        return len(node.comparisons) == 1 and type(node.comparisons[0].operator) in _COMPARE_SWAPS
    return isinstance(node, cst.BooleanOperation)


def _change_operator(node: cst.CSTNode) -> cst.CSTNode:
    if isinstance(node, cst.BinaryOperation):
        return node.with_changes(operator=_swap_op(node.operator, _BINARY_SWAPS))
    if isinstance(node, cst.Comparison):
        target = node.comparisons[0]
        swapped = target.with_changes(operator=_swap_op(target.operator, _COMPARE_SWAPS))
        return node.with_changes(comparisons=[swapped])
    assert isinstance(node, cst.BooleanOperation)
    op = node.operator
    new = cst.Or if isinstance(op, cst.And) else cst.And
    return node.with_changes(
        operator=new(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after)
    )


def _swappable_operands(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.BinaryOperation):
        return not isinstance(node.operator, cst.Add | cst.Multiply | cst.BitAnd | cst.BitOr)
    return isinstance(node, cst.Comparison) and len(node.comparisons) == 1


def _swap_operands(node: cst.CSTNode) -> cst.CSTNode:
    if isinstance(node, cst.BinaryOperation):
        return node.with_changes(left=node.right, right=node.left)
    assert isinstance(node, cst.Comparison)
    target = node.comparisons[0]
    return node.with_changes(
        left=target.comparator, comparisons=[target.with_changes(comparator=node.left)]
    )


# -- constants ---------------------------------------------------------------------------------
def _changeable_constant(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.Integer):
        return True
    return isinstance(node, cst.Name) and node.value in ("True", "False")


def _change_constant(node: cst.CSTNode) -> cst.CSTNode:
    if isinstance(node, cst.Name):
        return node.with_changes(value="False" if node.value == "True" else "True")
    assert isinstance(node, cst.Integer)
    value = int(node.value.replace("_", ""), 0)
    return node.with_changes(value=str(value + 1 if value in (0, 1) else value - 1))


def _plus_one(expr: cst.BaseExpression, op: cst.BaseBinaryOp) -> cst.BinaryOperation:
    return cst.BinaryOperation(
        left=expr,
        operator=op,
        right=cst.Integer("1"),
        lpar=[cst.LeftParen()],
        rpar=[cst.RightParen()],
    )


def _off_by_one_site(node: cst.CSTNode) -> bool:
    """A slice bound, an index, or the stop of a ``range(...)`` call."""
    if isinstance(node, cst.Slice):
        return node.lower is not None or node.upper is not None
    if isinstance(node, cst.Index):
        return not isinstance(node.value, cst.SimpleString)
    return _is_call_to(node, "range") and bool(node.args)  # type: ignore[attr-defined]


def _off_by_one(node: cst.CSTNode) -> cst.CSTNode:
    if isinstance(node, cst.Slice):
        if node.upper is not None:
            return node.with_changes(upper=_plus_one(node.upper, cst.Add()))
        return node.with_changes(lower=_plus_one(node.lower, cst.Add()))  # type: ignore[arg-type]
    if isinstance(node, cst.Index):
        return node.with_changes(value=_plus_one(node.value, cst.Subtract()))
    assert isinstance(node, cst.Call)
    stop = 0 if len(node.args) == 1 else 1
    args = list(node.args)
    args[stop] = args[stop].with_changes(value=_plus_one(args[stop].value, cst.Subtract()))
    return node.with_changes(args=args)


# -- calls -------------------------------------------------------------------------------------
def _is_call_to(node: cst.CSTNode, name: str) -> bool:
    return (
        isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == name
    )


def _chained_call(node: cst.CSTNode) -> bool:
    """``a.b(...).c(...)``: a method called on the result of a call."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and isinstance(node.func.value, cst.Call)
    )


def _break_call_chain(node: cst.Call) -> cst.CSTNode:
    assert isinstance(node.func, cst.Attribute)
    return node.func.value


_WRAPPERS = frozenset({"list", "tuple", "set", "sorted", "reversed", "int", "str", "abs", "len"})


def _wrapper_call(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value in _WRAPPERS
        and len(node.args) == 1
        and node.args[0].star == ""
        and node.args[0].keyword is None
        and not isinstance(node.args[0].value, cst.GeneratorExp)  # a bare generator: no code
    )


def _remove_wrapper(node: cst.Call) -> cst.CSTNode:
    return node.args[0].value.with_changes(lpar=node.lpar, rpar=node.rpar)


# -- statements --------------------------------------------------------------------------------
def _assignment(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.SimpleStatementLine)
        and len(node.body) == 1
        and isinstance(node.body[0], cst.Assign | cst.AugAssign | cst.AnnAssign)
    )


def _if_without_else(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.If) and node.orelse is None


def _remove(_node: cst.CSTNode) -> cst.RemovalSentinel:
    return cst.RemoveFromParent()


def _try_without_finally(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Try) and node.finalbody is None and node.orelse is None


def _unwrap_try(node: cst.Try) -> cst.FlattenSentinel:
    return cst.FlattenSentinel(node.body.body)


def _docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)
    )


def _shuffle_site(node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.IndentedBlock):
        return False
    body = [s for s in node.body if not _docstring(s)]
    return len(body) >= 2 and not isinstance(body[0], cst.FunctionDef | cst.ClassDef)


def _shuffle_statements(node: cst.IndentedBlock) -> cst.IndentedBlock:
    """Swap the first two statements after any docstring."""
    body = list(node.body)
    first = 1 if _docstring(body[0]) else 0
    body[first], body[first + 1] = body[first + 1], body[first]
    return node.with_changes(body=body)


OPERATORS: dict[str, Operator] = {
    op.name: op
    for op in (
        Operator("invert_if_else", "swap the if and else branches", _if_with_else, _invert_if_else),
        Operator(
            "negate_condition",
            "negate the condition of an if or while",
            lambda n: isinstance(n, cst.If | cst.While),
            _negate,
        ),
        Operator(
            "remove_conditional", "remove an if block with no else", _if_without_else, _remove
        ),
        Operator("remove_assignment", "remove an assignment statement", _assignment, _remove),
        Operator(
            "change_operator",
            "change an arithmetic, comparison or boolean operator",
            _changeable_operator,
            _change_operator,
        ),
        Operator(
            "swap_operands",
            "swap the operands of a non-commutative operator or a comparison",
            _swappable_operands,
            _swap_operands,
        ),
        Operator(
            "change_constant",
            "change an integer by one or flip a boolean",
            _changeable_constant,
            _change_constant,
        ),
        Operator(
            "off_by_one",
            "shift an index, slice bound or range stop by one",
            _off_by_one_site,
            _off_by_one,
        ),
        Operator(
            "break_call_chain",
            "drop the last call of a method chain",
            _chained_call,
            _break_call_chain,
        ),
        Operator(
            "remove_wrapper",
            "remove a wrapping builtin call (list, sorted, int, ...)",
            _wrapper_call,
            _remove_wrapper,
        ),
        Operator(
            "remove_loop",
            "remove a for or while loop",
            lambda n: isinstance(n, cst.For | cst.While),
            _remove,
        ),
        Operator(
            "remove_try", "replace a try/except with its body", _try_without_finally, _unwrap_try
        ),
        Operator(
            "shuffle_statements",
            "swap two consecutive statements",
            _shuffle_site,
            _shuffle_statements,
        ),
    )
}


class _SiteRewriter(cst.CSTTransformer):
    """Counts an operator's sites inside functions and rewrites the ``target``-th one."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, operator: Operator, target: int | None) -> None:
        super().__init__()
        self.operator = operator
        self.target = target
        self.lines: list[int] = []  # the line of each site, in order
        self._depth = 0

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.FunctionDef):
            self._depth += 1
        return True

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):  # type: ignore[override]
        in_function = self._depth > 0
        if isinstance(original, cst.FunctionDef):
            self._depth -= 1
            # a function's own body block counts as inside it; the def statement does not
            return updated
        if not in_function or not self.operator.matches(original):
            return updated
        index = len(self.lines)
        self.lines.append(self.get_metadata(PositionProvider, original).start.line)
        if index == self.target:
            return self.operator.mutate(updated)
        return updated


def find_sites(module: cst.Module, operator: Operator) -> list[int]:
    """The line of each site of ``operator`` in ``module``, in site order."""
    rewriter = _SiteRewriter(operator, None)
    MetadataWrapper(module, unsafe_skip_copy=True).visit(rewriter)
    return rewriter.lines


def apply_site(module: cst.Module, operator: Operator, index: int) -> str:
    """The module's code with site ``index`` of ``operator`` mutated."""
    rewriter = _SiteRewriter(operator, index)
    return MetadataWrapper(module, unsafe_skip_copy=True).visit(rewriter).code
