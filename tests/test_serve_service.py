"""The grading service end to end, as real processes: ``python -m grader serve --no-gpu`` (uvicorn, the
SQLite job store and queue, its worker processes) on a free port, spoken to over HTTP.

Gradings are static and of one stage (``--stages naive``) to keep the file short. The service treats a
grading as a black box, so its queue, lease, kill and refusal tests grade with the stand-in grade command
(tests/standin_grader.py: a real child that writes a real results.json after a controlled delay, or hangs,
or leaves children); the self-check end to end, and the weak sandbox's stopped and killed gradings (nvcc's
tree with no namespace to end it), grade with the real grader.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from grader.grading import Grading
from grader.serve.store import State
from grader.serve.store_sqlite import SqliteStore
from tests.serve_helpers import (
    ROOT,
    STAGES,
    ServiceProcess,
    bearer,
    cmdlines,
    describe,
    endless_compile,
    issue_tokens,
    make_secret,
    pids_matching,
    signed,
    tree_of,
    tree_until,
    wait_job,
    zip_folder,
)

JOBS = "/api/v1/jobs"


SERVICE_FLAGS = ("--workers", "1", "--per-hour", "3", "--concurrent", "1", "--archive-mib", "1")


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    """A service grading with the stand-in (its default: done after 0.3 s)."""
    data = tmp_path_factory.mktemp("serve") / "data"
    service = ServiceProcess(data, *SERVICE_FLAGS, standin="")
    service.tokens = issue_tokens(data, ["c@x.edu", "k@x.edu", "r@x.edu", "gone@x.edu"])
    service.secret = make_secret(data, "hw1")
    with service:
        service.wait_workers(1)
        yield service


def starter(tag: str, standin: str = "") -> bytes:
    """The starter with one file that makes its archive unique (no dedup between tests), and the stand-in's
    words for this job when given (tests/standin_grader.py)."""
    return zip_folder(ROOT / "starter", {"NOTES.txt": tag, **({"STANDIN.txt": standin} if standin else {})})


def store_of(svc: ServiceProcess) -> SqliteStore:
    return SqliteStore(svc.data / "jobs.sqlite")


def test_a_selfcheck_is_graded_like_the_grader_then_deduplicated_or_forced(tmp_path):
    """End to end with the real grader: the service's results are the grader's own."""
    data = tmp_path / "data"
    with ServiceProcess(data, *SERVICE_FLAGS) as svc:
        svc.tokens = issue_tokens(data, ["a@x.edu", "b@x.edu"])
        svc.wait_workers(1)
        selfcheck_end_to_end(svc, tmp_path)


def selfcheck_end_to_end(svc: ServiceProcess, tmp_path) -> None:
    body = zip_folder(ROOT / "solutions")
    direct = subprocess.Popen([sys.executable, "-m", "grader", "grade", "--no-gpu", "--stages", STAGES, "--quiet",
                               "--out", str(tmp_path / "direct"), "--", str(ROOT / "solutions")], cwd=ROOT)
    with svc.client() as c:
        r = c.post(JOBS, content=body, headers=bearer(svc.tokens["a@x.edu"]))
        assert r.status_code == 202, r.text
        sub = r.json()
        assert sub["state"] == "queued" and sub["deduplicated"] is False and isinstance(sub["position"], int)
        assert sub["url"] == f"{svc.url}/jobs/{sub['id']}" and sub["estimate_s"] > 0
        view = wait_job(c, sub["id"], service=svc)
        assert view["state"] == "done" and view["kind"] == "selfcheck", view
        assert view["files"][:3] == ["results.json", "summary.md", "grading.json"]
        assert view["created"].endswith("Z") and view["finished"] >= view["started"] >= view["created"]
        results = c.get(f"{JOBS}/{sub['id']}/files/results.json").json()
        assert results["score"] == view["score"] and all("max_score" in t for t in results["tests"])
        assert view["max_score"] == sum(t["max_score"] for t in results["tests"])
        summary = c.get(f"{JOBS}/{sub['id']}/files/summary.md")
        assert summary.status_code == 200 and "naive" in summary.text
        assert c.get(f"{JOBS}/{sub['id']}/files/..%2Fjobs.sqlite").status_code == 404
        assert direct.wait(timeout=120) == 0
        assert json.loads((tmp_path / "direct" / "results.json").read_text())["score"] == results["score"]

        again = c.post(JOBS, content=body, headers=bearer(svc.tokens["a@x.edu"]))
        assert again.status_code == 200 and again.json()["id"] == sub["id"] and again.json()["deduplicated"]
        # Someone else's identical archive: a job of their own, its results copied, not graded again.
        other = c.post(JOBS, content=body, headers=bearer(svc.tokens["b@x.edu"]))
        assert other.status_code == 200 and other.json()["deduplicated"] and other.json()["id"] != sub["id"]
        assert other.json()["state"] == "done"
        assert c.get(f"{JOBS}/{other.json()['id']}/files/results.json").json()["score"] == results["score"]
        # The copy names neither the first job nor any place on the server; grading.json still reads.
        for name in ("grading.json", "intake.json"):
            text = c.get(f"{JOBS}/{other.json()['id']}/files/{name}").text
            assert sub["id"] not in text and str(svc.data) not in text and str(ROOT) not in text, text[:2000]
            assert not re.search(r'"/[^"]*/', text), re.search(r'"/[^"]*/', text)
            assert len(socket.gethostname()) < 4 or socket.gethostname() not in text
        grading = c.get(f"{JOBS}/{other.json()['id']}/files/grading.json").json()
        assert Grading.from_json(grading).score == results["score"] and grading["submission"] == "submission.zip"
        assert c.get("/openapi.json").status_code == 404  # the API is not advertised

        forced = c.post(JOBS + "?force=1", content=body, headers=bearer(svc.tokens["a@x.edu"]))
        assert forced.status_code == 202 and forced.json()["id"] != sub["id"]
        assert wait_job(c, forced.json()["id"], service=svc)["score"] == results["score"]
    store = store_of(svc)
    assert [store.get(i).gradings for i in (sub["id"], other.json()["id"], forced.json()["id"])] == [1, 0, 1]


def test_a_gradescope_grade_never_comes_from_a_selfcheck(svc):
    """A student may repeat a self-check (--force) until a timing or a race happens to pass: the
    Gradescope post of the same bytes is graded on its own, and only a Gradescope post of them again (a
    Regrade) gets that Gradescope job back."""
    body = starter("no re-rolled grades")
    with svc.client() as c:
        mine = c.post(JOBS, content=body, headers=bearer(svc.tokens["r@x.edu"]))
        assert mine.status_code == 202, mine.text
        assert wait_job(c, mine.json()["id"], service=svc)["state"] == "done"
        gs = c.post(JOBS, content=body, headers=signed(svc.secret, "hw1", body))
        assert gs.status_code == 202 and not gs.json()["deduplicated"], gs.text
        assert wait_job(c, gs.json()["id"], service=svc)["state"] == "done"
        regrade = c.post(JOBS, content=body, headers=signed(svc.secret, "hw1", body))
        assert regrade.status_code == 200 and regrade.json()["id"] == gs.json()["id"], regrade.text
    graded = store_of(svc).get(gs.json()["id"])
    assert (graded.kind.value, graded.copied_from, graded.gradings) == ("gradescope", "", 1)


def test_refusals_say_why(svc, tmp_path):
    body = starter("refusals")
    expired = issue_tokens(svc.data, ["old@x.edu"], expires_days=1, now=time.time() - 3 * 86400)["old@x.edu"]
    revoke = subprocess.run([sys.executable, "-m", "grader", "serve", "tokens", "revoke", "--data", str(svc.data),
                             "gone@x.edu"], cwd=ROOT, capture_output=True, text=True)
    assert revoke.returncode == 0, revoke.stderr
    cases = [
        ({}, "no credentials"),
        (bearer("glt_not-a-token"), "unknown token"),
        (bearer(expired), "this token expired on"),
        (bearer(svc.tokens["gone@x.edu"]), "this token was revoked on"),
        ({"Authorization": "Basic abc"}, "must be 'Bearer <your token>'"),
        (signed(b"wrong secret", "hw1", body), "signature refused: signature does not match"),
        (signed(svc.secret, "hw1", body, timestamp=int(time.time()) - 900), "signature refused: timestamp 9"),
        (signed(svc.secret, "hw1", b"other body"), "signature does not match"),
        (signed(svc.secret, "hw9", body), "signature refused: signature does not match"),  # names no assignment
    ]
    with svc.client() as c:
        for headers, words in cases:
            r = c.post(JOBS, content=body, headers=headers)
            assert r.status_code == 401 and words in r.json()["error"], (headers, r.text)
        token = svc.tokens["c@x.edu"]
        r = c.post(JOBS, content=b"not a zip", headers=bearer(token))
        assert r.status_code == 400 and "not a zip archive" in r.json()["error"]
        big = os.urandom(1_300_000)  # over the 1 MiB limit (refused before it is read as a zip)
        r = c.post(JOBS, content=big, headers=bearer(token))
        assert r.status_code == 413 and "at most 1.0 MiB" in r.json()["error"], r.text
        assert c.get(f"{JOBS}/AAAAAAAAAAAAAAAAAAAAAA").status_code == 404
        assert "error" in c.get("/api/v1/nothing").json()
    # Content-Length alone decides: the service answers 413 without waiting for a byte of the body.
    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as s:
        s.sendall(f"POST {JOBS} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {svc.tokens['c@x.edu']}\r\n"
                  "Content-Type: application/zip\r\nContent-Length: 500000000\r\n\r\n".encode())
        assert s.recv(4096).startswith(b"HTTP/1.1 413")


def test_one_job_at_a_time_and_a_worker_killed_mid_job_leaves_no_grading_and_the_job_finishes_once(svc, tmp_path):
    token = svc.tokens["k@x.edu"]
    go = tmp_path / "go"  # the stand-in's go-ahead: the first attempt grades until killed, the second at once
    with svc.client() as c:
        sub = c.post(JOBS, content=starter("killed", f"until={go}"), headers=bearer(token))
        assert sub.status_code == 202, sub.text
        second = c.post(JOBS, content=starter("second"), headers=bearer(token))
        assert second.status_code == 429 and "at most 1 at a time" in second.json()["error"], second.text
        assert int(second.headers["Retry-After"]) >= 1
        job_id = sub.json()["id"]
        attempt1 = f"{job_id}-1"
        deadline = time.monotonic() + 60
        grading: list[int] = []
        while not grading and time.monotonic() < deadline:  # one reading: a second may fall in its exec
            grading = pids_matching(attempt1, "standin_grader")
            time.sleep(0 if grading else 0.05)
        [worker] = pids_matching("grader serve worker", str(svc.data))
        assert grading, "the grading never started"
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while pids_matching(attempt1) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = pids_matching(attempt1)
        assert left == [], (f"the killed worker {worker} left its grading running:\n" + describe(left)
                            + f"\nthe worker, the grading seen at first ({grading}):\n" + describe([worker, *grading])
                            + "\n" + svc.log_text())
        go.touch()  # only now: a first attempt that outlived its worker would have been waiting still, and seen
        view = wait_job(c, job_id, service=svc)
    assert view["state"] == "done", (view, svc.log_text())
    job = store_of(svc).get(job_id)
    assert (job.state, job.attempts, job.gradings) == (State.DONE, 2, 1)
    assert "restarting it" in svc.log_text() and f"job {job_id[:8]} requeued" in svc.log_text()


def test_gradescope_jumps_the_queue_and_a_restart_keeps_queue_and_results(tmp_path):
    data = tmp_path / "data"
    token = issue_tokens(data, ["p@x.edu"])["p@x.edu"]
    secret = make_secret(data, "hw1")
    with ServiceProcess(data, "--no-workers", "--per-hour", "1", "--concurrent", "3", standin="") as s1, \
            s1.client() as c:
        a = c.post(JOBS, content=starter("a"), headers=bearer(token)).json()
        assert a["position"] == 1 and a["state"] == "queued"
        again = c.post(JOBS, content=starter("b"), headers=bearer(token))
        assert again.status_code == 429 and "at most 1 submission per hour" in again.json()["error"]
        assert 3500 <= int(again.headers["Retry-After"]) <= 3600
        body = starter("g")
        g = c.post(JOBS, content=body, headers={**signed(secret, "hw1", body), "X-Grader-Submission-Id": "777"})
        assert g.status_code == 202 and g.json()["position"] == 1, g.text
        assert c.get(f"{JOBS}/{a['id']}").json()["position"] == 2
        queue = c.get("/api/v1/queue").json()
        assert [q["kind"] for q in queue["queued"]] == ["gradescope", "selfcheck"]
        assert "id" not in json.dumps(queue["queued"]) and queue["workers"] == []
    g = g.json()
    with ServiceProcess(data, "--workers", "1", standin="") as s2, s2.client() as c:
        for job in (a, g):
            assert wait_job(c, job["id"], service=s2)["state"] == "done"
    store = SqliteStore(data / "jobs.sqlite")
    ga, aa = (store.get(j["id"]) for j in (g, a))
    assert ga.started < aa.started  # the Gradescope job, queued last, was graded first
    assert ga.submission_id == "777" and ga.kind.value == "gradescope"
    # Restarted once more, with a 1 s limit per grading: the old results are still served, and a new
    # job that outlives the limit fails with a sentence, its grading stopped.
    with ServiceProcess(data, "--workers", "1", "--grade-timeout-s", "1", standin="") as s3, s3.client() as c:
        assert c.get(f"{JOBS}/{g['id']}").json()["state"] == "done"
        assert c.get(f"{JOBS}/{g['id']}/files/results.json").json()["score"] == ga.score
        assert c.get("/api/v1/queue").json()["mean_grade_s"] == round(
            sum(j.grade_s for j in (ga, aa)) / 2, 1)  # estimates come from the recent gradings
        body = starter("slow", "outcome=hang")  # never done in 1 s, however fast the machine
        slow = c.post(JOBS, content=body, headers=signed(secret, "hw1", body)).json()
        failed = wait_job(c, slow["id"], service=s3)
        assert failed["state"] == "failed" and failed["error"] == "the grading took longer than 1 s and was stopped"
        assert pids_matching(slow["id"]) == []
        assert httpx.get(s3.url + "/healthz").json() == {"ok": True, "queue": "sqlite", "store": "ok", "disk": "ok",
                                                          "workers": 1}


def compiling(svc: ServiceProcess, service_before: set[int], marks: tuple[str, ...] = ("cc1plus",)) -> set[int]:
    """Every process seen in the service's tree (less ``service_before``) until the endless compile is
    under way, hanging under the worker's grading (tests/serve_helpers.py: tree_until)."""
    seen = tree_until(svc.proc.pid, marks, service_before)
    if seen is None:
        pytest.fail(f"the grading never reached {' or '.join(marks)}:\n" + svc.log_text())
    return seen


