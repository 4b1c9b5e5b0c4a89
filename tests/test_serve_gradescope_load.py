"""tools/serve_gradescope_load.py end to end without a GPU: it starts the service (static workers), builds and
sets up the Gradescope package, runs N run_autograder processes at once through the signed path, and reports.

- ``--no-gpu --n 3 --stages naive``: solutions and starter are graded by the service, which has no GPU (static
  workers): the bridge says so (without_gpu), merges nothing and leaves their GPU items pending; the compile error leaves nothing pending and never reaches the
  service; every record is checked against the service's own job; ``--baseline`` gives wall_ratio;
- ``--timeout-s`` stops the runs left, reports them as timed out (all_merged false, exit 1), leaves no process;
- the checks themselves: a results.json left pending, or not what gradescope-utils writes, is not merged;
  the tool's copy of gradescope-utils' output has the library's keys and JSON types.

The GPU runs (two H200s): ``--gpus 0 --n 20 --out one.json``, then ``--gpus 0,1 --n 20 --baseline one.json``.
"""
from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

import pytest

from grader.compile import toolchain
from tests.serve_helpers import pids_matching

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "serve_gradescope_load.py"

needs_nvcc = pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")


def _tool():
    """The tool as a module (tools/ is no package); registered first, as its dataclass needs."""
    if "serve_gradescope_load" not in sys.modules:
        spec = importlib.util.spec_from_file_location("serve_gradescope_load", TOOL)
        assert spec and spec.loader
        sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[spec.name])
    return sys.modules["serve_gradescope_load"]


def _run(tmp: Path, *args: str, timeout: float = 240) -> tuple[int, dict, str]:
    out = tmp / "load.json"
    proc = subprocess.run([sys.executable, str(TOOL), "--no-gpu", "--stages", "naive", "--out", str(out), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "GRADER_SERVICE_POLL_S": "0.5"})  # the runs' bridges look every 0.5 s
    assert "Traceback" not in proc.stderr, proc.stderr
    assert out.exists(), proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result == json.loads(out.read_text())
    return proc.returncode, result, proc.stderr


@needs_nvcc
def test_three_submissions_at_once_through_the_gradescope_path(tmp_path):
    (tmp_path / "one.json").write_text(json.dumps({"wall_s": 10.0}))
    rc, res, err = _run(tmp_path, "--n", "3", "--static-parallel", "2", "--baseline", str(tmp_path / "one.json"),
                        "--work", str(tmp_path / "work"))
    assert rc == 0, json.dumps(res, indent=1)[-6000:] + err
    assert (res["n"], res["workers"], res["mode"], res["stages"], res["static_parallel"]) == (3, 1, "static", "naive", 2)
    assert res["all_merged"] is True and res["merged"] == 3 and res["completed"] == 3 and res["timed_out"] == 0
    assert (res["service_graded"], res["nothing_pending"]) == (2, 1)
    subs = {s["kind"]: s for s in res["submissions"]}
    assert list(subs) == ["solutions", "starter", "compile_error"] and [s["i"] for s in res["submissions"]] == [0, 1, 2]
    for kind in ("solutions", "starter"):  # posted, graded by the service without a GPU: nothing merged
        s = subs[kind]
        assert s["merged"] and s["state"] == "without_gpu" and s["job_state"] == "done" and s["exit_code"] == 0, s
        assert s["score"] == s["service_score"] and s["merged_items"] == 0 and "problems" not in s
        assert s["item_states"].get("not_evaluated", 0) >= 1  # the GPU items, still pending
    assert subs["solutions"]["job"] != subs["starter"]["job"]  # the markers: no dedup
    assert subs["solutions"]["score"] > subs["starter"]["score"] == 0
    ce = subs["compile_error"]  # nothing built: nothing pending, never posted
    assert ce["merged"] and ce["state"] == "nothing_pending" and ce["job"] is None and ce["score"] == 0
    assert res["per_kind"]["compile_error"] == {"n": 1, "merged": 1, "scores": [0.0], "max_score": ce["max_score"],
                                                "states": {"nothing_pending": 1}}
    assert res["per_kind"]["solutions"]["scores"] == [subs["solutions"]["score"]]
    # the timings: every run is timed from the batch's start; at most 2 static phases at once
    times = sorted(s["time_to_result_s"] for s in res["submissions"])
    assert 0 < res["p50_s"] == times[1] <= res["p95_s"] <= res["max_s"] == times[-1] <= res["wall_s"]
    assert all(s["static_s"] > 0 and s["slot_wait_s"] >= 0 for s in res["submissions"])
    assert max(s["slot_wait_s"] for s in res["submissions"]) > 0  # the third waited for a slot
    # the rate uses the unrounded wall; wall_s is rounded to 0.1 s, as the times it bounds are (at most 0.05 s off)
    assert res["jobs_per_hour_per_worker"] == pytest.approx(2 / res["wall_s"] * 3600, rel=0.051 / res["wall_s"] + 1e-3)
    assert res["service_jobs_per_hour_per_worker"] > 0
    assert res["wall_ratio"] == round(res["wall_s"] / 10.0, 3) and res["baseline_wall_s"] == 10.0
    # what run_autograder wrote is on disk, in its own /autograder-like tree
    tree = next((tmp_path / "work" / "runs").glob("000-solutions"))
    merged = json.loads((tree / "results" / "results.json").read_text())
    assert merged["extra_data"]["gpu_service"]["job"] == subs["solutions"]["job"]
    assert json.loads((tree / "submission_metadata.json").read_text())["id"] == 900000
    assert (tree / "submission" / "LOAD_MARKER.txt").exists()


