"""The Gradescope bridge's pure parts: the merge of the service's verdicts into a static run's
results.json, the sentences when nothing is merged, its settings, its deadline against a slow
stand-in service, and the package build's service options (the secret packed 0600, never in
gradescope.env or the manifest). The end-to-end path against a running service is
tests/test_serve_bridge.py."""
from __future__ import annotations

import json
import time
import zipfile
from pathlib import Path

import pytest

from grader.deploy.gradescope import bridge
from grader.deploy.gradescope import build as gbuild
from grader.deploy.gradescope.bridge import BridgeConfig, Outcome
from grader.deploy.gradescope.policy import PENDING_PREFIX, apply_no_gpu_policy
from grader.evidence.results import LeaderboardEntry, Results
from tests.serve_helpers import slow_service

ROOT = Path(__file__).resolve().parent.parent


def _test(number, status, score, max_score, output, needs_gpu=False):
    return {"name": f"item {number}", "number": number, "score": score, "max_score": max_score,
            "status": "passed" if status == "passed" else "failed", "output": output, "output_format": "md",
            "visibility": "visible", "tags": [number.split(".")[0]],
            "extra_data": {"status": status, "needs_gpu": needs_gpu}}


def _static() -> dict:
    """A static run's results.json after the pending policy: 1.correct and 1.speed pending."""
    res = {"score": 2.0, "output": "static summary", "tests": [
        _test("1.compiles", "passed", 2.0, 2.0, "compiled"),
        _test("1.correct", "not_evaluated", 0.0, 6.0, "not evaluated: no CUDA device", needs_gpu=True),
        _test("1.speed", "not_evaluated", 0.0, 4.0, "not evaluated: no CUDA device", needs_gpu=True),
        _test("2.compiles", "failed", 0.0, 2.0, "nvcc failed"),
    ]}
    return apply_no_gpu_policy(Results.from_json(res), {"device_reason": "no CUDA device"}, "hide").to_json()


def _service() -> dict:
    """The service's GPU run of the same submission (its static items differ: they must not be taken)."""
    tests = [_test("1.compiles", "passed", 1.0, 2.0, "service compile"),
             _test("1.correct", "passed", 6.0, 6.0, "correct at 512 and 1280"),
             _test("1.speed", "failed", 1.5, 4.0, "41% of cuBLAS; 50% for full points"),
             _test("2.compiles", "passed", 2.0, 2.0, "service compile")]
    tests[1]["name"] = "correct at every size"
    return {"score": 10.5, "output": "## GPU summary\n| stage | ms |", "tests": tests,
            "leaderboard": [{"name": "2D blocktiling: TFLOP/s", "value": 21.5, "order": "desc"}]}


def test_merge_takes_the_service_verdict_for_pending_items_only():
    res = _static()
    assert res["extra_data"]["pending_gpu_items"] == 2
    outcome = Outcome("merged", job="abc123", url="https://gpu.example.edu/jobs/abc123")
    res = bridge.merge(Results.from_json(res), _service(), outcome, leaderboard=[LeaderboardEntry(**e) for e in _service()["leaderboard"]]).to_json()
    tests = {t["number"]: t for t in res["tests"]}
    # pending items: the service's name, score, status, output, visibility (not the hide policy's)
    assert tests["1.correct"]["name"] == "correct at every size" and not tests["1.correct"]["name"].startswith(
        PENDING_PREFIX)
    assert (tests["1.correct"]["score"], tests["1.correct"]["status"]) == (6.0, "passed")
    assert tests["1.speed"]["score"] == 1.5 and tests["1.speed"]["output"] == "41% of cuBLAS; 50% for full points"
    assert tests["1.speed"]["visibility"] == "visible"
    assert tests["1.correct"]["extra_data"]["gpu_service_job"] == "abc123"
    assert tests["1.correct"]["extra_data"]["pending_gpu"] is False
    # static items: untouched, whatever the service said about them
    assert tests["1.compiles"]["output"] == "compiled" and tests["1.compiles"]["score"] == 2.0
    assert tests["2.compiles"]["status"] == "failed"
    assert res["score"] == 2.0 + 6.0 + 1.5
    assert res["leaderboard"] == _service()["leaderboard"]
    assert res["extra_data"]["pending_gpu_items"] == 0 and res["extra_data"]["pending_gpu_points"] == 0
    assert outcome.merged_items == 2 and outcome.still_pending == 0
    assert res["output"].startswith("> **GPU results merged**") and "https://gpu.example.edu/jobs/abc123" in res["output"]
    assert res["output"].endswith("## GPU summary\n| stage | ms |")
    assert bridge.pending_tests(Results.from_json(res)) == []


def test_an_item_the_service_did_not_grade_stays_pending():
    res = _static()
    service = _service()
    service["tests"] = [t for t in service["tests"] if t["number"] != "1.speed"]
    outcome = Outcome("merged", job="j", url="u")
    res = bridge.merge(Results.from_json(res), service, outcome, leaderboard=None).to_json()
    assert [t.number for t in bridge.pending_tests(Results.from_json(res))] == ["1.speed"]
    assert outcome.still_pending == 1 and "1 items are still pending" in res["output"]
    assert "leaderboard" not in res


