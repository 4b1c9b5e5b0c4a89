"""Timing summaries and the two ceilings (pure)."""
import dataclasses

import pytest

from grader.evidence.protocol import ProbeResult
from grader.profile.timing import gemm_tflops, summarize
from grader.rubric.load import load_rubric
from grader.rubric.peaks import device_peaks


def test_gemm_tflops_at_4096():
    # 2 * 4096^3 = 137.4 GFLOP; cuBLAS SGEMM on an H200 took 2.73 ms -> 50.3 TFLOP/s
    assert gemm_tflops(4096, 2.73) == pytest.approx(50.34, rel=1e-3)


def test_summary_uses_medians_of_interleaved_pairs():
    s = summarize(4096, [4.0, 4.2, 3.9, 100.0, 4.1], [2.8, 2.7, 2.75, 2.7, 2.8], peak_tflops=66.9)
    assert s.median_ms == 4.1 and s.baseline_median_ms == 2.75 and s.reps == 5
    assert s.fraction_of_baseline == pytest.approx(2.75 / 4.1)
    assert s.fraction_of_peak == pytest.approx(gemm_tflops(4096, 4.1) / 66.9)
    assert s.min_ms == 3.9


def test_summary_of_nothing():
    assert summarize(4096, [], [], None) is None


def test_peaks_override_by_name_then_derived(root):
    r = load_rubric(root / "rubric.yaml")
    h200 = ProbeResult(ok=True, name="NVIDIA H200", cc=[9, 0], sms=132, clock_khz=1980000)
    p = device_peaks(r.peak_overrides, r.peak_per_sm_clock, h200)
    assert (p.fp32, p.fp16_tensor) == (66.9, 989.0) and "H200" in p.source
    other = dataclasses.replace(h200, name="NVIDIA H20 something")
    p = device_peaks(r.peak_overrides, r.peak_per_sm_clock, other)
    assert p.fp32 == pytest.approx(256 * 132 * 1.98e9 / 1e12)
    assert device_peaks(r.peak_overrides, r.peak_per_sm_clock, ProbeResult(ok=False)).fp32 is None
    assert "no peak known" in device_peaks(r.peak_overrides, r.peak_per_sm_clock, dataclasses.replace(other, cc=[12, 0])).source
