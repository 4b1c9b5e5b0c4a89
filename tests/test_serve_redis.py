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


def test_two_hosts_share_the_redis_queue(tmp_path):
    from grader.serve.store_redis import RedisStore

    with redis_server(tmp_path / "redis") as url:
        data, elsewhere = tmp_path / "data", tmp_path / "other-host"
        tokens = issue_tokens(data, ["x@x.edu", "y@x.edu"])
        remote_log = open(tmp_path / "remote.log", "wb")
        remote = subprocess.Popen([sys.executable, "-m", "grader", "serve", "worker", "--data", str(elsewhere),
                                   "--queue", url, "--no-gpu", "--stages", STAGES, "--name", "otherhost-cpu0"],
                                  cwd=ROOT, stdout=remote_log, stderr=subprocess.STDOUT)
        try:
            with ServiceProcess(data, "--queue", url, "--workers", "1") as svc, svc.client() as c:
                svc.wait_workers(2)
                assert c.get("/healthz").json()["queue"] == "redis"
                ids = []
                for label, tag in (("x@x.edu", "x"), ("y@x.edu", "y")):
                    r = c.post(JOBS, content=zip_folder(ROOT / "starter", {"NOTES.txt": tag}),
                               headers=bearer(tokens[label]))
                    assert r.status_code == 202, r.text
                    ids.append(r.json()["id"])
                views = [wait_job(c, i, service=svc) for i in ids]
                assert [v["state"] for v in views] == ["done", "done"], views
                for i in ids:
                    assert c.get(f"{JOBS}/{i}/files/results.json").json()["tests"]
                store = RedisStore(url)
                workers = {store.get(i).worker for i in ids}
                assert workers == {f"{socket.gethostname()}-cpu0", "otherhost-cpu0"}, workers
                assert all(store.get(i).gradings == 1 for i in ids)
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
