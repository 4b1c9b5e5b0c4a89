"""What the timings and ncu's run said of a stage: the timing summary and the agreement of the two.

Built by grader/profile/timing.py and grader/profile/agreement.py.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Agreement:
    """The two comparisons of one stage, and what is wrong with them ("" when they agree)."""

    profile_n: int
    ncu_ms: float
    profile_ms: float  # the median of the stage child's launches at profile_n
    bench_n: int
    bench_ms: float  # the timed launches' median at bench_n
    duration_ratio: float  # ncu_ms / profile_ms
    rate_ratio: float  # FLOP/s at profile_n / FLOP/s at bench_n
    problem: str = ""


@dataclass
class TimingSummary:
    n: int
    reps: int
    median_ms: float
    min_ms: float
    baseline_median_ms: float
    tflops: float
    baseline_tflops: float
    fraction_of_baseline: float  # baseline time / student time (1.0 = as fast as cuBLAS)
    ratio_iqr: float  # inter-quartile range of the per-pair ratios
    fraction_of_peak: float | None = None  # against the stage's own ceiling
    peak_tflops: float | None = None
    warmup_ms: list[float] | None = None  # each warm-up launch's time (fresh inputs, as the timed ones)
