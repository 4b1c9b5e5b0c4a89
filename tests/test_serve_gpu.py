"""The service on a GPU machine: two workers per GPU listed (sharing its lock), pinned with CUDA_VISIBLE_DEVICES, grading
with the GPU (correctness measured, not "not evaluated"), its gradings handed the worker's one
description of the GPU (no probe child each), and no grader child left once the service stopped.
Skipped without a GPU."""
from __future__ import annotations

import time

import pytest

from tests.serve_helpers import ROOT, ServiceProcess, bearer, issue_tokens, pids_matching, wait_job, zip_folder

pytestmark = pytest.mark.gpu


def test_the_gpu_worker_grades_on_its_gpu(tmp_path, suite_gpu_lock):
    data = tmp_path / "data"
    token = issue_tokens(data, ["g@x.edu"])["g@x.edu"]
    # The GPU's lock, which its two workers share, is the suite's: their probes and their grading's GPU
    # steps take turns with the suite's gradings, and the service's start and the compiles do not wait.
    (data / "locks").mkdir(mode=0o700, exist_ok=True)
    (data / "locks" / "gpu0.lock").symlink_to(suite_gpu_lock)
    with ServiceProcess(data, "--gpus", "0", "--gradings-per-gpu", "2", gpu=True) as svc, svc.client() as c:
        svc.wait_workers(2, timeout_s=300)  # each probes its GPU in turn behind the suite's queued gradings
        workers = c.get("/api/v1/queue").json()["workers"]
        assert {w["gpu"] for w in workers} == {"0"}
        assert sorted(w["name"].rsplit("-", 1)[1] for w in workers) == ["gpu0", "gpu0.2"]
        sub = c.post("/api/v1/jobs", content=zip_folder(ROOT / "solutions"), headers=bearer(token))
        assert sub.status_code == 202, sub.text
        view = wait_job(c, sub.json()["id"], timeout_s=900, service=svc)
        assert view["state"] == "done", (view, svc.log_text())
        results = c.get(f"/api/v1/jobs/{view['id']}/files/results.json").json()
        correct = [t for t in results["tests"] if t["name"].startswith("correct at every size")]
        assert correct and all(t["score"] == t["max_score"] for t in correct), correct
        assert "not evaluated" not in " ".join(t.get("output", "") for t in correct)
        # The worker probed its GPU once and handed the grading that description: no probe child here.
        grading = c.get(f"/api/v1/jobs/{view['id']}/files/grading.json").json()
        probe = next(p for p in grading["phases"] if p["name"] == "probe")
        assert probe["seconds"] >= 0, probe  # recorded; no probe child is what the notes below say
        assert not any("probed again" in n for n in grading["notes"]), grading["notes"]
        # Two workers share the GPU: the grading held its lock for its GPU steps.
        assert any(p["name"] == "gpu_held" for p in grading["phases"]), grading["phases"]
    deadline = time.monotonic() + 15
    while pids_matching("grader.children", str(data)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pids_matching("grader.children", str(data)) == []  # nothing of the gradings outlived the service
