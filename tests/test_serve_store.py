"""The job store's transitions on both backends (SQLite file, a real redis-server): what makes a job
complete exactly once, the dedup lookups, the dispatch order; and the huey queue's order and guard."""
from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest

from grader.serve.settings import Settings
from grader.serve.store import Job, JobStore, Kind, State
from grader.serve.store_sqlite import SqliteStore
from tests.serve_helpers import redis_server


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def store(request, tmp_path) -> JobStore:
    if request.param == "sqlite":
        s: JobStore = SqliteStore(tmp_path / "jobs.sqlite")
    else:
        from grader.serve.store_redis import RedisStore

        url = request.getfixturevalue("redis_url")
        s = RedisStore(url, prefix=f"t{time.monotonic_ns()}:")  # a fresh namespace per test
    yield s
    s.close()


def job(id: str, kind=Kind.SELFCHECK, owner="token:a", sha="s1", created=None, **kw) -> Job:
    return Job(id=id, kind=kind, owner=owner, label="calm-otter-01", archive_sha=sha, key="k",
               created=time.time() if created is None else created, **kw)


def test_a_job_is_claimed_once_and_only_its_holder_finishes_it(store):
    store.add(job("j1"), b"zip")
    assert store.archive("j1") == b"zip"
    first = store.claim("j1", "w1", 100, lease_s=30)
    assert first is not None and first.state is State.RUNNING and first.attempts == 1
    assert store.claim("j1", "w2", 200, lease_s=30) is None  # a duplicate dispatch claims nothing
    # w1 stalls past its lease; w2 takes over; w1 can neither renew nor store results any more.
    later = time.time() + 31
    second = store.claim("j1", "w2", 200, lease_s=30, now=later)
    assert second is not None and second.worker == "w2" and second.attempts == 2
    assert not store.heartbeat("j1", "w1", 100, lease_s=30)
    assert store.finish("j1", "w1", 100, results=b"old", state=State.DONE, graded=True) is None
    done = store.finish("j1", "w2", 200, results=b"tar", state=State.DONE, graded=True, score=3.0, max_score=10.0,
                        files=["results.json"], grade_s=2.5)
    assert done is not None and done.state is State.DONE and done.gradings == 1
    assert store.results("j1") == b"tar"
    assert store.claim("j1", "w3", 300, lease_s=30, now=later + 100) is None  # done: never graded again


def test_expired_leases_go_back_to_the_queue_then_fail_after_max_attempts(store):
    store.add(job("j2"), b"zip")
    t = time.time()
    assert store.claim("j2", "w1", 1, lease_s=10, now=t)
    assert store.heartbeat("j2", "w1", 1, lease_s=10, now=t + 5)  # renewed until t + 15
    assert store.requeue_expired(3, now=t + 12) == []
    [back] = store.requeue_expired(3, now=t + 16)
    assert back.state is State.QUEUED and back.attempts == 1
    for attempt in (2, 3):
        assert store.claim("j2", f"w{attempt}", attempt, lease_s=10, now=t + 20 * attempt)
        [back] = store.requeue_expired(3, now=t + 20 * attempt + 11)
    assert back.state is State.FAILED and "interrupted 3 times" in back.error
    assert store.get("j2").state is State.FAILED


def test_a_dead_holder_is_requeued_without_waiting_for_its_lease(store):
    store.add(job("j3"), b"zip")
    assert store.claim("j3", "host-gpu0", 4242, lease_s=600)
    assert store.requeue_expired(3, dead=lambda j: False) == []
    [back] = store.requeue_expired(3, dead=lambda j: j.worker == "host-gpu0" and j.lease_pid == 4242)
    assert back.state is State.QUEUED


def test_dedup_lookups_and_dispatch_order(store):
    t = time.time()
    store.add(job("old", created=t - 30), b"a")
    store.add(job("new", created=t - 20), b"a")
    store.add(job("gs", kind=Kind.GRADESCOPE, owner="gradescope:hw1", sha="s2", created=t - 10), b"b")
    store.add(job("other", owner="token:b", created=t - 5), b"a")
    # Gradescope first, then the oldest.
    assert [j.id for j in store.jobs_in(State.QUEUED)] == ["gs", "old", "new", "other"]
    assert store.find_same("token:a", "s1", "k").id == "new"
    assert store.find_done("s1", "k", Kind.SELFCHECK) is None
    store.claim("new", "w", 1, lease_s=30)
    store.finish("new", "w", 1, results=b"t", state=State.FAILED, graded=True, error="boom")
    assert store.find_same("token:a", "s1", "k").id == "old"  # a failed job is not a match
    store.claim("other", "w", 1, lease_s=30)
    store.finish("other", "w", 1, results=b"t", state=State.DONE, graded=True,
                 leaderboard=[{"name": "WMMA: TFLOP/s", "value": 1.0}])
    assert store.find_done("s1", "k", Kind.SELFCHECK).id == "other"  # anyone's done self-check can lend its results
    assert store.find_done("s1", "k", Kind.GRADESCOPE) is None  # but never to a Gradescope job
    assert {j.id for j in store.owner_jobs("token:a", since=t - 25)} == {"old", "new"}  # old: still queued
    assert [j.id for j in store.finished_since(t - 60)] == ["other", "new"]
    assert [j.id for j in store.leaderboard_jobs()] == ["other"]


