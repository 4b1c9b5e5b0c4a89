"""The service on Redis (a real redis-server on a free port): the service's own worker and a worker of
"another host" (its own --data folder: it sees nothing of the service's files) share one queue;
archives reach the other host and its results come back through the store alone."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys

import pytest

from tests.serve_helpers import ROOT, STAGES, ServiceProcess, bearer, issue_tokens, redis_server, wait_job, zip_folder

JOBS = "/api/v1/jobs"


HOSTS_JOBS = 4  # more jobs than the two hosts' workers, so both must take turns from the one queue


def test_two_hosts_share_the_redis_queue(tmp_path):
    """Two GPU hosts (here: two worker processes with their own data folders, CPU only) and one real
    redis-server: every job is graded exactly once, by one of them, each host takes some, and the host
    without the HTTP API keeps nothing of a job (archives and results travel through Redis)."""
    from grader.serve.store_redis import RedisStore

    with redis_server(tmp_path / "redis") as url:
        data, elsewhere = tmp_path / "data", tmp_path / "other-host"
        owners = [f"s{i}@x.edu" for i in range(HOSTS_JOBS)]
        tokens = issue_tokens(data, owners)
        remote_log = open(tmp_path / "remote.log", "wb")
        remote = subprocess.Popen([sys.executable, "-m", "grader", "serve", "worker", "--data", str(elsewhere),
                                   "--queue", url, "--no-gpu", "--stages", STAGES, "--name", "otherhost-cpu0"],
                                  cwd=ROOT, stdout=remote_log, stderr=subprocess.STDOUT)
        try:
            with ServiceProcess(data, "--queue", url, "--workers", "1") as svc, svc.client() as c:
                svc.wait_workers(2)
                assert c.get("/healthz").json()["queue"] == "redis"
                ids = []
                for i, owner in enumerate(owners):
                    r = c.post(JOBS, content=zip_folder(ROOT / "starter", {"NOTES.txt": f"job {i}"}),
                               headers=bearer(tokens[owner]))
                    assert r.status_code == 202, r.text
                    ids.append(r.json()["id"])
                assert len(set(ids)) == HOSTS_JOBS  # none merged into another
                views = [wait_job(c, i, service=svc) for i in ids]
                assert [v["state"] for v in views] == ["done"] * HOSTS_JOBS, views
                for i in ids:
                    assert c.get(f"{JOBS}/{i}/files/results.json").json()["tests"]
                store = RedisStore(url)
                jobs = [store.get(i) for i in ids]
                assert all(j is not None for j in jobs)
                # exactly once: one grading, one attempt, one worker's name on each
                assert [(j.gradings, j.attempts) for j in jobs if j] == [(1, 1)] * HOSTS_JOBS, \
                    [(j.id[:8], j.gradings, j.attempts, j.worker) for j in jobs if j]
                by_host = {name: sum(1 for j in jobs if j and j.worker == name)
                           for name in (f"{socket.gethostname()}-cpu0", "otherhost-cpu0")}
                assert sum(by_host.values()) == HOSTS_JOBS and min(by_host.values()) >= 1, by_host
                names = {w["name"] for w in c.get("/api/v1/queue").json()["workers"]}
                assert "otherhost-cpu0" in names
        finally:
            remote.send_signal(signal.SIGTERM)
            try:
                assert remote.wait(timeout=30) == 0
            except subprocess.TimeoutExpired:
                remote.kill()
                pytest.fail("the remote worker did not stop on SIGTERM")
            remote_log.close()
        # The other host kept nothing of the job: its archive and results went through Redis.
        assert [p for p in (elsewhere / "work").rglob("*") if p.is_file()] == []
