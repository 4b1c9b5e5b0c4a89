"""Fair share on the Gradescope path: the bridge names the submitter (a keyed hash of Gradescope's user
ids, signed with the request); the service queues a submitter's Gradescope jobs beyond
``gradescope_fair_share`` in the last hour behind other students' (never refusing one), and a
submitter's newest job supersedes its older queued ones. The service grades with the stand-in grade command
(tests/standin_grader.py): what is tested is the queue's order, not a grading."""
from __future__ import annotations

import json
import time

import pytest

from grader.deploy.gradescope.bridge import submitter
from grader.serve.client import Client, ServiceError
from grader.serve.signing import SUBMITTER_HEADER, sign, submitter_id, verify
from grader.serve.store import Job, Kind, State
from grader.serve.store_sqlite import SqliteStore
from tests.serve_helpers import ServiceProcess, make_secret, signed, tiny_zip, wait_job

JOBS = "/api/v1/jobs"


def test_the_bridge_names_the_submitter_by_a_keyed_hash_never_in_clear(tmp_path):
    meta = tmp_path / "submission_metadata.json"
    meta.write_text(json.dumps({"id": 5, "users": [{"email": "s@x.edu", "id": 31337, "name": "A Student"},
                                                   {"email": "t@x.edu", "id": 4242}]}))
    sid = submitter(tmp_path, b"secret")
    assert sid is not None and len(sid) == 32 and int(sid, 16) >= 0
    assert "31337" not in sid and sid == submitter_id(b"secret", ["4242", "31337"])  # a group, in any order
    assert submitter(tmp_path, b"other secret") != sid  # not a plain hash anyone could enumerate
    meta.write_text(json.dumps({"users": [{"email": "S@x.edu"}]}))  # no id: the email, hashed
    assert submitter(tmp_path, b"secret") == submitter_id(b"secret", ["s@x.edu"])
    for text in ('{"users": []}', '{"users": [{"name": "A Student"}]}', "[]", "not json"):
        meta.write_text(text)
        assert submitter(tmp_path, b"secret") is None
    # The header is signed: changing it (to pass as someone else) breaks the signature.
    h = sign(b"k", "POST", JOBS, b"zip", timestamp=1_000_000, submitter=sid)
    assert h[SUBMITTER_HEADER] == sid and verify(b"k", "POST", JOBS, b"zip", h, now=1_000_000) is None
    forged = {**h, SUBMITTER_HEADER: "0" * 32}
    assert "signature does not match" in str(verify(b"k", "POST", JOBS, b"zip", forged, now=1_000_000))
    assert "32 hex digits" in str(verify(b"k", "POST", JOBS, b"zip", {**h, SUBMITTER_HEADER: "s@x.edu"},
                                         now=1_000_000))


@pytest.mark.parametrize("demoted", [False, True])
def test_a_demoted_gradescope_job_waits_with_the_self_checks(tmp_path, demoted):
    store = SqliteStore(tmp_path / "jobs.sqlite")
    t = time.time()
    store.add(Job(id="self", kind=Kind.SELFCHECK, owner="token:a", label="x", archive_sha="a", key="k",
                  created=t - 10), b"z")
    store.add(Job(id="gs", kind=Kind.GRADESCOPE, owner="gradescope:hw1", label="hw1", archive_sha="b", key="k",
                  created=t, submitter="f" * 32, demoted=demoted), b"z")
    assert [j.id for j in store.jobs_in(State.QUEUED)] == (["self", "gs"] if demoted else ["gs", "self"])


def test_one_submitter_over_the_fair_share_queues_behind_another_and_the_newest_supersedes(tmp_path):
    data = tmp_path / "data"
    secret = make_secret(data, "hw1")
    first, other = submitter_id(secret, ["1001"]), submitter_id(secret, ["2002"])
    with ServiceProcess(data, "--no-workers", standin="") as s, Client(s.url, assignment="hw1", secret=secret) as gradescope:
        mine = [gradescope.submit(tiny_zip(f"first {i}"), submitter=first) for i in range(4)]
        theirs = gradescope.submit(tiny_zip("other"), submitter=other)
        assert all(j.state == "queued" for j in [*mine, theirs])  # never refused
        assert [j.position for j in mine] == [1, 1, 1, 1] and theirs.position == 1  # ahead of the demoted 4th
        with s.client() as c:
            for old in mine[:3]:  # each newer one superseded the one before, still queued
                view = c.get(f"{JOBS}/{old.id}").json()
                assert view["state"] == "failed" and view["error"].startswith("superseded"), view
            assert c.get(f"{JOBS}/{mine[3].id}").json()["position"] == 2
            body = tiny_zip("forged")
            forged = {**signed(secret, "hw1", body), SUBMITTER_HEADER: other}  # signed without the header
            r = c.post(JOBS, content=body, headers=forged)
            assert r.status_code == 401 and "signature does not match" in r.json()["error"], r.text
        with pytest.raises(ServiceError, match="32 hex digits"):
            gradescope.submit(tiny_zip("bad"), submitter="s@x.edu")
    assert "over the fair share" in s.log_text() and "supersedes 1 queued job(s)" in s.log_text()
    with ServiceProcess(data, "--workers", "1", standin="") as s2, s2.client() as c:
        for job in (mine[3], theirs):
            assert wait_job(c, job.id, service=s2)["state"] == "done"
    store = SqliteStore(data / "jobs.sqlite")
    jobs = {j.id: store.get(j.id) for j in (mine[3], theirs)}
    started = {i: float(j.started or 0) if j else 0.0 for i, j in jobs.items()}
    assert started[theirs.id] < started[mine[3].id]
    fourth = jobs[mine[3].id]
    assert fourth is not None and fourth.demoted and fourth.submitter == first
