"""grader.outputs.results against Gradescope's results.json spec (and gradescope-utils' output)."""
from __future__ import annotations

import io
import json
import math
import os
import stat
import unittest

import pytest

from grader.evidence.limits import Peaks
from grader.evidence.protocol import ProbeResult
from grader.evidence.results import LeaderboardEntry, Results, ResultsExtra
from grader.model import ItemResult, Measured, Status
from grader.outputs.results import (
    OUTPUT_FORMATS,
    TEST_STATUSES,
    VISIBILITIES,
    build_results,
    dumps,
    error_results,
    write_results,
)

TOP_KEYS = {"score", "execution_time", "output", "output_format", "visibility",
            "stdout_visibility", "tests"}
TEST_KEYS = {"name", "number", "score", "max_score", "status", "output", "output_format",
             "visibility", "tags", "extra_data"}


def items() -> list[ItemResult]:
    return [
        ItemResult("naive", "correct", "Naive: correct", Status.PASSED, 10.0, 10.0,
                   "All sizes match.", number="1.1", values=Measured(value=1e-6)),
        ItemResult("tiled", "correct", "Tiled: correct", Status.FAILED, 0.0, 10.0,
                   "N = 512: max error 7.4", visibility="after_due_date", number="3.1"),
        ItemResult("tiled", "speed", "Tiled: speed", Status.PASSED, 3.3333333, 5.0, "37% of cuBLAS",
                   number="3.2", values=Measured(ratio=0.37, value=math.nan)),
        ItemResult("wmma", "correct", "WMMA: correct", Status.NOT_EVALUATED, 0.0, 10.0,
                   "not evaluated: no CUDA device", number="5.1", needs_gpu=True),
        ItemResult("wmma", "writeup", "WMMA: write-up", Status.MANUAL, 0.0, 5.0, "",
                   visibility="hidden", number="5.2"),
    ]


def check_spec(results: dict) -> None:
    """Field-by-field check of a results dict against Gradescope's documented format."""
    assert TOP_KEYS <= results.keys()
    assert isinstance(results["score"], float) and math.isfinite(results["score"])
    assert isinstance(results["execution_time"], int) and results["execution_time"] >= 0
    assert isinstance(results["output"], str)
    assert results["output_format"] in OUTPUT_FORMATS
    assert results["visibility"] in VISIBILITIES
    assert results["stdout_visibility"] in VISIBILITIES
    assert isinstance(results["tests"], list)
    for t in results["tests"]:
        # hand-graded, or pending GPU grading: neutral, outside the autograder's total (points in extra_data)
        if t["extra_data"]["status"] == "manual" or t["extra_data"].get("pending_gpu") is True:
            assert not {"score", "max_score", "status"} & t.keys()
            t = {**t, "score": 0.0, "max_score": 0.0, "status": "passed"}
        assert TEST_KEYS <= t.keys()
        assert isinstance(t["name"], str) and t["name"]
        assert isinstance(t["number"], str) and t["number"]
        assert isinstance(t["score"], float) and math.isfinite(t["score"])
        assert isinstance(t["max_score"], float) and math.isfinite(t["max_score"])
        assert t["status"] in TEST_STATUSES
        assert isinstance(t["output"], str)
        assert t["output_format"] in OUTPUT_FORMATS
        assert t["visibility"] in VISIBILITIES
        assert isinstance(t["tags"], list) and all(isinstance(x, str) for x in t["tags"])
        assert isinstance(t["extra_data"], dict)
    if "leaderboard" in results:
        for e in results["leaderboard"]:
            assert isinstance(e["name"], str) and "value" in e
            assert e.get("order", "desc") in ("asc", "desc")
    json.dumps(results, allow_nan=False)  # strict JSON as built


