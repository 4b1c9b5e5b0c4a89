"""Rubric items of kind ``ncu``: an expression over Nsight Compute metrics against a threshold.

``expr`` (and ``value`` when it is a string) is written in the rubric's expression language
(grader/rubric/expr.py), e.g.::

    expr: smsp__inst_executed_op_shared_ld.sum / (sm__sass_thread_inst_executed_op_ffma_pred_on.sum / 32)
    op: "<="
    value: 0.5

Statuses: a stage whose kernel is not correct is never credited for its counters
(Status.FAILED, "not profiled: ..."); when the grader could not profile (no ncu, counters
locked, no GPU) the item is Status.NOT_EVALUATED with the reason. The status follows the
cause of the stage's ``ncu_gap`` (grader/gpu/ncu_run.py sets it), never its wording.
"""
from __future__ import annotations

from grader.gpu.ncu_run import missing_metric_message
from grader.grading import StageOutcome
from grader.model import Cause, Gap, ItemResult, Status
from grader.profile.ncu import NOT_PROFILED_PREFIX
from grader.rubric.expr import METRIC_RE, ExprError, MissingMetric, evaluate_expr, fmt, passes
from grader.rubric.items import Item, curve


def measure(item: Item, metrics: dict, n: int) -> tuple[float, float]:
    """(measured value, threshold) of an ncu item on one kernel's metrics."""
    return evaluate_expr(item.params["expr"], metrics, n), evaluate_expr(item.params["value"], metrics, n)


def _with_unit(x: float, unit: str) -> str:
    if unit == "%":
        return fmt(x) + "%"
    return fmt(x) + (f" {unit}" if unit else "")


def _result(o: StageOutcome, item: Item, status: Status, message: str, *, needs_gpu: bool = False,
            fraction: float = 0.0, **values) -> ItemResult:
    st = o.stage
    score = item.points if status == Status.PASSED else round(item.points * fraction, 4)
    return ItemResult(stage=st.id, item=item.id, title=item.title, status=status,
                      score=score, max_score=item.points,
                      message=message, visibility=item.visibility, number=f"{st.number}.{item.id}",
                      values=values, needs_gpu=needs_gpu, bonus=st.bonus)


def evaluate_ncu_item(item: Item, outcome: StageOutcome) -> ItemResult:
    """The verdict on one ``ncu`` item for one stage (see the module docstring for statuses)."""
    o, p = outcome, item.params
    explain = p.get("explain", "").strip()
    tail = f" {explain}" if explain else ""
    if o.correct is False:
        return _result(o, item, Status.FAILED, f"{NOT_PROFILED_PREFIX} the kernel is not correct, so its counters "
                       "earn nothing; fix correctness first.")
    if o.ncu is None:
        gap = o.ncu_gap or Gap(Cause.GRADER, "not evaluated: no Nsight Compute metrics for this stage")
        return _result(o, item, gap.cause.status, gap.message, needs_gpu=gap.cause is Cause.NO_GPU)
    n = o.profile_n
    try:
        value, threshold = measure(item, o.ncu, n)
    except MissingMetric as exc:
        return _result(o, item, Status.NOT_EVALUATED, missing_metric_message(exc.args[0], o.ncu))
    except ExprError as exc:
        return _result(o, item, Status.NOT_EVALUATED, f"not evaluated: the rubric's expression is invalid (a course-staff "
                       f"problem): {exc}")
    except ZeroDivisionError:
        used = ", ".join(f"{m} = {fmt(float(o.ncu[m]))}" for m in METRIC_RE.findall(str(p["expr"]))
                         if isinstance(o.ncu.get(m), (int, float)))
        return _result(o, item, Status.FAILED, f"cannot compute {item.title!r}: the expression divides by zero for "
                       f"your kernel ({used}).{tail}")
    unit = p.get("unit", "")
    ok = passes(p["op"], value, threshold)
    inputs = "; ".join(f"{m} = {fmt(float(o.ncu[m]))}" for m in dict.fromkeys(METRIC_RE.findall(str(p["expr"]))))
    verdict = "passed" if ok else "not met"
    ratio = f" = {value / n**3:.2f} x N^3" if "ffma" in str(p["expr"]) and p["op"] == "==" and n else ""
    # The explanation ends with what to look at next: it belongs to a failed item only.
    # A declared curve gives part of the points short of the threshold (its value is a number then).
    c = curve(item)
    frac = 1.0 if ok else c.fraction(value) if c.knees else 0.0
    note = "" if ok or not c.knees else c.note(item.points, value, lambda v: _with_unit(v, unit))
    message = (f"{verdict}: measured {_with_unit(value, unit)}{ratio}, needs {p['op']} {_with_unit(threshold, unit)} "
               f"(Nsight Compute, one launch at N={n}; {inputs}){note}." + ("" if ok else tail))
    return _result(o, item, Status.PASSED if ok else Status.FAILED, message, fraction=frac, value=value,
                   threshold=threshold)
