"""Partial credit on a declared curve, and speed points gated on the stage's technique evidence
(grader/rubric/curve.py, grader/score/stages.py: gate_speed). Synthetic outcomes, no GPU."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from grader.grading import StageOutcome
from grader.model import Status, Verdict
from grader.profile.timing import summarize
from grader.rubric.curve import Curve
from grader.rubric.errors import RubricError
from grader.rubric.load import parse_rubric
from grader.score.stages import score
from tests.test_scoring import PEAKS, _compiled

ROOT = Path(__file__).resolve().parent.parent


def test_a_ramp_through_knees_is_continuous_and_full_at_the_threshold():
    c = Curve(((0.15, 0.0), (0.30, 0.5)), 0.80)
    assert c.fraction(0.10) == 0.0 and c.fraction(0.15) == 0.0
    assert c.fraction(0.225) == pytest.approx(0.25)
    assert c.fraction(0.30) == pytest.approx(0.5)
    assert c.fraction(0.55) == pytest.approx(0.75)
    assert c.fraction(0.80) == 1.0 and c.fraction(3.0) == 1.0
    # No cliff: just either side of a knee earns almost the same.
    assert abs(c.fraction(0.2999) - c.fraction(0.3001)) < 1e-3
    assert c.needed_for(0.5) == pytest.approx(0.30) and c.needed_for(0.75) == pytest.approx(0.55)
    assert c.needed_for(1.0) == pytest.approx(0.80)
    assert c.fraction(math.nan) == 0.0


def test_steps_and_a_falling_direction():
    steps = Curve(((0.3, 0.5), (0.6, 0.75)), 0.8, steps=True)
    assert [steps.fraction(v) for v in (0.29, 0.3, 0.59, 0.6, 0.8)] == [0.0, 0.5, 0.5, 0.75, 1.0]
    assert steps.needed_for(0.6) == 0.6
    # shared loads per FFMA: smaller is better; 0.5 earns nothing, 0.28 everything
    fall = Curve(((0.5, 0.0),), 0.28, higher=False)
    assert fall.fraction(0.6) == 0.0 and fall.fraction(0.39) == pytest.approx(0.5)
    assert fall.fraction(0.28) == 1.0 and fall.fraction(0.1) == 1.0


def _rubric(edit):
    raw = yaml.safe_load((ROOT / "rubric.yaml").read_text())
    edit(raw)
    return parse_rubric(raw)


def _item(raw, stage_id, item_id):
    stage = next(s for s in raw["stages"] if s["id"] == stage_id)
    return next(it for it in stage["items"] if it["id"] == item_id)


@pytest.mark.parametrize("patch, where, expected", [
    ({"curve": [[0.3, 0.5], [0.2, 0.6]]}, "items[4].curve[1]", "values rising"),
    ({"curve": [[0.3, 1.5]]}, "items[4].curve[0]", "fractions from 0 to 1"),
    ({"curve": [[0.9, 0.5]]}, "items[4].curve[0]", "not reaching"),
    ({"steps": "half"}, "items[4].steps", "a list"),
    ({"curve": [[0.3, 0.5]], "partial_from": 0.1}, "items[4].", "at most one of"),
])
def test_a_bad_curve_names_its_key_and_what_was_expected(patch, where, expected):
    with pytest.raises(RubricError) as err:
        _rubric(lambda raw: _item(raw, "blocktiling_2d", "speed").update(patch))
    assert where in str(err.value) and expected in str(err.value)


def test_a_curve_on_an_expression_threshold_or_an_equality_is_refused():
    with pytest.raises(RubricError, match="a curve only"):
        _rubric(lambda raw: _item(raw, "wmma", "ncu_no_ffma").update(partial_from=1e12))
    with pytest.raises(RubricError, match="technique evidence"):
        _rubric(lambda raw: _item(raw, "hopper", "ncu_no_ffma").update(technique=True))


def _timed_2d(rubric, fraction, technique_passes: bool):
    st = rubric.stage("blocktiling_2d")
    c, sass = _compiled(st)
    o = StageOutcome(stage=st, compile=c, sass=sass, verdict=Verdict.CORRECT)
    o.timing = summarize(4096, [2.73 / fraction] * 3, [2.73] * 3, 66.9)
    shared = 0.16 if technique_passes else 0.375  # shared loads per warp FFMA
    ffma = 4096.0 ** 3
    o.ncu, o.profile_n = {"smsp__inst_executed_op_shared_ld.sum": shared * ffma / 32,
                          "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": ffma,
                          "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": 33.0}, 4096
    return {r.item: r for r in score({st.id: o}, PEAKS)}


def _curved(raw):
    speed = _item(raw, "blocktiling_2d", "speed")
    speed.pop("partial_from", None), speed.pop("steps", None)
    speed.update(min=0.80, curve=[[0.15, 0.0], [0.30, 0.5]])
    _item(raw, "blocktiling_2d", "ncu_shared_per_ffma").update(technique=True)


def test_a_kernel_on_the_curve_is_told_what_it_earned_and_what_the_next_points_need():
    rubric = _rubric(_curved)
    speed = _timed_2d(rubric, 0.353, technique_passes=True)["speed"]
    assert speed.status == Status.FAILED
    assert speed.score == pytest.approx(8 * (0.5 + 0.5 * 0.053 / 0.5), rel=1e-3)
    assert "earns 4.42 of 8 points" in speed.message and "5 points need 42.5%" in speed.message
    assert "full points at 80.0%" in speed.message


def test_speed_points_wait_on_the_technique_items():
    rubric = _rubric(_curved)
    items = _timed_2d(rubric, 0.435, technique_passes=False)  # a fast kernel of the previous stage
    assert items["ncu_shared_per_ffma"].status == Status.FAILED
    speed = items["speed"]
    assert speed.status == Status.FAILED and speed.score == 0.0
    assert "No speed points yet" in speed.message and "4b.ncu_shared_per_ffma" in speed.message
    assert "would earn" in speed.message and speed.values.gated_by == ["4b.ncu_shared_per_ffma"]
    # the same kernel with the technique's evidence earns its speed on the curve
    assert _timed_2d(rubric, 0.435, technique_passes=True)["speed"].score > 5


def test_speed_points_wait_when_the_technique_evidence_cannot_be_read():
    rubric = _rubric(_curved)
    st = rubric.stage("blocktiling_2d")
    c, sass = _compiled(st)
    o = StageOutcome(stage=st, compile=c, sass=sass, verdict=Verdict.CORRECT)
    o.timing = summarize(4096, [2.73 / 0.9] * 3, [2.73] * 3, 66.9)
    items = {r.item: r for r in score({st.id: o}, PEAKS)}  # no ncu metrics at all
    assert items["ncu_shared_per_ffma"].status == Status.NOT_EVALUATED
    assert items["speed"].status == Status.NOT_EVALUATED and items["speed"].score == 0
    assert "could not be read" in items["speed"].message


def test_an_ncu_item_earns_part_of_its_points_on_its_curve():
    def edit(raw):
        _curved(raw)
        _item(raw, "blocktiling_2d", "ncu_fma_pipe").update(curve=[[25, 0.0]])
    items = _timed_2d(_rubric(edit), 0.5, technique_passes=True)
    pipe = items["ncu_fma_pipe"]  # 33% on a ramp from 25% (nothing) to the threshold (everything)
    lo, hi = 25.0, float(_rubric(edit).stage("blocktiling_2d").items[-1].params.value)
    assert pipe.status == Status.FAILED and pipe.score == pytest.approx(pipe.max_score * (33 - lo) / (hi - lo), rel=1e-3)
    assert "on the curve this earns" in pipe.message
