"""The rubric's Nsight Compute items on the captured H200 profile: every item passes its
reference kernel with >= 10% margin and fails the previous stage's kernel (integrity items,
op "==" or `integrity: true`, pass both). The GPU calibration (grader/instructor/calibrate.py) checks the same on live runs."""
from pathlib import Path

import pytest

from grader.grading import StageOutcome
from grader.model import Status, Verdict
from grader.profile.ncu import parse_raw_csv
from grader.rubric.kinds import judge_ncu, measure
from grader.rubric.load import load_rubric

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
TABLE = parse_raw_csv((ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_solutions_h200_n2048.csv").read_text())
# The Hopper stage came later: its reference's row is from the grader's own ncu run of solutions/ with it.
TABLE["mmHopper"] = parse_raw_csv(
    (ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_grader_solutions_with_hopper_h200_n2048.csv").read_text())["mmHopper"]
NCU_ITEMS = {st.id: [i for i in st.items if i.kind == "ncu"] for st in RUBRIC.stages}
N = 2048
IDS = [s.id for s in RUBRIC.stages]


def cases():
    for sid, items in NCU_ITEMS.items():
        for it in items:
            yield pytest.param(sid, it, id=f"{sid}.{it.id}")


def outcome(stage_id: str, kernel: str) -> StageOutcome:
    return StageOutcome(stage=RUBRIC.stage(stage_id), verdict=Verdict.CORRECT, ncu=dict(TABLE[kernel]), profile_n=N)


def margin(op: str, value: float, threshold: float) -> float:
    return (value - threshold) / threshold if op in (">=", ">") else (threshold - value) / threshold


def test_every_stage_is_covered_and_every_fp32_stage_has_the_integrity_check():
    for st in RUBRIC.stages:
        ids = [i.id for i in NCU_ITEMS[st.id]]
        assert ("ffma_count" in ids) == (st.inputs == "fp32"), st.id
        if st.id != "naive":
            assert any(i.params.op != "==" for i in NCU_ITEMS[st.id]), f"{st.id} has no transition item"


@pytest.mark.parametrize("stage_id,it", list(cases()))
def test_reference_passes_with_margin(stage_id, it):
    st = RUBRIC.stage(stage_id)
    r = judge_ncu(it, outcome(stage_id, st.kernel))
    assert r.status == Status.PASSED, r.message
    assert it.params.explain and it.title and it.points > 0
    if it.params.op != "==" and not it.params.integrity:
        value, threshold = measure(it.params, TABLE[st.kernel], N)
        assert margin(it.params.op, value, threshold) >= 0.10, (value, threshold)


@pytest.mark.parametrize("stage_id,it", [c for c in cases() if c.values[0] != "naive"])
def test_predecessor_fails_transition_items_and_passes_integrity_items(stage_id, it):
    prev = RUBRIC.stages[IDS.index(stage_id) - 1]
    r = judge_ncu(it, outcome(stage_id, prev.kernel))
    expected = Status.PASSED if it.params.op == "==" or it.params.integrity else Status.FAILED
    assert r.status == expected, r.message
