"""The code Nsight Compute measured must be the code that was timed (grader/profile/agreement.py, wired in
grader/gpu/ncu_run.py), and a warm-up far longer than the timed launches holds the speed items for review
(grader/rubric/kinds.py: long_warmup). Judged on the stored reference grading (an H200's ncu durations at
N = 2048 and timed medians at N = 4096), and on copies of it changed the way a hostile kernel would."""
from __future__ import annotations

import dataclasses

import pytest
from gradings_helpers import fixture

from grader import DEFAULT_RUBRIC
from grader.gpu.ncu_run import _compare_with_timing
from grader.model import Cause, Status
from grader.profile.agreement import DURATION_METRIC, judge
from grader.rubric.load import load_rubric
from grader.score.stages import score

RUBRIC = load_rubric(DEFAULT_RUBRIC)
PROFILED = [sid for sid, o in fixture("reference").outcomes.items() if o.ncu and o.timing]


def _reference():
    """The stored reference grading's outcomes, each timed stage given launches at the profile size that
    took what ncu measured there (the fixture predates those launches; they time the same kernel)."""
    g = fixture("reference")
    for sid in PROFILED:
        o = g.outcomes[sid]
        assert o.bench is not None and o.ncu is not None
        o.bench.profile_n = o.profile_n
        o.bench.profile_ms = [o.ncu[DURATION_METRIC] * 1e-6] * 3
    return g


def test_the_reference_kernels_profiled_and_timed_sizes_agree_within_the_rubrics_factors():
    assert len(PROFILED) >= 6
    g = _reference()
    for sid in PROFILED:
        o = g.outcomes[sid]
        _compare_with_timing(o, RUBRIC)
        assert o.agreement is not None and not o.agreement.problem, (sid, o.agreement)
        assert o.ncu is not None and o.ncu_gap is None
        # a ratio of stored values, not a clock: the stand-in launches are ncu's own duration
        assert o.agreement.duration_ratio == pytest.approx(1, abs=1e-9)


@pytest.mark.parametrize("sid", PROFILED)
def test_a_kernel_that_times_another_path_than_it_shows_the_profiler_loses_its_ncu_items(sid):
    """Three ways the profiled path is not the timed one: the benchmark size runs three times slower than
    the profile size predicts (a branch on N); the profiler's launch takes twice as long as the same
    launch without it (a branch on the profiler or on a launch counter); both. Each fails the stage's
    ncu items, technique evidence included, with the reason; its speed items then wait on them."""
    for change in ("n_branch", "profiler_branch", "both"):
        g = _reference()
        o = g.outcomes[sid]
        assert o.bench is not None and o.ncu is not None
        if change in ("n_branch", "both"):
            o.bench.student_ms = [3 * t for t in o.bench.student_ms]
            o.timing = dataclasses.replace(o.timing, median_ms=3 * o.timing.median_ms) if o.timing else None
        if change in ("profiler_branch", "both"):
            o.ncu = {**o.ncu, DURATION_METRIC: 2 * o.ncu[DURATION_METRIC]}
        _compare_with_timing(o, RUBRIC)
        assert o.ncu is None and o.ncu_gap is not None and o.ncu_gap.cause is Cause.STUDENT, change
        assert "is not the code that was timed" in o.ncu_gap.message
        assert ("Nsight Compute timed its launch" in o.ncu_gap.message) == (change != "n_branch")
        assert ("its rate at the benchmark size" in o.ncu_gap.message) == (change != "profiler_branch")
        results = [r for r in score(g.outcomes, g.env.peaks) if r.stage == sid]
        ncu_items = [r for r, it in zip(results, o.stage.items) if it.kind == "ncu"]
        assert ncu_items and all(r.status == Status.FAILED and "not the code that was timed" in r.message
                                 for r in ncu_items)


def test_a_timed_stage_without_launches_at_the_profile_size_is_not_evaluated():
    g = _reference()
    o = g.outcomes[PROFILED[0]]
    assert o.bench is not None
    o.bench.profile_ms = []
    _compare_with_timing(o, RUBRIC)
    assert o.ncu is None and o.ncu_gap is not None and o.ncu_gap.cause is Cause.GRADER
    assert o.ncu_gap.message.startswith("not evaluated: ")


def test_with_ncu_at_base_clocks_only_the_rates_are_compared():
    """ncu's clock_control "base" runs the profiled launch at base clocks: a slower ncu duration alone is
    no disagreement then, while a kernel branching on N still is."""
    base = dataclasses.replace(RUBRIC, profile=dataclasses.replace(RUBRIC.profile, clock_control="base"))
    for n_branch in (False, True):
        g = _reference()
        o = g.outcomes[PROFILED[0]]
        assert o.bench is not None and o.ncu is not None
        o.ncu = {**o.ncu, DURATION_METRIC: 1.8 * o.ncu[DURATION_METRIC]}
        if n_branch:
            o.bench.student_ms = [3 * t for t in o.bench.student_ms]
        _compare_with_timing(o, base)
        assert o.agreement is not None and o.agreement.duration_ratio == pytest.approx(1.8)
        assert bool(o.agreement.problem) == n_branch and (o.ncu is None) == n_branch


def test_the_judge_needs_every_time_and_bounds_each_ratio_both_ways():
    assert judge(2048, 1e6, [], 4096, [8.0], 1.5, 2.0) is None
    assert judge(2048, 0.0, [1.0], 4096, [8.0], 1.5, 2.0) is None
    ok = judge(2048, 1e6, [1.0, 1.1, 0.9], 4096, [8.0], 1.5, 2.0)
    assert ok is not None and not ok.problem and ok.rate_ratio == pytest.approx(1.0)
    for ncu_ns, profile_ms, bench_ms in ((1.6e6, 1.0, 8.0), (0.6e6, 1.0, 8.0), (1e6, 1.0, 17.0), (1e6, 1.0, 3.9)):
        got = judge(2048, ncu_ns, [profile_ms], 4096, [bench_ms], 1.5, 2.0)
        assert got is not None and got.problem, (ncu_ns, profile_ms, bench_ms)


def test_a_warmup_far_longer_than_the_timed_launches_holds_the_speed_items_for_review():
    g = fixture("reference")
    sid = next(s for s in PROFILED if g.outcomes[s].stage.bench.warmup > 0 and any(
        it.kind == "fraction_of_baseline" for it in g.outcomes[s].stage.items))
    o = g.outcomes[sid]
    assert o.timing is not None
    multiple = o.stage.bench.warmup_review_multiple
    median = o.timing.median_ms

    def speed(warmup_ms):
        assert o.timing is not None
        o.timing.warmup_ms = warmup_ms
        return next(r for r, it in zip([r for r in score(g.outcomes, g.env.peaks) if r.stage == sid], o.stage.items)
                    if it.kind == "fraction_of_baseline")

    honest = speed([1.1 * median, median])
    assert honest.status == Status.PASSED
    held = speed([(multiple + 1) * median, median])
    assert held.status == Status.REVIEW and held.score == 0 and "warm-up launch 1 took" in held.message
    assert speed(None).status == Status.PASSED  # a stage timed without warm-up