def test_build_results_fields():
    r = build_results(items(), execution_time=136.6, output="## Summary").to_json()
    check_spec(r)
    assert r["score"] == round(10.0 + 0.0 + 3.3333333, 4) == 13.3333
    assert r["execution_time"] == 137
    assert r["output"] == "## Summary" and r["output_format"] == "md"
    assert r["visibility"] == "visible" and r["stdout_visibility"] == "hidden"
    assert "leaderboard" not in r
    assert r["extra_data"] == {"hand_graded_items": ["5.2"], "hand_graded_points": 5.0}

    t = {x["number"]: x for x in r["tests"]}
    assert [x["number"] for x in r["tests"]] == ["1.1", "3.1", "3.2", "5.1", "5.2"]
    assert t["1.1"] == {
        "name": "Naive: correct", "number": "1.1", "score": 10.0, "max_score": 10.0,
        "status": "passed", "output": "All sizes match.", "output_format": "md",
        "visibility": "visible", "tags": ["naive"],
        "extra_data": {"status": "passed", "stage": "naive", "item": "correct",
                       "values": {"value": 1e-6}, "needs_gpu": False},
    }
    assert t["3.1"]["status"] == "failed" and t["3.1"]["visibility"] == "after_due_date"
    assert t["3.2"]["score"] == 3.3333 and t["3.2"]["status"] == "passed"  # partial credit
    # not evaluated: Gradescope's "failed", 0 points, the message says why
    assert t["5.1"]["status"] == "failed" and t["5.1"]["score"] == 0.0
    assert t["5.1"]["output"] == "not evaluated: no CUDA device"
    assert t["5.1"]["extra_data"]["status"] == "not_evaluated"
    assert t["5.1"]["extra_data"]["needs_gpu"] is True  # typed, for the no-GPU policy
    # hand-graded: no score, max_score or status (neutral on Gradescope, not in its autograder total);
    # the points it carries are the manual question's
    assert not {"score", "max_score", "status"} & t["5.2"].keys()
    assert "Graded by hand" in t["5.2"]["output"] and t["5.2"]["visibility"] == "hidden"
    assert t["5.2"]["extra_data"]["status"] == "manual" and t["5.2"]["extra_data"]["hand_graded_points"] == 5.0


def test_score_is_sum_of_tests():
    r = build_results(items(), execution_time=1, output="").to_json()
    assert r["score"] == round(sum(t.get("score", 0.0) for t in r["tests"]), 4)
    assert build_results([], execution_time=0, output="").to_json()["score"] == 0.0


def test_not_evaluated_never_scores():
    it = ItemResult("wmma", "speed", "WMMA: speed", Status.NOT_EVALUATED, 4.0, 5.0, "no GPU")
    assert build_results([it], execution_time=0, output="").to_json()["score"] == 0.0


def test_unnumbered_items_are_numbered_in_order():
    its = [ItemResult("a", "x", "", Status.PASSED, 1, 1), ItemResult(None, "y", "Y", Status.FAILED, 0, 1)]
    r = build_results(its, execution_time=0, output="").to_json()
    assert [t["number"] for t in r["tests"]] == ["1", "2"]
    assert r["tests"][0]["name"] == "a/x"
    assert r["tests"][1]["tags"] == []
    assert isinstance(r["tests"][0]["score"], float)


def test_execution_time_is_int_seconds():
    for given, want in [(0.4, 0), (2.5, 2), (2.51, 3), (-1, 0), (math.nan, 0), (math.inf, 0)]:
        assert build_results([], execution_time=given, output="").to_json()["execution_time"] == want


def test_leaderboard_and_extra():
    lb = [LeaderboardEntry("GFLOP/s", 812.5), LeaderboardEntry("ms", 1.2, "asc")]
    extra = ResultsExtra(device=ProbeResult(ok=True, name="NVIDIA H200"), peaks=Peaks(66.9, 989.0, "test"))
    r = build_results(items(), execution_time=1, output="", leaderboard=lb, extra=extra,
                      visibility="after_published", stdout_visibility="visible").to_json()
    check_spec(r)
    assert r["leaderboard"] == [{"name": "GFLOP/s", "value": 812.5}, {"name": "ms", "value": 1.2, "order": "asc"}]
    assert r["extra_data"]["device"]["name"] == "NVIDIA H200" and r["extra_data"]["peaks"]["fp32"] == 66.9
    assert r["visibility"] == "after_published" and r["stdout_visibility"] == "visible"
    with pytest.raises(ValueError):
        build_results([], execution_time=1, output="", leaderboard=[LeaderboardEntry("x", 1, "up")]).to_json()
    # a grading without a GPU says so: its device is written null beside its peaks
    r = build_results([], execution_time=1, output="", extra=ResultsExtra(peaks=Peaks(None, None, "no device")))
    assert json.loads(dumps(r))["extra_data"]["device"] is None


