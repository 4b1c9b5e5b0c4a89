"""On a GPU: the textbook kernels (tests/submissions/textbook/course, each stage written as the handout
teaches it) are correct, earn every technique item and at least half of every speed item: the rule
every default criterion is calibrated against (docs/measurements/2026-12-01-h200-fair-criteria.md)."""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.rubric.items import is_technique
from grader.rubric.kinds import REGISTRY
from grader.rubric.load import load_rubric
from tests.gpu_jobs import TEXTBOOK_STAGES

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")


def test_the_shared_grading_covers_every_stage():
    assert TEXTBOOK_STAGES.split(",") == [s.id for s in RUBRIC.stages]


@pytest.mark.gpu
def test_the_textbook_kernels_earn_their_stage(textbook_graded):
    tests = textbook_graded.tests
    for st in RUBRIC.stages:
        for it in st.items:
            t = tests[f"{st.number}.{it.id}"]
            extra = t.get("extra_data") or {}
            got = extra.get("bonus_points", t.get("score", 0)) if st.bonus else t.get("score", 0)
            top = extra.get("bonus_max", t.get("max_score", 0)) if st.bonus else t.get("max_score", 0)
            if it.kind == "correct" or is_technique(it):
                assert extra.get("status") == "passed", (t["number"], t["output"][:400])
            if REGISTRY.of(it).speed:
                assert got >= 0.5 * top > 0, (t["number"], got, top, t["output"][:400])