# The grading's tree: the stand-in's children, each in a session of its own (as the grader starts its tools and
# students' steps), or the real grader's nvcc in the weak sandbox (no namespace to end what it started; the
# default sandbox's bwrap --die-with-parent ends its processes besides, so the weak one is the harder case).
TREES = {"standin": ({"GRADER_STANDIN": "outcome=hang children=2 delay=0"}, ("standin-child",)),
         "weak": ({"GRADER_SANDBOX": "weak"}, ("cudafe", "cc1plus", "nvcc"))}


def tree_service(data, timeout_s: str, tree: str) -> ServiceProcess:
    env, _ = TREES[tree]
    args = ("--workers", "1", "--grade-timeout-s", timeout_s)
    return ServiceProcess(data, *args, env=env, standin=env.get("GRADER_STANDIN"))


@pytest.mark.parametrize("tree", ["standin", "weak"])
def test_a_stopped_grading_leaves_no_process_of_its_tree(tmp_path, tree):
    """A grading stopped by its time limit while its children run in sessions of their own (the grader
    starts every tool so): once the job reads failed, nothing it started is alive: every process seen in
    the service's tree during the grading, and anything else naming the job or its work folders."""
    data = tmp_path / "data"
    secret = make_secret(data, "hw1")
    before = set(cmdlines())
    # The limit is 3 s. On a loaded machine the real grader may not reach nvcc by then: a grading stopped before its
    # tree was there shows nothing, so the service is started again with a 15 s limit and a new job sent.
    for limit in ("3", "15"):
        with tree_service(data, limit, tree) as svc, svc.client() as c:
            svc.wait_workers(1)
            service_before = tree_of(svc.proc.pid)
            body = endless_compile(ROOT / "starter", f"leak-{tree}-{limit}")
            job = c.post(JOBS, content=body, headers=signed(secret, "hw1", body)).json()
            store = store_of(svc)
            seen = tree_until(svc.proc.pid, TREES[tree][1], service_before, running=unfinished(store, job["id"]))
            if seen is not None:
                stopped_while_its_tree_runs(svc, c, job["id"], seen, before, data)
                return
            if limit == "15" or store.get(job["id"]).state is not State.FAILED:
                pytest.fail(f"the grading never reached {' or '.join(TREES[tree][1])}:\n" + svc.log_text())