@pytest.mark.parametrize("vis", ["public", "Visible", "", "after_due"])
def test_unknown_visibility_raises(vis):
    bad = ItemResult("naive", "c", "C", Status.PASSED, 1, 1, visibility=vis)
    with pytest.raises(ValueError, match="visibility"):
        build_results([bad], execution_time=0, output="").to_json()
    with pytest.raises(ValueError):
        build_results([], execution_time=0, output="", visibility=vis).to_json()
    with pytest.raises(ValueError):
        build_results([], execution_time=0, output="", stdout_visibility=vis).to_json()


def test_unknown_status_and_nonfinite_score_raise():
    with pytest.raises(ValueError, match="status"):
        build_results([ItemResult("a", "b", "c", "skipped", 0, 1)], execution_time=0, output="").to_json()
    with pytest.raises(ValueError, match="score"):
        build_results([ItemResult("a", "b", "c", Status.PASSED, math.nan, 1)], execution_time=0, output="").to_json()
    with pytest.raises(ValueError, match="max_score"):
        build_results([ItemResult("a", "b", "c", Status.FAILED, 0, math.inf)], execution_time=0, output="").to_json()


def test_write_results_atomic_and_strict(tmp_path):
    path = tmp_path / "autograder" / "results" / "results.json"  # parents do not exist yet
    r = build_results(items(), execution_time=3, output="ok",
                      extra=ResultsExtra(pending_gpu_items=1, pending_gpu_points=math.inf))
    assert r.extra_data is not None and r.extra_data.pending_gpu_points == math.inf  # the record keeps it
    r.leaderboard = [LeaderboardEntry("inf", math.inf), LeaderboardEntry("ninf", -math.inf),
                     LeaderboardEntry("nan", math.nan)]
    write_results(path, r)
    assert sorted(os.listdir(path.parent)) == ["results.json"]  # no temp file left
    text = path.read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    back = json.loads(text)
    assert back["extra_data"] == {"hand_graded_items": ["5.2"], "hand_graded_points": 5.0, "pending_gpu_items": 1,
                                  "pending_gpu_points": None}
    assert [e["value"] for e in back["leaderboard"]] == [None, None, None]
    t32 = next(t for t in back["tests"] if t["number"] == "3.2")
    assert t32["extra_data"]["values"] == {"ratio": 0.37, "value": None}
    assert back["score"] == r.score
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644

    # overwrite: replaced whole, still no temp files
    write_results(path, error_results("Traceback ...", 1))
    assert sorted(os.listdir(path.parent)) == ["results.json"]
    assert json.loads(path.read_text())["tests"][0]["status"] == "failed"


def test_write_results_failure_leaves_old_file(tmp_path):
    path = tmp_path / "results.json"
    write_results(path, Results(score=1.0))
    first = path.read_text()
    with pytest.raises(TypeError):
        write_results(path, Results(score=2.0, leaderboard=[LeaderboardEntry("bad", object())]))
    assert path.read_text() == first and json.loads(first)["score"] == 1.0
    assert os.listdir(tmp_path) == ["results.json"]


def test_write_results_numpy_values(tmp_path):
    np = pytest.importorskip("numpy")
    path = tmp_path / "r.json"
    write_results(path, Results(score=1.0, leaderboard=[
        LeaderboardEntry("f32", np.float32(0.5)), LeaderboardEntry("i", np.int64(3)),
        LeaderboardEntry("arr", np.array([1.0, np.nan]))]))
    assert [e["value"] for e in json.loads(path.read_text())["leaderboard"]] == [0.5, 3, [1.0, None]]


