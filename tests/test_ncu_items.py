"""grader/rubric/expr.py and grader/rubric/kinds.py (the ncu kind): safe expressions, statuses and messages of `ncu` items."""
from pathlib import Path

import pytest

from grader.evidence.compile import CompileResult, KernelResources
from grader.evidence.limits import Peaks
from grader.grading import StageOutcome
from grader.model import Cause, Gap, Measured, Status, Verdict
from grader.profile.ncu import parse_raw_csv
from grader.rubric.errors import RubricError
from grader.rubric.expr import ExprError, MissingMetric, check_expression, evaluate_expr, fmt
from grader.rubric.kinds import judge_ncu, measure, stage_item
from grader.rubric.load import load_rubric
from grader.score.stages import evaluate

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
TABLE = parse_raw_csv((ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_solutions_h200_n2048.csv").read_text())
FFMA = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
REQ = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"


def item(expr, op=">=", value=128, **extra):
    raw = {"id": "reuse", "kind": "ncu", "title": "reuse through shared memory", "points": 3,
           "expr": expr, "op": op, "value": value, **extra}
    return stage_item(raw, "test")


_FIXTURE = object()


def outcome(stage_id="tiled", kernel="mmTiled", correct=True, ncu=_FIXTURE, gap=None):
    """A stage outcome whose metrics are the fixture's row for `kernel` unless `ncu` is given."""
    st = RUBRIC.stage(stage_id)
    o = StageOutcome(stage=st, verdict=Verdict.CORRECT if correct else Verdict.WRONG, profile_n=2048, ncu_gap=gap)
    o.ncu = dict(TABLE[kernel]) if ncu is _FIXTURE else ncu
    return o


def test_arithmetic_over_metrics_n_and_numbers():
    m = {FFMA: 8.0, REQ: 2.0}
    assert evaluate_expr(f"{FFMA} / {REQ}", m, 4) == 4.0
    assert evaluate_expr(f"({FFMA} - {REQ}) * 2 ** 3 / N", m, 4) == 12.0
    assert evaluate_expr("-N**3 + +1", {}, 2) == -7.0
    assert evaluate_expr(5, {}, 1) == 5.0 and evaluate_expr(2.5, {}, 1) == 2.5


@pytest.mark.parametrize("bad", [
    "__import__('os').system('true')", "N.real", "open", "[1, 2]", "N if N else 1", "N % 3",
    "'text'", "True + 1", "lambda: 1", "N == 3", "f(N)", "x + 1", "1 +", "N // 2",
])
def test_anything_but_arithmetic_is_refused(bad):
    with pytest.raises(ExprError):
        evaluate_expr(bad, {}, 2)
    assert check_expression(bad)


def test_huge_powers_are_refused_instead_of_hanging():
    with pytest.raises(ExprError):
        evaluate_expr("10 ** 10 ** 10", {}, 1)
    with pytest.raises(ExprError):
        evaluate_expr("10.0 ** 60 ** 2", {}, 1)


def test_missing_or_non_numeric_metric():
    with pytest.raises(MissingMetric):
        evaluate_expr(f"{FFMA} + 1", {}, 1)
    with pytest.raises(MissingMetric):
        evaluate_expr(f"{FFMA} + 1", {FFMA: None}, 1)
    with pytest.raises(MissingMetric):
        evaluate_expr("launch__func_cache_config", {"launch__func_cache_config": "CachePreferNone"}, 1)


def test_measure_on_the_fixture():
    it = item(f"{FFMA} / {REQ}")
    assert measure(it.params, TABLE["mmTiled"], 2048) == (512.0, 128.0)
    assert measure(it.params, TABLE["mmCoalesced"], 2048) == (16.0, 128.0)
    count = item(FFMA, "==", "N**3")
    assert measure(count.params, TABLE["mm2DBlocktiling"], 2048) == (2048.0**3, 2048.0**3)


def test_pass_message_has_value_threshold_unit_and_inputs_and_the_explanation_only_on_failure():
    it = item(f"{FFMA} / {REQ}", unit="FFMA per request", explain="Each global load feeds TILE FMAs.")
    r = judge_ncu(it, outcome())
    assert r.status == Status.PASSED and r.score == 3 and r.max_score == 3
    assert r.number == "3.reuse" and r.stage == "tiled" and r.visibility == "visible"
    assert r.values == Measured(value=512.0, threshold=128.0)
    assert "measured 512 FFMA per request, needs >= 128 FFMA per request" in r.message
    assert "N=2048" in r.message and f"{REQ} = 16,777,216" in r.message
    assert "Each global load feeds TILE FMAs." not in r.message  # what to look at next: failures only
    failed = judge_ncu(it, outcome(kernel="mmCoalesced"))
    assert failed.message.endswith("Each global load feeds TILE FMAs.")


def test_fail_on_the_predecessor_kernel():
    r = judge_ncu(item(f"{FFMA} / {REQ}"), outcome(kernel="mmCoalesced"))
    assert r.status == Status.FAILED and r.score == 0 and r.message.startswith("not met: measured 16,")


def test_percent_unit_reads_naturally():
    it = item("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", ">=", 45, unit="%")
    r = judge_ncu(it, outcome("blocktiling_2d", "mm2DBlocktiling"))
    assert r.status == Status.PASSED and "measured 73.01%, needs >= 45%" in r.message


def test_division_by_zero_fails_with_a_clear_message():
    r = judge_ncu(item(f"{FFMA} / smsp__inst_executed_op_shared_ld.sum"), outcome("coalesced", "mmCoalesced"))
    assert r.status == Status.FAILED and "divides by zero" in r.message
    assert "smsp__inst_executed_op_shared_ld.sum = 0" in r.message


def test_no_metrics_because_ncu_is_missing_is_not_evaluated():
    r = judge_ncu(item(FFMA), outcome(ncu=None, gap=Gap(Cause.GRADER,
                                                                "not evaluated: Nsight Compute (ncu) not found")))
    assert r.status == Status.NOT_EVALUATED and r.score == 0
    assert r.message == "not evaluated: Nsight Compute (ncu) not found"


def test_the_status_follows_the_gaps_cause_not_its_wording():
    # The message is only shown: a grader-side gap is not evaluated whatever its text says.
    r = judge_ncu(item(FFMA), outcome(ncu=None, gap=Gap(Cause.GRADER, "not profiled: words only")))
    assert r.status == Status.NOT_EVALUATED and r.message == "not profiled: words only"
    r = judge_ncu(item(FFMA), outcome(ncu=None, gap=Gap(Cause.STUDENT, "not evaluated: words only")))
    assert r.status == Status.FAILED
    r = judge_ncu(item(FFMA), outcome(ncu=None))
    assert r.status == Status.NOT_EVALUATED and r.message.startswith("not evaluated")


def test_not_profiled_is_the_students_failure():
    r = judge_ncu(item(FFMA), outcome(ncu=None, gap=Gap(Cause.STUDENT, "not profiled: the kernel is not correct")))
    assert r.status == Status.FAILED and r.message == "not profiled: the kernel is not correct"


def test_a_wrong_kernel_never_earns_counter_points_even_with_metrics():
    r = judge_ncu(item(f"{FFMA} / {REQ}"), outcome(correct=False))
    assert r.status == Status.FAILED and r.message.startswith("not profiled: the kernel is not correct")


def test_a_metric_this_gpu_lacks_is_not_evaluated():
    # The fixture's rows say CC 9.0 (gh100); this counter exists only on gb202's ncu.
    r = judge_ncu(item("sm__pipe_fma_cycles_active_realtime.sum"), outcome())
    assert r.status == Status.NOT_EVALUATED
    assert r.message.startswith("not evaluated: ncu on gh100 has no metric sm__pipe_fma_cycles_active_realtime.sum")
    r = judge_ncu(item("dram__bytes_read.sum.per_cycle_active"), outcome())  # on gh100, not collected
    assert r.status == Status.NOT_EVALUATED and "ncu did not report dram__bytes_read.sum.per_cycle_active" in r.message


def test_a_broken_rubric_expression_stops_the_rubric_with_its_key():
    with pytest.raises(RubricError) as exc:
        item(f"{FFMA} // 2")
    assert exc.value.where == "test.expr" and "operator" in exc.value.problem
    with pytest.raises(RubricError) as exc:
        item(FFMA, "==", "N ** three")
    assert exc.value.where == "test.value"
    with pytest.raises(RubricError) as exc:
        item(FFMA, "=>")
    assert exc.value.where == "test.op" and "<=" in exc.value.expected


def test_an_expression_that_fails_only_when_evaluated_is_not_evaluated_not_failed():
    r = judge_ncu(item(f"{FFMA} ** 100"), outcome())
    assert r.status == Status.NOT_EVALUATED and "expression is invalid" in r.message


def test_equality_is_exact():
    r = judge_ncu(item(FFMA, "==", "N**3"), outcome())
    assert r.status == Status.PASSED
    m = dict(TABLE["mmTiled"], **{FFMA: 2048.0**3 + 32})
    assert judge_ncu(item(FFMA, "==", "N**3"), outcome(ncu=m)).status == Status.FAILED


def test_scoring_dispatches_ncu_items_here():
    st = RUBRIC.stage("tiled")
    k = KernelResources(st.kernel, "sm_90a", registers=32)
    o = outcome()
    o.compile = CompileResult(st.id, True, kernel=k, launch=st.launch, launch_source="rubric default")
    r = evaluate(item(f"{FFMA} / {REQ}"), o, {"tiled": o}, Peaks(66.9, 989.0, "test"))
    assert r.status == Status.PASSED and r.values.value == 512.0


def test_fmt():
    assert fmt(8589934592.0) == "8,589,934,592"
    assert fmt(0.3125) == "0.3125" and fmt(18.67) == "18.67" and fmt(1.5e20) == "1.5e+20"