def unfinished(store: SqliteStore, job_id: str) -> Callable[[], bool]:
    """Whether the job is still queued or running, read from the store (no request the service answers)."""
    def still() -> bool:
        job = store.get(job_id)
        return job is not None and job.state not in (State.DONE, State.FAILED)
    return still


def stopped_while_its_tree_runs(svc: ServiceProcess, c: httpx.Client, job_id: str, seen: set[int], before: set[int],
                                data: Path) -> None:
    """The job fails, stopped by its limit, and nothing of its tree (``seen``) is alive after it."""
    failed = wait_job(c, job_id, service=svc)
    assert failed["state"] == "failed" and "was stopped" in failed["error"], failed
    alive = {pid: cmd for pid, cmd in cmdlines().items() if pid in seen}
    assert alive == {}, alive  # none of the grading's processes outlived it, wherever they went
    assert pids_matching(job_id) == []
    # Nothing born since, outside the service, names this test's data folder (the work folders).
    strays = {pid: cmd for pid, cmd in cmdlines().items()
              if pid not in before and pid not in tree_of(svc.proc.pid) and str(data) in cmd}
    assert strays == {}, strays


@pytest.mark.parametrize("tree", ["standin", "weak"])
def test_a_killed_worker_leaves_no_process_of_its_gradings_tree(tmp_path, tree):
    """The worker SIGKILLed while its grading's nvcc runs. The grading dies with the worker
    (PR_SET_PDEATHSIG), but what the grading started is then an orphan: without a namespace to end it
    (the weak sandbox) nvcc would compile on with no time limit, owned by the service, which adopts it
    (a subreaper). The service kills what it adopted: soon after the kill nothing of the grading's
    tree is alive, the stand-in's children as the weak sandbox's nvcc. (Unswept, the weak sandbox's nvcc
    lived about 10 s before it ended by itself, and not in every run; so the supervisor's log line is not
    asked for.)"""
    data = tmp_path / "data"
    secret = make_secret(data, "hw1")
    with tree_service(data, "120", tree) as svc, svc.client() as c:
        svc.wait_workers(1)
        service_before = tree_of(svc.proc.pid)
        body = endless_compile(ROOT / "starter", f"killed-{tree}")
        job = c.post(JOBS, content=body, headers=signed(secret, "hw1", body)).json()
        seen = compiling(svc, service_before, ("standin-child",) if tree == "standin" else ("cc1plus",))
        [worker] = pids_matching("grader serve worker", str(data))
        os.kill(worker, signal.SIGKILL)
        attempt1 = f"{job['id']}-1"

        def left_over() -> list[int]:
            """What is alive of the grading's tree as seen, or names its work folder: a step it started
            after the last look (a bwrap not yet bound to its parent, measured on CI), say."""
            return sorted(set(pid for pid in cmdlines() if pid in seen) | set(pids_matching(attempt1)))

        # The supervisor looks every second: gone in 0.7-0.8 s here. Unswept, they lived 9.7-9.8 s.
        deadline = time.monotonic() + 5
        while left_over() and time.monotonic() < deadline:
            time.sleep(0.1)
        left = left_over()
        assert left == [], describe(left) + "\n" + svc.log_text()


