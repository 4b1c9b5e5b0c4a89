"""Shared setup for the report-check tests: the rubric, and stage outcomes built from the grader's
own H200 measurements (the live ncu fixture at N = 2048 and the run-5 timings at N = 4096)."""
from __future__ import annotations

import json
from pathlib import Path

from grader.evidence.profile import TimingSummary
from grader.grading import StageOutcome
from grader.model import Cause, Gap, Verdict
from grader.profile.ncu import parse_raw_csv
from grader.rubric.load import load_rubric

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
CFG = RUBRIC.report
TABLE = parse_raw_csv((ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_grader_solutions_h200_n2048.csv").read_text())
TIMINGS = json.loads((ROOT / "docs/measurements/2026-11-29-h200-stability.json").read_text())["runs"][0]["stages"]
# The Hopper stage came later: its row and timing come from a grading of solutions/ with it (same GPU, tools).
TABLE["mmHopper"] = parse_raw_csv((ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_grader_solutions_with_hopper_h200_n2048.csv")
                                  .read_text())["mmHopper"]
TIMINGS["hopper"] = json.loads((ROOT / "tests/fixtures/timing_hopper_h200.json").read_text())["hopper"]
SOLUTION = (ROOT / "solutions/report.md").read_text()
STARTER = (ROOT / "starter/report.md").read_text()


def gpu_outcomes(timed: bool = True) -> dict[str, StageOutcome]:
    """Every stage correct, profiled (fixture metrics) and, when ``timed``, timed."""
    outs = {}
    for st in RUBRIC.stages:
        o = StageOutcome(stage=st, verdict=Verdict.CORRECT)
        o.ncu, o.profile_n = dict(TABLE[st.kernel]), RUBRIC.profile.n
        o.timing = TimingSummary(**TIMINGS[st.id]) if timed else None
        outs[st.id] = o
    return outs


def no_gpu_outcomes() -> dict[str, StageOutcome]:
    """What grade.py hands over on a machine without a GPU."""
    outs = {}
    for st in RUBRIC.stages:
        o = StageOutcome(stage=st, verdict=Verdict.NOT_EVALUATED, gpu_reason="no CUDA device")
        o.ncu_gap, o.profile_n = Gap(Cause.NO_GPU, "not evaluated: no CUDA device"), RUBRIC.profile.n
        outs[st.id] = o
    return outs


def write_report(tmp_path: Path, text: str | bytes) -> Path:
    sub = tmp_path / "sub"
    sub.mkdir(exist_ok=True)
    path = sub / "report.md"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return sub


def by_id(items) -> dict:
    return {i.item: i for i in items}