@pytest.mark.parametrize("key, value, said", [
    ("score", "lots", "score is 'lots', expected a finite number"),
    ("max_score", float("inf"), "max_score is inf, expected a finite number"),
    ("status", "maybe", "status 'maybe' is not one of passed, failed"),
    ("name", ["a"], "name is list, expected a string"),
])
def test_a_malformed_service_verdict_is_left_out_and_said(key, value, said):
    """The service's results.json is another host's answer: an entry that is not a Gradescope test is
    never copied into the static run's (its item stays pending); the others merge."""
    res = _static()
    service = _service()
    service["tests"][2][key] = value  # 1.speed
    outcome = Outcome("merged", job="j", url="u")
    res = bridge.merge(Results.from_json(res), service, outcome, leaderboard=None).to_json()
    tests = {t["number"]: t for t in res["tests"]}
    assert [t.number for t in bridge.pending_tests(Results.from_json(res))] == ["1.speed"]
    assert tests["1.speed"]["name"].startswith(PENDING_PREFIX) and "score" not in tests["1.speed"]
    assert tests["1.correct"]["score"] == 6.0 and res["score"] == 2.0 + 6.0
    assert outcome.merged_items == 1 and outcome.still_pending == 1
    assert "1 of the service's tests were malformed" in res["output"] and f"(number '1.speed'): {said}" in res["output"]


@pytest.mark.parametrize("state, words", [
    ("queued", "GPU grading queued as job `j1`"),
    ("running", "GPU grading queued as job `j1`"),
    ("failed", "GPU grading failed"),
    ("refused", "refused it: no"),
    ("unreachable", "could not be reached (no)"),
    ("misconfigured", "settings are incomplete"),
])
def test_sentences_when_nothing_is_merged(state, words):
    note = bridge.not_merged_note(Outcome(state, "no", job="j1", url="https://x/jobs/j1"))
    assert words in note and note.startswith("> ")
    if state in ("queued", "running"):
        assert "Regrade" in note and "https://x/jobs/j1" in note


def test_config_and_wait_budget(tmp_path):
    assert bridge.read_bridge_config(tmp_path, {}) is None  # no URL: no bridge
    (tmp_path / "gradescope.env").write_text("GRADER_SERVICE_URL=https://gpu.example.edu\n"
                                             "GRADER_SERVICE_ASSIGNMENT=gemm\n")
    assert "service.secret cannot be read" in str(bridge.read_bridge_config(tmp_path, {}))
    (tmp_path / "service.secret").write_text("s3cret-s3cret-s3cret\n")
    config = bridge.read_bridge_config(tmp_path, {})
    assert config == BridgeConfig("https://gpu.example.edu", "gemm", b"s3cret-s3cret-s3cret", None)
    assert "not a number" in str(bridge.read_bridge_config(tmp_path, {"GRADER_SERVICE_WAIT_S": "soon"}))
    # the pause between two looks at the job: the client's own unless capped (a test's service answers in seconds)
    assert bridge.read_bridge_config(tmp_path, {"GRADER_SERVICE_POLL_S": "0.2"}).poll_s == 0.2
    for bad in ("soon", "0", "-1", "nan", "inf"):
        assert "GRADER_SERVICE_POLL_S" in str(bridge.read_bridge_config(tmp_path, {"GRADER_SERVICE_POLL_S": bad}))
    # the environment wins over gradescope.env
    assert bridge.read_bridge_config(tmp_path, {"GRADER_SERVICE_URL": "http://127.0.0.1:9"}).url == "http://127.0.0.1:9"
    assert isinstance(config, BridgeConfig)
    # up to the run's deadline less the margin; GRADER_SERVICE_WAIT_S caps it
    assert bridge.wait_budget(config, {"GRADER_RUN_DEADLINE": "1000"}, now=500) == 500 - bridge.MARGIN_S
    assert bridge.wait_budget(config, {"GRADER_RUN_DEADLINE": "1000"}, now=990) == 0
    assert bridge.wait_budget(config, {}, now=0) == bridge.DEFAULT_WAIT_S
    capped = BridgeConfig("u", "a", b"s", wait_s=30)
    assert bridge.wait_budget(capped, {"GRADER_RUN_DEADLINE": "1000"}, now=500) == 30


def test_submission_id_from_gradescope_metadata(tmp_path):
    assert bridge.submission_id(tmp_path) is None
    (tmp_path / "submission_metadata.json").write_text(json.dumps({"id": 123456, "assignment": {}}))
    assert bridge.submission_id(tmp_path) == "123456"
    (tmp_path / "submission_metadata.json").write_text(json.dumps({"id": "12/../x"}))
    assert bridge.submission_id(tmp_path) is None


def test_bridge_without_a_service_url_changes_nothing(tmp_path):
    res = _static()
    (tmp_path / "results.json").write_text(json.dumps(res))
    outcome = bridge.bridge_if_configured(tmp_path, tmp_path, tmp_path / "source", env={})
    assert outcome.state == "skipped"
    assert json.loads((tmp_path / "results.json").read_text()) == res