def test_error_results():
    tb = "Traceback (most recent call last):\n  File \"x\", line 1\n```\nKeyError: 'n'"
    r = error_results(tb, execution_time=12.2).to_json()
    check_spec(r)
    assert r["score"] == 0.0 and r["execution_time"] == 12
    assert "contact course staff" in r["output"].lower()
    visible = [t for t in r["tests"] if t["visibility"] == "visible"]
    hidden = [t for t in r["tests"] if t["visibility"] == "hidden"]
    assert len(visible) == 1 and len(hidden) == 1
    assert visible[0]["status"] == "failed" and visible[0]["score"] == 0.0
    assert visible[0]["max_score"] == 0.0
    assert "contact course staff" in visible[0]["name"].lower() + visible[0]["output"].lower()
    assert "KeyError" not in visible[0]["output"] and "KeyError" not in r["output"]
    assert "KeyError: 'n'" in hidden[0]["output"]
    assert hidden[0]["output"].startswith("````text\n")  # fence longer than the ``` inside
    huge = error_results("x" * 200_000, 0).to_json()
    assert len(huge["tests"][1]["output"]) < 60_000


# --- conformance with gradescope-utils' JSONTestRunner ---------------------------------

def _gradescope_utils_output() -> dict:
    gu = pytest.importorskip("gradescope_utils")
    from gradescope_utils.autograder_utils.decorators import leaderboard, number, tags, visibility, weight
    from gradescope_utils.autograder_utils.json_test_runner import JSONTestRunner
    del gu

    class Suite(unittest.TestCase):
        @weight(10)
        @number("1.1")
        @visibility("visible")
        @tags("naive")
        def test_a_pass(self):
            """Naive: correct"""

        @weight(10)
        @number("3.1")
        @visibility("after_due_date")
        @tags("tiled")
        def test_b_fail(self):
            """Tiled: correct"""
            self.fail("N = 512: max error 7.4")

        @leaderboard("GFLOP/s")
        def test_c_board(self, set_leaderboard_value=None):
            set_leaderboard_value(812.5)

    suite = unittest.TestLoader().loadTestsFromTestCase(Suite)
    stream = io.StringIO()
    JSONTestRunner(stream=stream, visibility="visible", stdout_visibility="hidden").run(suite)
    return json.loads(stream.getvalue())


def _compatible(ours, theirs) -> bool:
    """Same JSON kind: numbers with numbers, str with str, list with list, dict with dict."""
    num = (int, float)
    if isinstance(theirs, bool) or isinstance(ours, bool):
        return isinstance(ours, bool) and isinstance(theirs, bool)
    if isinstance(theirs, num):
        return isinstance(ours, num)
    return isinstance(ours, type(theirs))


def test_conformance_with_gradescope_utils():
    theirs = _gradescope_utils_output()
    ours = json.loads(json.dumps(build_results(
        items()[:2], execution_time=1.0, output="summary",
        leaderboard=[LeaderboardEntry("GFLOP/s", 812.5, "desc")]).to_json()))

    # top level: every key they emit, we emit with a compatible type
    assert theirs.keys() <= ours.keys()
    for key in theirs:
        if key == "execution_time":
            # gradescope-utils writes format(t, "0.2f"), a string; the spec says seconds
            # (its example is the integer 136). We write an int; both must parse as numbers.
            float(theirs[key])
            assert isinstance(ours[key], int)
            continue
        assert _compatible(ours[key], theirs[key]), key

    assert len(theirs["tests"]) == len(ours["tests"]) == 2
    for t_theirs, t_ours in zip(theirs["tests"], ours["tests"]):
        assert t_theirs.keys() <= t_ours.keys(), t_theirs.keys() - t_ours.keys()
        for key in t_theirs:
            assert _compatible(t_ours[key], t_theirs[key]), key
        for key in ("name", "number", "status", "visibility", "tags"):
            assert t_ours[key] == t_theirs[key], key
        assert float(t_ours["score"]) == float(t_theirs["score"])
        assert float(t_ours["max_score"]) == float(t_theirs["max_score"])
        assert t_ours["status"] in TEST_STATUSES and t_theirs["status"] in TEST_STATUSES

    for e_theirs, e_ours in zip(theirs["leaderboard"], ours["leaderboard"]):
        assert e_theirs.keys() <= e_ours.keys()
        assert e_ours == e_theirs
