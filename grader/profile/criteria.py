"""Rubric items of kind ``ncu``: an expression over Nsight Compute metrics against a threshold.

``expr`` (and ``value`` when it is a string) is arithmetic over metric names, numbers,
``N`` (the size the kernel was profiled at) and ``+ - * / **`` with parentheses, e.g.::

    expr: smsp__inst_executed_op_shared_ld.sum / (sm__sass_thread_inst_executed_op_ffma_pred_on.sum / 32)
    op: "<="
    value: 0.5

It is evaluated without ``eval``: metric names are replaced by placeholders, the text is
parsed with :mod:`ast`, and only numbers, names and those operators are accepted.

Statuses: a stage whose kernel is not correct is never credited for its counters
(FAILED, "not profiled: ..."); when the grader could not profile (no ncu, counters
locked, no GPU) the item is NOT_EVALUATED with the reason. grade.py words the reason
with one of these two prefixes; the status follows the prefix.
"""
from __future__ import annotations

import ast
import math
import operator

from grader.profile.ncu import METRIC_RE, NOT_PROFILED_PREFIX
from grader.model import FAILED, NOT_EVALUATED, PASSED, ItemResult

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_COMPARE = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}
MAX_EXPONENT = 64


class ExprError(ValueError):
    """The expression is not one the grader accepts (a rubric error, not the student's)."""


class MissingMetric(KeyError):
    """ncu did not report a metric the expression needs."""


def compile_expr(text: str) -> tuple[ast.Expression, dict[str, str]]:
    """Parse ``text``; returns the tree and {placeholder: metric name}. Raises ExprError."""
    names: dict[str, str] = {}

    def sub(m):
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
    """'' when ``text`` is a valid expression, else why not (for rubric validation)."""
    try:
        compile_expr(text)
    except ExprError as exc:
        return str(exc)
    return ""


def evaluate_expr(text: str | float | int, metrics: dict, n: int) -> float:
    """Value of an expression. Raises ExprError, MissingMetric or ZeroDivisionError."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    tree, names = compile_expr(text)

    def walk(node) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant):
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
        left, right = walk(node.left), walk(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ExprError(f"exponent {right:g} in {text!r} is larger than {MAX_EXPONENT}")
        try:
            return float(_BINOPS[type(node.op)](left, right))
        except OverflowError:
            raise ExprError(f"{text!r} overflows") from None

    return walk(tree)


def measure(item, metrics: dict, n: int) -> tuple[float, float]:
    """(measured value, threshold) of an ncu item on one kernel's metrics."""
    return evaluate_expr(item.params["expr"], metrics, n), evaluate_expr(item.params["value"], metrics, n)


def passes(op: str, value: float, threshold: float) -> bool:
    return not math.isnan(value) and _COMPARE[op](value, threshold)


def fmt(x: float) -> str:
    """A number for people: integers with separators, otherwise 4 significant digits."""
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:,.4g}" if abs(x) < 1e6 else f"{x:.4g}"


def _with_unit(x: float, unit: str) -> str:
    if unit == "%":
        return fmt(x) + "%"
    return fmt(x) + (f" {unit}" if unit else "")


def _result(o, item, status: str, message: str, **values) -> ItemResult:
    st = o.stage
    return ItemResult(stage=st.id, item=item.id, title=item.title, status=status,
                      score=item.points if status == PASSED else 0.0, max_score=item.points,
                      message=message, visibility=item.visibility, number=f"{st.number}.{item.id}",
                      values=values)


def evaluate_ncu_item(item, outcome) -> ItemResult:
    """The verdict on one ``ncu`` item for one stage (see the module docstring for statuses)."""
    o, p = outcome, item.params
    explain = p.get("explain", "").strip()
    tail = f" {explain}" if explain else ""
    if o.correct is False:
        return _result(o, item, FAILED, f"{NOT_PROFILED_PREFIX} the kernel is not correct, so its counters "
                       "earn nothing; fix correctness first.")
    if o.ncu is None:
        reason = (o.ncu_reason or "").strip() or "not evaluated: no Nsight Compute metrics for this stage"
        if reason.startswith(NOT_PROFILED_PREFIX):
            return _result(o, item, FAILED, reason)
        if not reason.startswith("not evaluated"):
            reason = f"not evaluated: {reason}"
        return _result(o, item, NOT_EVALUATED, reason)
    n = o.profile_n
    try:
        value, threshold = measure(item, o.ncu, n)
    except MissingMetric as exc:
        return _result(o, item, NOT_EVALUATED, f"not evaluated: ncu did not report {exc.args[0]} for this "
                       "kernel on this GPU (not your kernel's fault)")
    except ExprError as exc:
        return _result(o, item, NOT_EVALUATED, f"not evaluated: the rubric's expression is invalid (a course-staff "
                       f"problem): {exc}")
    except ZeroDivisionError:
        used = ", ".join(f"{m} = {fmt(float(o.ncu[m]))}" for m in METRIC_RE.findall(str(p["expr"]))
                         if isinstance(o.ncu.get(m), (int, float)))
        return _result(o, item, FAILED, f"cannot compute {item.title!r}: the expression divides by zero for "
                       f"your kernel ({used}).{tail}")
    unit = p.get("unit", "")
    ok = passes(p["op"], value, threshold)
    inputs = "; ".join(f"{m} = {fmt(float(o.ncu[m]))}" for m in dict.fromkeys(METRIC_RE.findall(str(p["expr"]))))
    verdict = "passed" if ok else "not met"
    ratio = f" = {value / n**3:.2f} x N^3" if "ffma" in str(p["expr"]) and p["op"] == "==" and n else ""
    # The explanation ends with what to look at next: it belongs to a failed item only.
    message = (f"{verdict}: measured {_with_unit(value, unit)}{ratio}, needs {p['op']} {_with_unit(threshold, unit)} "
               f"(Nsight Compute, one launch at N={n}; {inputs})." + ("" if ok else tail))
    return _result(o, item, PASSED if ok else FAILED, message, value=value, threshold=threshold)