def test_a_slow_service_never_keeps_the_bridge_past_the_run_deadline(tmp_path):
    """Each request ends STOP_S before run_autograder's deadline, however slowly the service answers:
    past it the grader is killed and the sentence saying what became of the GPU items is lost."""
    source, sub = tmp_path / "source", tmp_path / "submission"
    source.mkdir()
    (source / bridge.SECRET_FILE).write_text("a-long-enough-secret-value\n")
    sub.mkdir()
    (sub / "report.md").write_text("# report\n")
    (tmp_path / "results.json").write_text(json.dumps(_static()))
    with slow_service(delay_s=29) as url:  # under the client's 30 s read timeout: each answer comes
        deadline = time.time() + bridge.STOP_S + 4
        env = {"GRADER_SERVICE_URL": url, "GRADER_SERVICE_ASSIGNMENT": "gemm", "GRADER_AUTOGRADER_DIR": str(tmp_path),
               bridge.DEADLINE_KEY: str(deadline)}
        outcome = bridge.bridge_if_configured(tmp_path, sub, source, env=env)
        ended = time.time()
    assert ended < deadline - bridge.STOP_S + 2, f"the bridge ended {ended - deadline:.0f} s after the deadline"
    assert outcome.state == "unreachable", outcome
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["extra_data"]["gpu_service"]["job"] == "slowjob0123456789abcdef"
    assert written["output"].startswith("> **GPU grading could not start**")


# --------------------------------------------------------------------------------------------
# The package build's service options
# --------------------------------------------------------------------------------------------
def test_build_packs_the_secret_privately(tmp_path):
    secret_file = tmp_path / "gemm.secret"
    secret_file.write_text("Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OTA\n")
    secret = gbuild.service_settings("https://gpu.example.edu", str(secret_file), "gemm-2026")
    out = tmp_path / "a.zip"
    gbuild.build(out, service_url="https://gpu.example.edu", service_secret=secret, assignment="gemm-2026")
    with zipfile.ZipFile(out) as zf:
        info = zf.getinfo(gbuild.SECRET_NAME)
        assert (info.external_attr >> 16) & 0o777 == 0o600
        assert zf.read(gbuild.SECRET_NAME).strip() == b"Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OTA"
        config = zf.read(gbuild.CONFIG_NAME).decode()
        manifest = zf.read(gbuild.MANIFEST_NAME).decode()
        others = b"".join(zf.read(n) for n in zf.namelist() if n != gbuild.SECRET_NAME)
    assert "GRADER_SERVICE_URL=https://gpu.example.edu" in config and "GRADER_SERVICE_ASSIGNMENT=gemm-2026" in config
    assert b"Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OTA" not in others  # only in the 0600 file
    assert json.loads(manifest)["files"][gbuild.SECRET_NAME] == "secret, not hashed"
    assert not [n for n in zipfile.ZipFile(out).namelist() if n.split("/")[0] in ("solutions", "tests")]
    gbuild.unpack(out, tmp_path / "u")
    assert (tmp_path / "u" / gbuild.SECRET_NAME).stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("url, secret, assignment, words", [
    (None, "f", None, "go with --service-url"),
    ("ftp://x", "f", "a", "expected http(s)://HOST"),
    ("https://x", "f", None, "--assignment None"),
    ("https://x", "f", "../a", "--assignment '../a'"),
    ("https://x", None, "a", "needs --service-secret-file"),
    ("https://x", "missing", "a", "cannot read it"),
    ("https://x", "short", "a", "at least 16 characters"),
])
def test_build_refuses_incomplete_service_options(tmp_path, url, secret, assignment, words):
    (tmp_path / "f").write_text("a-long-enough-secret-value\n")
    (tmp_path / "short").write_text("abc\n")
    with pytest.raises(gbuild.BuildError, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        gbuild.service_settings(url, str(tmp_path / secret) if secret else None, assignment)


def test_an_item_the_service_could_not_evaluate_stays_pending():
    """A service verdict of 'not evaluated, needs a GPU' (its ncu broken, say) is no GPU verdict: the item
    stays pending, neutral, and is counted as still pending; the other item is merged."""
    res = _static()
    service = _service()
    service["tests"][2]["extra_data"] = {"status": "not_evaluated", "needs_gpu": True}
    outcome = Outcome("merged", job="j", url="u")
    res = bridge.merge(Results.from_json(res), service, outcome, leaderboard=None).to_json()
    assert outcome.merged_items == 1 and outcome.still_pending == 1
    [left] = bridge.pending_tests(Results.from_json(res))
    assert left.number == "1.speed" and left.name.startswith(PENDING_PREFIX)
    assert not {"score", "max_score", "status"} & left.to_json().keys()
    assert res["extra_data"]["pending_gpu_items"] == 1 and res["extra_data"]["pending_gpu_points"] == 4
    assert "1 items are still pending GPU grading" in res["output"]