@needs_nvcc
def test_past_the_timeout_the_runs_are_stopped_and_reported(tmp_path):
    work = tmp_path / "work"
    rc, res, _ = _run(tmp_path, "--n", "2", "--static-parallel", "1", "--timeout-s", "1", "--work", str(work),
                      timeout=120)
    assert rc == 1 and res["all_merged"] is False
    assert res["timed_out"] == 2 and res["completed"] == 0 and res["p50_s"] is None
    assert all(s["timed_out"] and "timed out (--timeout-s)" in s["problems"] for s in res["submissions"])
    assert not pids_matching(str(work / "runs"))  # killed with their process groups, none left behind
    assert not pids_matching("grader", "serve", str(work / "data"))  # the service stopped too


def _results(tmp: Path, **changes) -> Path:
    good = {"score": 3.0, "execution_time": 2, "output": "", "output_format": "md", "visibility": "visible",
            "stdout_visibility": "hidden", "leaderboard": [{"name": "x", "value": 1.0, "order": "desc"}],
            "tests": [{"name": "Naive: compiles", "number": "1.compiles", "score": 3.0, "max_score": 3.0,
                       "status": "passed", "output": "", "output_format": "md", "visibility": "visible",
                       "tags": ["naive"], "extra_data": {"status": "passed"}},
                      {"name": "Report: read by a TA", "number": "9.1", "output": "", "output_format": "md",
                       "visibility": "visible", "tags": [], "extra_data": {"status": "manual"}}]}
    good.update(changes)
    path = tmp / "results.json"
    path.write_text(json.dumps(good))
    return path


def test_validate_finds_what_gradescope_would_not_read(tmp_path):
    tool = _tool()
    assert tool.validate(_results(tmp_path))[1] == []  # a hand-graded item carries no score: fine
    path = _results(tmp_path)
    path.write_text(path.read_text().replace('"score": 3.0, "execution_time"', '"score": NaN, "execution_time"'))
    assert tool.validate(path) == (None, ["results.json: non-finite number NaN"])
    assert "execution_time is not a non-negative int" in tool.validate(_results(tmp_path, execution_time=-1))[1]
    _, p = tool.validate(_results(tmp_path, stdout_visibility="sometimes", leaderboard=[{"value": 1}]))
    assert "output_format, visibility or stdout_visibility is not one of Gradescope's values" in p
    assert any(m.startswith("leaderboard entry") for m in p)
    data = json.loads(_results(tmp_path).read_text())
    del data["tests"][0]["tags"]
    data["tests"][1]["score"] = 0.0
    (tmp_path / "results.json").write_text(json.dumps(data))
    assert tool.validate(tmp_path / "results.json")[1] == ["test '1.compiles': 'tags' missing or not "
                                                           "gradescope-utils' JSON type",
                                                           "test '9.1': a hand-graded item carries score"]
    assert tool.validate(_results(tmp_path, score=2.0))[1] == ["score is not the sum of the tests' scores"]


