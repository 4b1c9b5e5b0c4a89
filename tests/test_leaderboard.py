"""Leaderboard entries for the 2D and WMMA stages: only for correct, timed kernels."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

from grader.deploy.gradescope import leaderboard_entries
from grader.outputs.leaderboard import LEADERBOARD_STAGES, leaderboard_stages
from grader.outputs.results import build_results, dumps
from grader.spec.rubric import load_rubric
from grader.run.timing import summarize

ROOT = Path(__file__).resolve().parent.parent

RUBRIC = load_rubric(ROOT / "rubric.yaml")


def _outcome(stage_id: str, correct, ms: float | None = 2.0, base_ms: float = 1.8):
    stage = RUBRIC.stage(stage_id)
    timing = summarize(4096, [ms] * 5, [base_ms] * 5, None) if ms else None
    return SimpleNamespace(stage=stage, correct=correct, timing=timing)


def _grading(**outcomes):
    return SimpleNamespace(outcomes=outcomes, items=[])


def test_default_stages_are_in_the_rubric():
    ids = {st.id for st in RUBRIC.stages}
    assert set(LEADERBOARD_STAGES) <= ids
    assert leaderboard_stages({}) == LEADERBOARD_STAGES
    assert leaderboard_stages({"GRADER_LEADERBOARD_STAGES": "tiled, wmma"}) == ("tiled", "wmma")


def test_entries_for_correct_timed_stages_only():
    g = _grading(naive=_outcome("naive", True), blocktiling_2d=_outcome("blocktiling_2d", True, 3.0, 2.7),
                 wmma=_outcome("wmma", False, 0.5, 0.2))
    entries = leaderboard_entries(g)
    title = RUBRIC.stage("blocktiling_2d").title
    tflops = 2 * 4096**3 / 3.0e-3 / 1e12
    assert entries == [
        {"name": f"{title}: TFLOP/s", "value": round(tflops, 2), "order": "desc"},
        {"name": f"{title}: % of cuBLAS", "value": 90.0, "order": "desc"},
    ]


def test_no_entries_without_timing_or_correctness():
    assert leaderboard_entries(_grading()) == []
    g = _grading(blocktiling_2d=_outcome("blocktiling_2d", None, None),  # no GPU: not evaluated
                 wmma=_outcome("wmma", True, None))  # correct but not timed
    assert leaderboard_entries(g) == []
    bad = _outcome("wmma", True)
    bad.timing.tflops = math.nan
    assert leaderboard_entries(_grading(wmma=bad)) == []


def test_grading_json_gives_the_same_entries():
    g = _grading(blocktiling_2d=_outcome("blocktiling_2d", True, 3.0, 2.7), wmma=_outcome("wmma", True, 0.5, 0.25))
    # grading.json as grader/outputs/write.py writes it (timing dataclass -> dict)
    detail = json.loads(json.dumps({"stages": {sid: {"correct": o.correct, "timing": vars(o.timing)}
                                              for sid, o in g.outcomes.items()}}))
    titles = {st.id: st.title for st in RUBRIC.stages}
    assert leaderboard_entries(detail, titles=titles) == leaderboard_entries(g)
    names = [e["name"] for e in leaderboard_entries(g)]
    assert names == [f"{RUBRIC.stage('blocktiling_2d').title}: TFLOP/s",
                     f"{RUBRIC.stage('blocktiling_2d').title}: % of cuBLAS",
                     f"{RUBRIC.stage('wmma').title}: TFLOP/s", f"{RUBRIC.stage('wmma').title}: % of cuBLAS"]
    assert leaderboard_entries(g, stages=["wmma"])[0]["value"] == round(2 * 4096**3 / 0.5e-3 / 1e12, 2)


def test_entries_fit_results_json():
    g = _grading(wmma=_outcome("wmma", True, 0.5, 0.25))
    results = build_results([], execution_time=1, output="", leaderboard=leaderboard_entries(g))
    data = json.loads(dumps(results))
    assert data["leaderboard"][1] == {"name": f"{RUBRIC.stage('wmma').title}: % of cuBLAS",
                                      "value": 50.0, "order": "desc"}
