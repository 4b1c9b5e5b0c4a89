"""The grader's own ncu run on the H200 (captured from its work folder, 2026-11-29):
every metric the rubric and the diagnosis ask for exists under that name in Nsight
Compute 2025.3.1, and the diagnosis reads each reference kernel as the ladder expects."""
from pathlib import Path

import pytest

from grader.profile.diagnosis import diagnose
from grader.profile.ncu import metrics_needed, parse_raw_csv
from grader.rubric.load import load_rubric

ROOT = Path(__file__).resolve().parent.parent
TABLE = parse_raw_csv((ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_grader_solutions_h200_n2048.csv").read_text())
# The same run with the Hopper stage (2026-11-30): every kernel, with the metric list of today's rubric.
WITH_HOPPER = parse_raw_csv(
    (ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_grader_solutions_with_hopper_h200_n2048.csv").read_text())
RUBRIC = load_rubric(ROOT / "rubric.yaml")


def test_every_requested_metric_was_reported_for_every_kernel():
    for st in RUBRIC.stages:
        row = WITH_HOPPER[st.kernel]
        missing = [m for m in metrics_needed(RUBRIC) if row.get(m) is None]
        assert not missing, (st.kernel, missing)


@pytest.mark.parametrize("stage,kernel,words", [
    ("naive", "mmNaive", "not coalesced"),
    ("coalesced", "mmCoalesced", "memory-bound"),
    ("tiled", "mmTiled", "shared-memory loads"),
    ("blocktiling_1d", "mm1DBlocktiling", "shared-memory traffic"),
    ("blocktiling_2d", "mm2DBlocktiling", "FMA pipe"),
    ("wmma", "mmWMMA", "Tensor Cores"),
])
def test_diagnosis_of_each_reference_kernel(stage, kernel, words):
    assert words in diagnose(TABLE[kernel], stage).verdict