def test_a_run_left_pending_is_not_merged(tmp_path):
    tool = _tool()
    tree = tmp_path / "run"
    (tree / "results").mkdir(parents=True)
    data = json.loads(_results(tmp_path).read_text())
    data["tests"][0].update(name="(pending GPU grading) Naive: correct", number="1.correct", score=0.0,
                            status="failed", extra_data={"status": "not_evaluated", "pending_gpu": True})
    data["score"] = 0.0
    data["extra_data"] = {"pending_gpu_items": 1, "gpu_service": {"state": "unreachable", "reason": "refused"}}
    (tree / "results" / "results.json").write_text(json.dumps(data))
    rec = tool.check(tool.Run(0, "solutions", tree, exit_code=0, time_to_result_s=1.0), http=None)
    assert rec["merged"] is False and rec["state"] == "unreachable"
    assert "test 1.correct still named pending" in rec["problems"]
    assert "bridge state 'unreachable' (refused), 1 item(s) still pending" in rec["problems"]
    data["extra_data"] = {}  # no bridge record, but an item pending: the bridge never ran
    (tree / "results" / "results.json").write_text(json.dumps(data))
    rec = tool.check(tool.Run(0, "solutions", tree, exit_code=0, time_to_result_s=1.0), http=None)
    assert rec["merged"] is False and rec["state"] == "bridge did not run"


def _shape(value):
    """JSON kinds, recursively (numbers as one kind; a list as its first element's shape)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__


def test_the_copy_of_gradescope_utils_output_is_true():
    pytest.importorskip("gradescope_utils")
    from gradescope_utils.autograder_utils.decorators import leaderboard, number, tags, visibility, weight
    from gradescope_utils.autograder_utils.json_test_runner import JSONTestRunner

    class Suite(unittest.TestCase):
        @weight(10)
        @number("1.1")
        @tags("naive")
        @visibility("visible")
        def test_a(self):
            """Naive: correct"""

        @leaderboard("GFLOP/s")
        def test_b(self, set_leaderboard_value=None):
            set_leaderboard_value(812.5)

    stream = io.StringIO()
    JSONTestRunner(stream=stream, visibility="visible", stdout_visibility="hidden").run(
        unittest.TestLoader().loadTestsFromTestCase(Suite))
    theirs = json.loads(stream.getvalue())
    assert _shape(_tool().GRADESCOPE_UTILS) == _shape(theirs)


def test_the_client_takes_every_job_id_the_service_makes():
    """Found by this tool: token_urlsafe ids begin with '_' or '-' one time in 32, and the bridge's client
    refused them ("no usable job id"), so about one Gradescope run in 32 stayed pending."""
    import secrets

    import httpx

    from grader.serve import app, client
    ids = ["_4eahal46IqojU3EL3cV7g", "-4eahal46IqojU3EL3cV7g"] + [secrets.token_urlsafe(16) for _ in range(500)]
    assert all(app.JOB_ID.match(i) and client.JOB_ID.match(i) for i in ids)
    answer = {"id": ids[0], "state": "queued", "deduplicated": False, "url": f"http://svc/jobs/{ids[0]}"}
    transport = httpx.MockTransport(lambda request: httpx.Response(202, json=answer))  # the service's answer, as sent
    with client.Client("http://svc", token="t", transport=transport) as c:
        assert c.submit(b"PK").id == ids[0]
