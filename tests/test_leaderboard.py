"""Leaderboard entries for the 2D and WMMA stages: only for correct, timed kernels."""
from __future__ import annotations

import json
import math
from pathlib import Path

from grader.deploy.gradescope import leaderboard_entries
from grader.evidence.limits import Peaks
from grader.evidence.protocol import ProbeResult
from grader.evidence.results import LeaderboardEntry
from grader.grading import Environment, Grading, StageOutcome, load_grading
from grader.model import Verdict
from grader.outputs.leaderboard import LEADERBOARD_STAGES, leaderboard_stages
from grader.outputs.results import build_results, dumps
from grader.profile.timing import summarize
from grader.rubric.load import load_rubric

ROOT = Path(__file__).resolve().parent.parent

RUBRIC = load_rubric(ROOT / "rubric.yaml")


VERDICTS = {True: Verdict.CORRECT, False: Verdict.WRONG, None: Verdict.NOT_EVALUATED}


def _outcome(stage_id: str, correct: bool | None, ms: float | None = 2.0, base_ms: float = 1.8) -> StageOutcome:
    timing = summarize(4096, [ms] * 5, [base_ms] * 5, None) if ms else None
    return StageOutcome(stage=RUBRIC.stage(stage_id), verdict=VERDICTS[correct], timing=timing)


def _grading(**outcomes: StageOutcome) -> Grading:
    env = Environment(ProbeResult(ok=True, name="NVIDIA H200"), "", None, None, ["-arch=sm_90a"], Peaks(None, None, "test"))
    return Grading("sub", env, outcomes, [], 1.0)


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
        LeaderboardEntry(f"{title}: TFLOP/s", round(tflops, 2), "desc"),
        LeaderboardEntry(f"{title}: % of cuBLAS", 90.0, "desc"),
    ]


def test_no_entries_without_timing_or_correctness():
    assert leaderboard_entries(_grading()) == []
    g = _grading(blocktiling_2d=_outcome("blocktiling_2d", None, None),  # no GPU: not evaluated
                 wmma=_outcome("wmma", True, None))  # correct but not timed
    assert leaderboard_entries(g) == []
    bad = _outcome("wmma", True)
    bad.timing.tflops = math.nan
    assert leaderboard_entries(_grading(wmma=bad)) == []


def test_grading_json_gives_the_same_entries(tmp_path):
    g = _grading(blocktiling_2d=_outcome("blocktiling_2d", True, 3.0, 2.7), wmma=_outcome("wmma", True, 0.5, 0.25))
    g.write(tmp_path / "grading.json")  # what batch and run_autograder read when results.json has no leaderboard
    assert leaderboard_entries(load_grading(tmp_path / "grading.json")) == leaderboard_entries(g)
    names = [e.name for e in leaderboard_entries(g)]
    assert names == [f"{RUBRIC.stage('blocktiling_2d').title}: TFLOP/s",
                     f"{RUBRIC.stage('blocktiling_2d').title}: % of cuBLAS",
                     f"{RUBRIC.stage('wmma').title}: TFLOP/s", f"{RUBRIC.stage('wmma').title}: % of cuBLAS"]
    assert leaderboard_entries(g, stages=["wmma"])[0].value == round(2 * 4096**3 / 0.5e-3 / 1e12, 2)


def test_entries_fit_results_json():
    g = _grading(wmma=_outcome("wmma", True, 0.5, 0.25))
    results = build_results([], execution_time=1, output="", leaderboard=leaderboard_entries(g))
    data = json.loads(dumps(results))
    assert data["leaderboard"][1] == {"name": f"{RUBRIC.stage('wmma').title}: % of cuBLAS",
                                      "value": 50.0, "order": "desc"}
