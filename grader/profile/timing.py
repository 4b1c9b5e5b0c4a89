"""Summaries of interleaved timings (pure).

The student's kernel and the baseline were timed alternately on the same inputs;
the ratio of medians is what thresholds use, and the spread of per-pair ratios
says how much to trust it.
"""
from __future__ import annotations

import statistics

from grader.evidence.profile import TimingSummary


def gemm_tflops(n: int, ms: float) -> float:
    return 2.0 * n**3 / (ms * 1e-3) / 1e12


def summarize(n: int, student_ms: list[float], baseline_ms: list[float],
              peak_tflops: float | None, warmup_ms: list[float] | None = None) -> TimingSummary | None:
    pairs = [(s, b) for s, b in zip(student_ms, baseline_ms) if s > 0 and b > 0]
    if not pairs:
        return None
    med = statistics.median(s for s, _ in pairs)
    base = statistics.median(b for _, b in pairs)
    ratios = sorted(b / s for s, b in pairs)
    if len(ratios) >= 4:
        q = statistics.quantiles(ratios, n=4)
        iqr = q[2] - q[0]
    else:
        iqr = ratios[-1] - ratios[0]
    tf = gemm_tflops(n, med)
    return TimingSummary(
        n=n, reps=len(pairs), median_ms=med, min_ms=min(s for s, _ in pairs),
        baseline_median_ms=base, tflops=tf, baseline_tflops=gemm_tflops(n, base),
        fraction_of_baseline=base / med, ratio_iqr=iqr,
        fraction_of_peak=(tf / peak_tflops) if peak_tflops else None, peak_tflops=peak_tflops,
        warmup_ms=list(warmup_ms) if warmup_ms else None)