def test_a_replayed_signature_cannot_ask_for_new_gradings(tmp_path):
    """Each signed request is good once (its nonce), and its query string is signed: one captured
    upload, replayed as it is or with ?force=1 within the clock skew, queues nothing, even after a
    restart of the service; the Gradescope package's client signs each request afresh."""
    from grader.serve.client import Client

    data = tmp_path / "data"
    secret = make_secret(data, "hw1")
    body = starter("replay")
    with ServiceProcess(data, "--no-workers") as s, s.client() as c:
        headers = signed(secret, "hw1", body)
        first = c.post(JOBS, content=body, headers=headers)
        assert first.status_code == 202, first.text
        replay = c.post(JOBS, content=body, headers=headers)
        assert replay.status_code == 401 and "used already" in replay.json()["error"], replay.text
        for _ in range(3):
            r = c.post(JOBS + "?force=1", content=body, headers=headers)
            assert r.status_code == 401 and "signature does not match" in r.json()["error"], r.text
        forced_headers = signed(secret, "hw1", body, path=JOBS + "?force=1")
        forced = c.post(JOBS + "?force=1", content=body, headers=forced_headers)
        assert forced.status_code == 202 and forced.json()["id"] != first.json()["id"], forced.text
        for _ in range(3):  # the signed ?force=1 itself, replayed
            r = c.post(JOBS + "?force=1", content=body, headers=forced_headers)
            assert r.status_code == 401 and "used already" in r.json()["error"], r.text
        assert len(c.get("/api/v1/queue").json()["queued"]) == 2
        with Client(s.url, assignment="hw1", secret=secret) as gradescope:  # a signed ?force=1 is taken
            again = gradescope.submit(body, force=True)
            regrade = gradescope.submit(body)
        assert again.state == "queued" and again.id not in (first.json()["id"], forced.json()["id"])
        assert regrade.deduplicated and not again.deduplicated
        assert len(c.get("/api/v1/queue").json()["queued"]) == 3
    with ServiceProcess(data, "--no-workers") as s, s.client() as c:  # the nonces outlive a restart
        r = c.post(JOBS + "?force=1", content=body, headers=forced_headers)
        assert r.status_code == 401 and "used already" in r.json()["error"], r.text
        assert len(c.get("/api/v1/queue").json()["queued"]) == 3


