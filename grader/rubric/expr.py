"""The rubric's expression language: arithmetic over Nsight Compute metric names and ``N``.

``ncu`` items (``expr``, and ``value`` when it is a string) and the report section's
``derived`` names are written in it, e.g.::

    smsp__inst_executed_op_shared_ld.sum / (sm__sass_thread_inst_executed_op_ffma_pred_on.sum / 32)

It is evaluated without ``eval``: metric names are replaced by placeholders, the text is
parsed with :mod:`ast`, and only numbers, names, ``+ - * / **`` and parentheses are accepted.
Pure: the rubric validates with :func:`check_expression` (the syntax, and every metric name against
the names ncu reports, grader/rubric/metric_names.py); grader/rubric/kinds.py (the ncu kind) and grader/writeup/
evaluate with :func:`evaluate_expr`.
"""
from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Callable, Mapping

from grader.rubric.metric_names import problem

# A metric name: "<unit>__<counter>[.<rollup>[.<submetric>]]", e.g.
# sm__sass_thread_inst_executed_op_ffma_pred_on.sum or launch__registers_per_thread. A few counters
# end in a size (..._multicast_size_32B), so the counter may hold capitals.
METRIC_RE = re.compile(r"\b[a-z][a-z0-9]*__[A-Za-z0-9_]+(?:\.[a-z0-9_]+)*\b")

_BINOPS: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.Pow: operator.pow}
_UNARY: dict[type, Callable[[float], float]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
# How an ncu item compares its measured value with its threshold (the rubric's `op`).
COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}
MAX_EXPONENT = 64  # larger powers could take minutes (10 ** 10 ** 10); refused instead


class ExprError(ValueError):
    """The expression is not one the grader accepts (a rubric error, not the student's)."""


class MissingMetric(KeyError):
    """ncu did not report a metric the expression needs."""


def compile_expr(text: str) -> tuple[ast.Expression, dict[str, str]]:
    """Parse ``text``; returns the tree and {placeholder: metric name}. Raises ExprError."""
    names: dict[str, str] = {}

    def sub(m: re.Match[str]) -> str:
        key = f"_m{len(names)}"
        names[key] = m.group(0)
        return key

    src = METRIC_RE.sub(sub, str(text))
    try:
        tree = ast.parse(src.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"{text!r} is not an arithmetic expression ({exc.msg})") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.Load)) or type(node) in _BINOPS or type(node) in _UNARY:
            continue
        if isinstance(node, (ast.BinOp, ast.UnaryOp)):
            if type(node.op) not in _BINOPS and type(node.op) not in _UNARY:
                raise ExprError(f"{text!r} uses an operator other than + - * / **")
            continue
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise ExprError(f"{text!r} contains {node.value!r}, which is not a number")
            continue
        if isinstance(node, ast.Name):
            if node.id != "N" and node.id not in names:
                raise ExprError(f"{text!r} names {node.id!r}: only metric names (unit__counter.rollup) and N")
            continue
        raise ExprError(f"{text!r} contains {type(node).__name__}: only numbers, metric names, N, "
                        "+ - * / ** and parentheses are allowed")
    return tree, names


def check_expression(text: str) -> str:
    """'' when ``text`` is a valid expression over metric names ncu knows, else why not (for rubric
    validation: a misspelt metric stops the rubric's check, not a GPU grading)."""
    try:
        _, names = compile_expr(text)
    except ExprError as exc:
        return str(exc)
    return next((p for p in map(problem, dict.fromkeys(names.values())) if p), "")


def evaluate_expr(text: str | float | int, metrics: Mapping[str, object], n: int) -> float:
    """Value of an expression. Raises ExprError, MissingMetric or ZeroDivisionError."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    tree, names = compile_expr(str(text))

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
            assert isinstance(node.value, (int, float))  # compile_expr admits numbers only
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id == "N":
                return float(n)
            metric = names[node.id]
            value = metrics.get(metric)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise MissingMetric(metric)
            return float(value)
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](walk(node.operand))
        assert isinstance(node, ast.BinOp)  # compile_expr admits nothing else
        left, right = walk(node.left), walk(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ExprError(f"exponent {right:g} in {text!r} is larger than {MAX_EXPONENT}")
        try:
            return float(_BINOPS[type(node.op)](left, right))
        except OverflowError:
            raise ExprError(f"{text!r} overflows") from None

    return walk(tree)


def passes(op: str, value: float, threshold: float) -> bool:
    """Whether ``value op threshold`` holds; NaN never passes."""
    return not math.isnan(value) and COMPARE[op](value, threshold)


def fmt(x: float) -> str:
    """A number for people: integers with separators, otherwise 4 significant digits."""
    if math.isfinite(x) and x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:,.4g}" if abs(x) < 1e6 else f"{x:.4g}"
