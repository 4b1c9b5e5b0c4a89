"""End-to-end grading on a real GPU (marked `gpu`; skipped where there is none).

Each broken submission in tests/submissions/ must get the verdict its header comment names, without
touching any other stage's score. The gradings are shared with the other GPU tests (tests/gpu_jobs.py):
solutions/ and starter/ graded once each, the broken cases as stages of one hostile grading.
"""
import pytest

from tests.gpu_jobs import case_tests, composite_id

pytestmark = pytest.mark.gpu


def test_solutions_are_correct_and_timed(solutions_graded):
    from grader.rubric.load import load_rubric
    from tests.gpu_jobs import ROOT

    g = solutions_graded
    min_reps = {st.id: st.bench.min_reps for st in load_rubric(ROOT / "rubric.yaml").stages}
    assert g.rc == 0, g.stderr
    tests = g.tests
    for number in ("1", "2", "3", "4a", "4b", "5"):
        assert tests[f"{number}.correct"]["status"] == "passed", tests[f"{number}.correct"]["output"]
    for sid, st in g.detail["stages"].items():
        assert st["timing"] is not None, sid
        # at least the stage's own min_reps timed launches (naive's bench times one)
        assert st["timing"]["median_ms"] > 0 and st["timing"]["reps"] >= min_reps[sid], (sid, st["timing"])


def test_starter_scores_zero_on_correctness(starter_graded):
    g = starter_graded
    assert g.rc == 0, g.stderr
    for number in ("1", "2", "3", "4a", "4b", "5"):
        t = g.tests[f"{number}.correct"]
        assert t["status"] == "failed" and t["score"] == 0
        assert "NaN" in t["output"]  # the starter writes nothing: every element is still poison


@pytest.mark.parametrize("case,stage,needle", [
    ("wrong_index", "2", "first bad element"),
    ("partial_write", "4b", "first bad element"),
    ("nan_output", "1", "NaN"),
    ("illegal_address", "1", "the kernel failed"),
])
def test_broken_kernels_fail_their_stage(hostile_graded, case, stage, needle):
    assert hostile_graded.rc == 0, hostile_graded.stderr
    tests = case_tests(hostile_graded, case)
    t = tests[f"{stage}.correct"]
    assert t["status"] == "failed" and needle in t["output"], t["output"]
    # no speed is reported for a wrong kernel
    for number, other in tests.items():
        if number.startswith(stage + ".") and other["extra_data"]["status"] != "passed":
            assert "TFLOP" not in other["output"]


def test_hanging_kernel_times_out_without_hurting_other_stages(hostile_graded):
    g = hostile_graded
    assert g.rc == 0, g.stderr
    sid = composite_id("hang", "naive")
    limit = g.detail["stages"][sid]["run_limit"]
    derived_limit_s = limit["seconds"]  # the rubric's derived limit, not a measured time
    assert limit["source"] == "derived" and derived_limit_s <= 16, limit  # about 15 s at the default sizes
    tests = case_tests(g, "hang")
    assert f"timed out after {limit['seconds']:g} s (this stage's time limit: " in tests["1.correct"]["output"]
    assert g.detail["stages"][sid]["verdict"] == "timed_out"
    ran = g.phase("run", sid)
    assert ran is not None and ran <= limit["seconds"] + 3, ran  # stopped at its limit, not minutes later
    # hang/ carries a correct coalesced kernel: the hang next door must not cost it anything
    assert tests["2.correct"]["status"] == "passed", tests["2.correct"]["output"]