def test_the_job_store_deleted_under_a_running_service_fails_closed(tmp_path):
    """The SQLite file deleted while the service runs: connections still open would write into the
    unlinked file and new ones make an empty one, so jobs would be accepted and then lost. Instead
    /healthz says not ok and every submission is refused with a 503 that says nothing was stored."""
    from grader.serve.app import STORE_DOWN

    data = tmp_path / "data"
    token = issue_tokens(data, ["d@x.edu", "e@x.edu"])
    with ServiceProcess(data, "--no-workers") as s, s.client() as c:
        before = c.post(JOBS, content=starter("before"), headers=bearer(token["d@x.edu"]))
        assert before.status_code == 202, before.text
        for suffix in ("", "-wal", "-shm"):
            (data / f"jobs.sqlite{suffix}").unlink(missing_ok=True)
        health = c.get("/healthz")
        assert health.status_code == 503 and health.json()["ok"] is False, health.text
        assert str(data) not in health.text and "sqlite" not in health.json()["error"]  # the details: in the log
        for _ in range(3):  # several requests, on whichever threads serve them
            r = c.post(JOBS, content=starter("after"), headers=bearer(token["e@x.edu"]))
            assert r.status_code == 503 and r.json()["error"] == STORE_DOWN, r.text
        assert c.get(f"{JOBS}/{before.json()['id']}").status_code == 503
        assert not (data / "jobs.sqlite").exists()  # no empty store made behind the service's back
        assert "jobs.sqlite is gone" in s.log_text()


def test_bad_settings_stop_the_service_with_a_sentence(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "serve.yaml").write_text("limits:\n  per_hour: 3\n")
    r = subprocess.run([sys.executable, "-m", "grader", "serve", "--data", str(data), "--no-gpu"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "serve.yaml: limits.per_hour: unknown limit" in r.stderr, r.stderr
    (data / "serve.yaml").write_text("port: 1\n")
    if not shutil.which("nvidia-smi"):
        r = subprocess.run([sys.executable, "-m", "grader", "serve", "--data", str(data)], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "no GPU found" in r.stderr and "--no-gpu" in r.stderr, r.stderr