def test_the_queue_dispatches_gradescope_first_and_refuses_foreign_pickles(tmp_path):
    from grader.serve.queue import JobQueue, SafeSerializer

    q = JobQueue(Settings(data=tmp_path))
    t = time.time()
    for j in (job("b", created=t - 1), job("a", created=t - 2), job("g", kind=Kind.GRADESCOPE, created=t)):
        q.dispatch(j)
    assert q.pending_ids() == {"a", "b", "g"}
    taken: list[str] = []
    while q.take(taken.append):
        pass
    assert taken == ["g", "a", "b"]
    with pytest.raises(pickle.UnpicklingError, match="not allowed"):
        SafeSerializer().deserialize(pickle.dumps(Path("/etc")))


def test_serve_yaml_errors_name_the_key(tmp_path):
    from grader.serve.settings import SettingsError, from_mapping

    s = from_mapping(Settings(), {"limits": {"submissions_per_hour": 2}, "gpus": "0,1"}, "serve.yaml")
    assert s.limits.submissions_per_hour == 2 and s.gpus == ("0", "1") and s.limits.concurrent_jobs == 1
    with pytest.raises(SettingsError, match=r"serve.yaml: limits.per_hour: unknown limit"):
        from_mapping(Settings(), {"limits": {"per_hour": 2}}, "serve.yaml")
    with pytest.raises(SettingsError, match=r"serve.yaml: lease: unknown setting"):
        from_mapping(Settings(), {"lease": 2}, "serve.yaml")
    with pytest.raises(SettingsError, match=r"serve.yaml: port: 'x' is not a port number"):
        from_mapping(Settings(), {"port": "x"}, "serve.yaml")


def test_a_gpu_workers_gradings_get_its_gpus_description_and_static_ones_do_not(tmp_path):
    from grader.serve.worker import grade_command

    archive, out, described = tmp_path / "submission.zip", tmp_path / "out", tmp_path / "device.json"
    gpu = grade_command(Settings(stages=["naive", "tiled"]), archive, out, described)
    assert gpu[gpu.index("--device") + 1] == str(described) and "--no-gpu" not in gpu
    assert gpu[gpu.index("--stages") + 1] == "naive,tiled" and gpu[-2:] == ["--", str(archive)]
    assert "--device" not in grade_command(Settings(), archive, out, None)  # its probe failed: each grading probes
    static = grade_command(Settings(no_gpu=True), archive, out, described)
    assert "--no-gpu" in static and "--device" not in static


def test_a_full_disk_shows_sqlites_own_error_and_a_broken_store_fails_its_check(tmp_path):
    """SQLite rolls a transaction back by itself when the disk fills: the store's own rollback must not
    replace that error with "cannot rollback - no transaction is active"."""
    import sqlite3

    store = SqliteStore(tmp_path / "jobs.sqlite")
    store._conn().execute("pragma max_page_count = 40")  # this thread's connection: a disk that fills up
    with pytest.raises(Exception) as raised:
        store.add(job("big"), b"x" * 1_000_000)
    assert "database or disk is full" in str(raised.value), raised.value
    from grader.serve.store import StoreUnavailable

    assert isinstance(raised.value, StoreUnavailable)
    assert store.get("big") is None  # nothing half-written
    store.add(job("small"), b"zip")
    store.check()
    db = sqlite3.connect(tmp_path / "jobs.sqlite")
    db.execute("drop table nonces")
    db.commit()
    db.close()
    with pytest.raises(StoreUnavailable, match="lacks its table"):
        store.check()
    (tmp_path / "jobs.sqlite").unlink()
    with pytest.raises(StoreUnavailable, match="is gone"):
        store.get("small")
    assert not (tmp_path / "jobs.sqlite").exists()
