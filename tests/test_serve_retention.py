"""Retention (grader/serve/retention.py): old finished jobs lose their archives and left work folders,
keep their results unless asked; queued and running jobs are never touched. On both stores, through
``python -m grader serve prune``, and by the running service (``retention_days`` in serve.yaml)."""
from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.serve.retention import prune
from grader.serve.store import Job, JobStore, Kind, State
from grader.serve.store_sqlite import SqliteStore
from tests.serve_helpers import ROOT, ServiceProcess, redis_server
from tests.tree_helpers import deep_chain, unremovable

DAY = 86400.0


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def store(request, tmp_path) -> Iterator[JobStore]:
    if request.param == "sqlite":
        s: JobStore = SqliteStore(tmp_path / "data" / "jobs.sqlite")
    else:
        from grader.serve.store_redis import RedisStore

        s = RedisStore(request.getfixturevalue("redis_url"), prefix=f"t{time.monotonic_ns()}:")
    yield s
    s.close()


def populate(store: JobStore, data: Path, now: float) -> None:
    """old-done and old-failed (finished 10 days ago, one with a work folder a killed worker left),
    old-queued and old-running (created 10 days ago, never finished), new-done (finished an hour ago)."""
    for i, (name, age) in enumerate((("old-done", 10 * DAY), ("old-failed", 10 * DAY), ("old-queued", 10 * DAY),
                                     ("old-running", 10 * DAY), ("new-done", 3600.0))):
        store.add(Job(id=name, kind=Kind.SELFCHECK, owner="token:a", label="calm-otter-01", archive_sha=f"s{i}",
                      key="k", created=now - age - 60), b"A" * 1000)
        if name.endswith(("done", "failed", "running")):
            store.claim(name, "w", 1, lease_s=10 * DAY * 2, now=now - age - 30)
        if name.endswith(("done", "failed")):
            store.finish(name, "w", 1, results=b"R" * 500, state=State.FAILED if "failed" in name else State.DONE,
                         graded=True, files=["results.json"], now=now - age)
    left = data / "work" / "host-cpu0" / "old-done-1"
    left.mkdir(parents=True)
    (left / "submission.zip").write_bytes(b"Z" * 300)
    (data / "work" / "host-cpu0" / "old-queued-1").mkdir()


def test_prune_deletes_old_archives_keeps_results_and_never_touches_active_jobs(store, tmp_path):
    data, now = tmp_path / "data", time.time()
    data.mkdir(exist_ok=True)
    populate(store, data, now)
    dry = prune(store, data, 7, dry_run=True, now=now)
    assert [(p.job, p.archive_bytes, p.results_bytes, p.work_bytes) for p in dry] == [
        ("old-done", 1000, 0, 300), ("old-failed", 1000, 0, 0)]
    assert store.archive("old-done") == b"A" * 1000 and (data / "work" / "host-cpu0" / "old-done-1").exists()

    done = prune(store, data, 7, now=now)
    assert [p.job for p in done] == ["old-done", "old-failed"] and sum(p.total for p in done) == 2300
    assert store.archive("old-done") is None and store.archive("old-failed") is None
    assert store.results("old-done") == b"R" * 500 and store.get("old-done").files == ["results.json"]
    assert not (data / "work" / "host-cpu0" / "old-done-1").exists()
    for active in ("old-queued", "old-running", "new-done"):
        assert store.archive(active) == b"A" * 1000
    assert (data / "work" / "host-cpu0" / "old-queued-1").exists()
    assert prune(store, data, 7, now=now) == []  # nothing left to delete: nothing reported

    whole = prune(store, data, 7, results_too=True, now=now)
    assert [(p.job, p.results_bytes) for p in whole] == [("old-done", 500), ("old-failed", 500)]
    assert store.get("old-done") is None and store.results("old-done") is None
    assert store.find_same("token:a", "s0", "k") is None and store.find_done("s0", "k", Kind.SELFCHECK) is None
    assert [j.id for j in store.finished_since(0)] == ["new-done"]
    assert {j.id for j in store.owner_jobs("token:a", 0)} == {"old-queued", "old-running", "new-done"}
    assert store.get("old-queued").state is State.QUEUED and store.get("old-running").state is State.RUNNING


