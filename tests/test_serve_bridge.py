"""The Gradescope path end to end, with real processes: the package built with a service URL, unpacked
into a temporary /autograder tree and set up by its own setup.sh; its run_autograder grades statically,
posts the submission (signed) to the running service (tests/serve_helpers.py) and merges the GPU items.

- merged: every pending item equals the service's, the static items stay, the leaderboard is the
  service's, the summary links to the job page; results.json passes the strict check and has every
  key gradescope-utils writes, with the same JSON types;
- a regrade is answered with the stored job (no second grading) and merges the same;
- the service down, a wrong secret: the pending policy stays, with the sentence on top;
- slow: the job stays queued ("GPU grading queued as job ..."); after it is graded, a regrade merges it;
- a service without a GPU (``serve --no-gpu``, no measurements): the job says it was graded without one,
  nothing is merged, every GPU item stays pending and the sentence on top says so.

CI has no GPU: the service's gradings are static plus the GPU's measurements
(tests/serve_gpu_measurements.py), so the leaderboard is not empty. Pure parts: test_serve_bridge_merge.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from grader.compile import toolchain
from grader.deploy.gradescope import build as gbuild
from grader.deploy.gradescope.policy import PENDING_PREFIX
from grader.serve.auth import SECRETS_DIR
from grader.serve.worker import SERVICE_WITHOUT_GPU
from tests.serve_gpu_measurements import measured_service
from tests.serve_helpers import ServiceProcess, free_port, make_secret, wait_job
from tests.test_gradescope_package import PACKAGE_VARS, check_results
from tests.test_results import _compatible, _gradescope_utils_output

ROOT = Path(__file__).resolve().parent.parent
STAGES = "naive,blocktiling_2d"  # the package and the service grade the same stages
ASSIGNMENT = "gemm-ladder"
SERVICE_VARS = ("GRADER_SERVICE_URL", "GRADER_SERVICE_ASSIGNMENT", "GRADER_SERVICE_WAIT_S", "GRADER_SERVICE_POLL_S",
                "GRADER_RUN_DEADLINE")
POLL_S = "0.5"  # the bridge looks at its job this often (GRADER_SERVICE_POLL_S): the services here grade in seconds

pytestmark = pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bridge")
    secret = make_secret(tmp / "data", ASSIGNMENT)
    with measured_service(tmp, STAGES) as svc:
        yield svc, secret


@pytest.fixture(scope="module")
def autograder(service, tmp_path_factory) -> Path:
    """/autograder with the package built for the service, set up by its own setup.sh (reuse mode)."""
    svc, secret = service
    tmp = tmp_path_factory.mktemp("pkg")
    secret_file = tmp / "assignment.secret"
    secret_file.write_bytes(secret + b"\n")
    out = tmp / "autograder.zip"
    proc = subprocess.run([sys.executable, "-m", "grader.deploy.gradescope", "build", "--out", str(out),
                           "--service-url", svc.url, "--service-secret-file", str(secret_file),
                           "--assignment", ASSIGNMENT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert secret.decode() not in proc.stdout + proc.stderr
    ag = tmp / "autograder"
    gbuild.unpack(out, ag / "source")
    env = _env(ag, GRADER_INSTALL_MODE="reuse", GRADER_PYTHON=sys.executable)
    setup = subprocess.run(["bash", str(ag / "source" / "setup.sh")], cwd=str(tmp), env=env, capture_output=True,
                           text=True, timeout=300)
    assert setup.returncode == 0, setup.stderr
    shutil.copy(ag / "source" / "run_autograder", ag / "run_autograder")
    (ag / "submission_metadata.json").write_text(json.dumps({"id": 4242, "users": [{"name": "A Student"}]}))
    assert not (ag / "source" / "solutions").exists()
    return ag


def _env(ag: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PACKAGE_VARS + SERVICE_VARS}
    env.update(GRADER_AUTOGRADER_DIR=str(ag), GRADER_USE_GPU="0", GRADER_STAGES=STAGES, GRADER_SERVICE_POLL_S=POLL_S)
    env.update(extra)
    return env


def _submission(tmp: Path, report: str = "# report\n") -> Path:
    sub = tmp / "submission"
    shutil.copytree(ROOT / "solutions" / "gemm", sub / "gemm")
    (sub / "report.md").write_text(report)
    return sub


def run_autograder(ag: Path, submission: Path, results: Path, **extra: str) -> tuple[str, dict]:
    env = _env(ag, GRADER_RESULTS_DIR=str(results), GRADER_SUBMISSION_DIR=str(submission), **extra)
    proc = subprocess.run([str(ag / "run_autograder")], cwd=str(ag), env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.stdout, check_results(results / "results.json")


def _service_file(svc: ServiceProcess, job: str, name: str) -> dict:
    with svc.client() as http:
        resp = http.get(f"/api/v1/jobs/{job}/files/{name}")
        assert resp.status_code == 200, resp.text
        return resp.json()


def _conforms_to_gradescope_utils(results: dict) -> None:
    theirs = _gradescope_utils_output()
    for key in theirs.keys() - {"execution_time"}:  # (an int here, a "0.00" string there: test_results.py)
        assert key in results and _compatible(results[key], theirs[key]), key
    for t in results["tests"]:
        for key, value in theirs["tests"][0].items():
            assert key in t and _compatible(t[key], value), (t["number"], key)
    for entry in results["leaderboard"]:
        assert entry.keys() >= theirs["leaderboard"][0].keys()


def test_gpu_items_come_from_the_service_and_a_regrade_reuses_the_job(service, autograder, tmp_path):
    svc, _ = service
    sub = _submission(tmp_path)
    log, res = run_autograder(autograder, sub, tmp_path / "results")
    gs = res["extra_data"]["gpu_service"]
    assert gs["state"] == "merged" and gs["deduplicated"] is False, log
    job = gs["job"]
    assert gs["url"] == f"{svc.url}/jobs/{job}"
    theirs = _service_file(svc, job, "results.json")
    by_number = {t["number"]: t for t in theirs["tests"]}

    merged = [t for t in res["tests"] if t["extra_data"].get("gpu_service_job")]
    assert merged and gs["merged_items"] == len(merged) and gs["still_pending"] == 0
    for t in res["tests"]:
        assert not t["name"].startswith(PENDING_PREFIX), t["name"]  # no item left pending
        s = by_number[t["number"]]
        if t["extra_data"].get("gpu_service_job"):
            assert t["extra_data"]["gpu_service_job"] == job and t["extra_data"]["pending_gpu"] is False
            for key in ("name", "score", "max_score", "status", "output", "visibility", "tags"):
                assert t[key] == s[key], (t["number"], key)
        else:  # a static item: this run's own verdict, never one the service sent
            assert not t["extra_data"].get("needs_gpu"), t["number"]
            assert t["name"] == s["name"] and t["max_score"] == s["max_score"]
    assert {t["extra_data"]["stage"] for t in merged} == set(STAGES.split(","))
    assert res["score"] == pytest.approx(sum(t["score"] for t in res["tests"]))
    assert res["extra_data"]["pending_gpu_items"] == 0
    # the leaderboard is the service's grading's (the 2D stage, timed there)
    assert res["leaderboard"] == theirs["leaderboard"] and res["leaderboard"]
    assert [e["name"] for e in res["leaderboard"]] == ["2D register blocktiling: TFLOP/s",
                                                       "2D register blocktiling: % of cuBLAS"]
    # the summary is the service's, under a link to the job's page (the plots)
    assert res["output"].startswith("> **GPU results merged**") and gs["url"] in res["output"]
    assert res["output"].endswith(theirs["output"])
    assert json.loads((tmp_path / "results" / "gpu-service" / "results.json").read_text()) == theirs
    assert f"gpu service: job {job} (new" in log and "gpu service: merged" in log
    _conforms_to_gradescope_utils(res)

    with svc.client() as http:
        before = http.get(f"/api/v1/jobs/{job}").json()
    # Regrade: the same files, the stored job; nothing is graded again on the service
    log2, again = run_autograder(autograder, sub, tmp_path / "results2")
    gs2 = again["extra_data"]["gpu_service"]
    assert (gs2["state"], gs2["job"], gs2["deduplicated"]) == ("merged", job, True), log2
    assert [(t["number"], t["score"], t["status"], t["output"]) for t in again["tests"]] == \
           [(t["number"], t["score"], t["status"], t["output"]) for t in res["tests"]]
    assert again["leaderboard"] == res["leaderboard"] and again["score"] == res["score"]
    with svc.client() as http:
        after = http.get(f"/api/v1/jobs/{job}").json()
    assert (after["started"], after["finished"]) == (before["started"], before["finished"])


def _assert_pending(res: dict) -> list[dict]:
    pending = [t for t in res["tests"] if t["extra_data"].get("pending_gpu")]
    assert pending and all(t["name"].startswith(PENDING_PREFIX) and "score" not in t for t in pending)
    # when it is graded: by the service, in this same run (the package names one)
    assert all("grading service grades it within this same autograder run" in t["output"] for t in pending)
    assert res["extra_data"]["pending_gpu_items"] == len(pending)
    assert any(t.get("status") == "passed" for t in res["tests"])  # the static results are kept
    return pending


def test_service_down_keeps_the_pending_policy(autograder, tmp_path):
    down = f"http://127.0.0.1:{free_port()}"
    log, res = run_autograder(autograder, _submission(tmp_path), tmp_path / "results", GRADER_SERVICE_URL=down,
                              GRADER_STAGES="naive")
    _assert_pending(res)
    assert res["extra_data"]["gpu_service"]["state"] == "unreachable"
    assert res["output"].startswith("> **GPU grading could not start**: the course's GPU grading service could "
                                    "not be reached")
    assert "pending GPU grading" in res["output"]  # the policy's own note stays below
    assert "gpu service: unreachable" in log


def test_a_wrong_secret_is_refused_and_said(autograder, tmp_path):
    ag = tmp_path / "autograder"
    shutil.copytree(autograder, ag, symlinks=True)
    (ag / "source" / gbuild.SECRET_NAME).write_text("not-the-assignment-secret-at-all\n")
    _, res = run_autograder(ag, _submission(tmp_path), tmp_path / "results", GRADER_STAGES="naive",
                            GRADER_SOURCE_DIR=str(ag / "source"))
    _assert_pending(res)
    gs = res["extra_data"]["gpu_service"]
    assert gs["state"] == "refused" and "signature does not match" in gs["reason"]
    assert res["output"].startswith("> **GPU grading could not start**: the course's GPU service refused it")


def test_a_slow_job_stays_queued_and_a_regrade_picks_it_up(service, autograder, tmp_path):
    svc, _ = service
    sub = _submission(tmp_path, report="# another report: new files, a new job\n")
    _, res = run_autograder(autograder, sub, tmp_path / "results", GRADER_SERVICE_WAIT_S="0")
    _assert_pending(res)
    gs = res["extra_data"]["gpu_service"]
    assert gs["state"] in ("queued", "running") and gs["deduplicated"] is False
    assert res["output"].startswith(f"> **GPU grading queued as job `{gs['job']}`**")
    assert "Regrade" in res["output"] and gs["url"] in res["output"]

    with svc.client() as http:
        wait_job(http, gs["job"], service=svc)
    _, later = run_autograder(autograder, sub, tmp_path / "results2")
    gs2 = later["extra_data"]["gpu_service"]
    assert (gs2["state"], gs2["job"], gs2["deduplicated"]) == ("merged", gs["job"], True)
    assert not [t for t in later["tests"] if t["name"].startswith(PENDING_PREFIX)]
    assert httpx.get(f"{svc.url}/api/v1/jobs/{gs['job']}").json()["state"] == "done"


def test_a_service_without_a_gpu_leaves_the_gpu_items_pending(service, autograder, tmp_path):
    measured, _ = service
    data = tmp_path / "data"
    shutil.copytree(measured.data / SECRETS_DIR, data / SECRETS_DIR)  # the package's assignment secret
    # `serve --no-gpu`, and no GPU measurements either; the stand-in grader says so as the grader does
    with ServiceProcess(data, stages=STAGES, standin="") as bare:
        bare.wait_workers(1)
        log, res = run_autograder(autograder, _submission(tmp_path, report="# graded without a GPU\n"),
                                  tmp_path / "results", GRADER_SERVICE_URL=bare.url, GRADER_STAGES="naive")
        gs = res["extra_data"]["gpu_service"]
        with bare.client() as http:
            view = http.get(f"/api/v1/jobs/{gs['job']}").json()
    assert view["state"] == "done" and view["without_gpu"] == SERVICE_WITHOUT_GPU
    pending = _assert_pending(res)
    assert gs["state"] == "without_gpu" and gs["reason"] == view["without_gpu"], log
    assert gs["merged_items"] == 0 and gs["still_pending"] == len(pending) == res["extra_data"]["pending_gpu_items"]
    assert not [t for t in res["tests"] if t["extra_data"].get("gpu_service_job")]
    assert all("not evaluated: GPU use switched off" not in t["output"].split("Grader note:")[0] for t in pending)
    assert res["output"].startswith(f"> **The GPU service graded without a GPU** (job `{gs['job']}`")
    assert f"{len(pending)} items are still pending GPU grading" in res["output"]
    assert "GPU results merged" not in res["output"]
    assert f"gpu service: without_gpu ({SERVICE_WITHOUT_GPU}); {len(pending)} items still pending" in log


def test_a_gpu_worker_that_cannot_reach_its_gpu_flags_the_job_and_a_regrade_grades_again(service, autograder, tmp_path):
    """A service started for a GPU whose worker cannot reach it, as a worker whose CuPy is broken (``--gpus 99``:
    a GPU no machine has, so no CUDA device is visible to it, on a GPU host too): the job says why, the bridge
    leaves the items pending, and the same files sent again are graded again rather than answered with the
    stored job."""
    measured, _ = service
    data = tmp_path / "data"
    shutil.copytree(measured.data / SECRETS_DIR, data / SECRETS_DIR)
    sub = _submission(tmp_path, report="# a GPU worker without its GPU\n")
    with ServiceProcess(data, "--gpus", "99", stages=STAGES, gpu=True, standin="") as broken:
        broken.wait_workers(1, timeout_s=90)
        log, res = run_autograder(autograder, sub, tmp_path / "results", GRADER_SERVICE_URL=broken.url,
                                  GRADER_STAGES="naive")
        gs = res["extra_data"]["gpu_service"]
        assert gs["state"] == "without_gpu" and gs["reason"], log
        assert gs["still_pending"] == len(_assert_pending(res)) and gs["merged_items"] == 0
        _, again = run_autograder(autograder, sub, tmp_path / "results2", GRADER_SERVICE_URL=broken.url,
                                  GRADER_STAGES="naive")
        gs2 = again["extra_data"]["gpu_service"]
        with broken.client() as http:
            first = http.get(f"/api/v1/jobs/{gs['job']}").json()
    assert first["without_gpu"] == gs["reason"]
    assert gs2["state"] == "without_gpu" and gs2["deduplicated"] is False and gs2["job"] != gs["job"]
