"""Shared by the instructor commands' tests (tests/test_rescore.py, tests/test_whatif.py): the stored gradings
of tests/fixtures/gradings/, the rubric they were graded with, edited copies of it, and the real command line."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from grader.grading import Grading, load_grading

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "gradings"
NAMES = ("reference", "textbook", "shifted", "starter", "broken")  # the demo class, one folder each


def fixture(name: str) -> Grading:
    return load_grading(FIXTURES / name / "grading.json")


def graded_with() -> str:
    """The rubric text the fixtures were graded with (each grading.json keeps it)."""
    texts = {fixture(n).rubric_text for n in NAMES}
    assert len(texts) == 1 and next(iter(texts)), "the fixtures were graded with one rubric, and keep its text"
    return next(iter(texts))


def stage_item(raw: dict, stage: str, item: str) -> dict:
    st = next(s for s in raw["stages"] if s["id"] == stage)
    return next(i for i in st["items"] if i["id"] == item)


def edited(path: Path, change: Callable[[dict], None], text: str | None = None) -> Path:
    """A copy of the fixtures' rubric (or ``text``) with ``change`` applied to its parsed form, written to ``path``."""
    raw = yaml.safe_load(text if text is not None else graded_with())
    change(raw)
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return path


def score_only(raw: dict) -> None:
    """An edit that changes only how the measurements score: thresholds, points, titles, a section's points."""
    speed = stage_item(raw, "blocktiling_2d", "speed")
    speed.update(min=0.6, points=10, title="at least 60% of cuBLAS SGEMM")
    stage_item(raw, "blocktiling_1d", "speed")["min"] = 0.30
    stage_item(raw, "coalesced", "ncu_coalesced")["value"] = 3.5
    stage_item(raw, "wmma", "beats_fp32").update(min=0.4, title="at least 0.4 x the FP32 CUDA-core ceiling")
    raw["occupancy"]["items"]["ex1.occupancy"]["points"] = 3
    raw["report"]["items"]["cites"]["points"] = 2


def grader(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