def test_a_work_folder_that_cannot_be_removed_costs_only_its_own_job(store, tmp_path, caplog):
    """A 1500-deep chain in one left work folder is removed (no recursion); a folder nobody can empty in
    another is logged and said, and every other job is still pruned; the next prune tries it again."""
    data, now = tmp_path / "data", time.time()
    data.mkdir(exist_ok=True)
    populate(store, data, now)
    deep = data / "work" / "host-cpu0" / "old-done-1" / "build"
    with deep_chain(deep, 1500), unremovable(data / "work" / "host-cpu1" / "old-failed-1" / "held") as held:
        with caplog.at_level("WARNING", logger="grader.serve"):
            done = prune(store, data, 7, now=now)
        assert [(p.job, bool(p.problem)) for p in done] == [("old-done", False), ("old-failed", True)]
        assert not (data / "work" / "host-cpu0" / "old-done-1").exists()
        assert store.archive("old-done") is None and store.archive("old-failed") is None
        assert held.is_dir() and done[1].problem.startswith("work folder old-failed-1 not removed (")
        assert "retention: job old-failed: its work folder" in caplog.text
        assert prune(store, data, 7, now=now)[0].problem  # tried again, and again only it
    assert [p.job for p in prune(store, data, 7, now=now)] == ["old-failed"]  # removable now: it goes
    assert not (data / "work" / "host-cpu1" / "old-failed-1").exists() and prune(store, data, 7, now=now) == []


def run_prune(data: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", "serve", "prune", "--data", str(data), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_the_prune_command_prints_what_it_deleted_and_the_bytes_freed(backend, tmp_path, request):
    data, now = tmp_path / "data", time.time()
    data.mkdir()
    queue: list[str] = []
    if backend == "sqlite":
        s: JobStore = SqliteStore(data / "jobs.sqlite")
    else:
        from grader.serve.store_redis import RedisStore

        url = request.getfixturevalue("redis_url")
        RedisStore(url).r.flushdb()
        s, queue = RedisStore(url), ["--queue", url]
    populate(s, data, now)
    dry = run_prune(data, "--older-than-days", "7", "--dry-run", *queue)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0].startswith("would delete job old-done (done 20")
    assert "archive 1000 B, work folder 300 B" in dry.stdout
    assert dry.stdout.splitlines()[-1] == "2 job(s); 2.2 KiB would be freed"
    assert s.archive("old-done") is not None
    real = run_prune(data, "--older-than-days", "7", *queue)
    assert real.returncode == 0 and real.stdout.splitlines()[-1] == "2 job(s); 2.2 KiB freed", real.stdout
    assert "deleted job old-failed (failed " in real.stdout
    assert s.archive("old-done") is None and s.results("old-done") is not None
    assert s.archive("old-queued") is not None and s.archive("new-done") is not None
    whole = run_prune(data, "--older-than-days", "7", "--results-too", *queue)
    assert "results 500 B" in whole.stdout and whole.stdout.splitlines()[-1] == "2 job(s); 1000 B freed"
    assert s.get("old-done") is None and s.get("new-done") is not None
    bad = run_prune(data, "--older-than-days", "-1", *queue)
    assert bad.returncode == 2 and "--older-than-days must be 0 or more" in bad.stderr


def test_the_running_service_applies_retention_days(tmp_path):
    data, now = tmp_path / "data", time.time()
    data.mkdir(mode=0o700)
    populate(SqliteStore(data / "jobs.sqlite"), data, now)
    (data / "serve.yaml").write_text("retention_days: 7\n")
    with ServiceProcess(data, "--no-workers", "--lease-s", "4") as svc:
        store = SqliteStore(data / "jobs.sqlite")
        said = "retention: 2 job(s) finished over 7 days ago pruned, 2.2 KiB freed"
        deadline = time.monotonic() + 30
        # the service prunes, then logs: wait for both
        while ((store.archive("old-done") is not None or said not in svc.log_text())
               and time.monotonic() < deadline):
            time.sleep(0.2)
        assert store.archive("old-done") is None, svc.log_text()
        assert store.archive("old-queued") is not None and store.archive("new-done") is not None
        assert said in svc.log_text()
    (data / "serve.yaml").write_text("retention_days: soon\n")
    bad = subprocess.run([sys.executable, "-m", "grader", "serve", "--no-gpu", "--data", str(data)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "retention_days: 'soon' is not a number of days" in bad.stderr
