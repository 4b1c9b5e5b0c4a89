"""End-to-end grading on a real GPU (marked `gpu`; skipped where there is none).

Each broken submission in tests/submissions/ must get the verdict its header
comment names, without touching any other stage's score.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUBS = ROOT / "tests" / "submissions"
pytestmark = pytest.mark.gpu


def grade(sub: Path, out: Path, *extra: str, rubric: Path | None = None) -> dict:
    cmd = [sys.executable, str(ROOT / "grader" / "run_local.py"), str(sub), "--out", str(out), "--quiet", *extra]
    if rubric:
        cmd += ["--rubric", str(rubric)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    return {t["number"]: t for t in res["tests"]}


def short_timeout_rubric(tmp_path: Path) -> Path:
    text = (ROOT / "rubric.yaml").read_text().replace("stage_run_s: 240", "stage_run_s: 40")
    path = tmp_path / "rubric.yaml"
    path.write_text(text)
    return path


def test_solutions_are_correct_and_timed(tmp_path):
    tests = grade(ROOT / "solutions", tmp_path)
    for number in ("1", "2", "3", "4a", "4b", "5"):
        assert tests[f"{number}.correct"]["status"] == "passed", tests[f"{number}.correct"]["output"]
    detail = json.loads((tmp_path / "grading.json").read_text())
    for sid, st in detail["stages"].items():
        assert st["timing"] is not None, sid
        assert st["timing"]["median_ms"] > 0 and st["timing"]["reps"] >= 3


def test_starter_scores_zero_on_correctness(tmp_path):
    tests = grade(ROOT / "starter", tmp_path)
    for number in ("1", "2", "3", "4a", "4b", "5"):
        t = tests[f"{number}.correct"]
        assert t["status"] == "failed" and t["score"] == 0
        assert "NaN" in t["output"]  # the starter writes nothing: every element is still poison


@pytest.mark.parametrize("case,stage,needle", [
    ("wrong_index", "2", "first bad element"),
    ("partial_write", "4b", "first bad element"),
    ("nan_output", "1", "NaN"),
    ("illegal_address", "1", "the kernel failed"),
])
def test_broken_kernels_fail_their_stage(tmp_path, case, stage, needle):
    tests = grade(SUBS / case, tmp_path)
    t = tests[f"{stage}.correct"]
    assert t["status"] == "failed" and needle in t["output"], t["output"]
    # no speed is reported for a wrong kernel
    for number, other in tests.items():
        if number.startswith(stage + ".") and other["extra_data"]["status"] != "passed":
            assert "TFLOP" not in other["output"]


def test_hanging_kernel_times_out_without_hurting_other_stages(tmp_path):
    tests = grade(SUBS / "hang", tmp_path, "--stages", "naive,coalesced", rubric=short_timeout_rubric(tmp_path))
    assert "timed out after 40 s" in tests["1.correct"]["output"]
    # hang/ carries a correct coalesced kernel: the hang next door must not cost it anything
    assert tests["2.correct"]["status"] == "passed", tests["2.correct"]["output"]
