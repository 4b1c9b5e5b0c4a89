"""The job store on one host: a SQLite file under --data (WAL, so the HTTP side reads while workers write).

Each job is one row: the columns that queries filter on, and the whole record as JSON; archives and
results folders are BLOBs in their own tables, read only when needed. Transitions are one
``BEGIN IMMEDIATE`` transaction each (read, decide, write), so two workers never both claim a job.
"""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from grader.serve.store import Change, Job, JobStore, Kind, State, WorkerInfo

SCHEMA = """
create table if not exists jobs (
    id text primary key, owner text not null, kind text not null, state text not null,
    archive_sha text not null, key text not null, ord real not null, created real not null,
    finished real, ranked integer not null default 0, record text not null);
create index if not exists jobs_state on jobs (state, ord desc);
create index if not exists jobs_owner on jobs (owner, created);
create index if not exists jobs_content on jobs (archive_sha, key);
create index if not exists jobs_finished on jobs (finished);
create table if not exists archives (id text primary key, data blob not null);
create table if not exists results (id text primary key, data blob not null);
create table if not exists workers (name text primary key, record text not null);
"""
BUSY_TIMEOUT_S = 30.0


class SqliteStore(JobStore):
    kind = "sqlite"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._conn().executescript(SCHEMA)

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # Autocommit; transitions open their own BEGIN IMMEDIATE.
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            conn.execute("pragma journal_mode=wal")
            conn.execute("pragma synchronous=normal")
            self._local.conn = conn
        return conn

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    @staticmethod
    def _row(job: Job) -> tuple:
        ranked = int(job.kind is Kind.SELFCHECK and job.state is State.DONE and bool(job.leaderboard))
        return (job.owner, job.kind.value, job.state.value, job.archive_sha, job.key, job.order, job.created,
                job.finished, ranked, job.to_json(), job.id)

    def add(self, job: Job, archive: bytes, results: bytes | None = None) -> None:
        c = self._conn()
        c.execute("begin immediate")
        try:
            c.execute("insert into jobs (owner, kind, state, archive_sha, key, ord, created, finished, ranked, "
                      "record, id) values (?,?,?,?,?,?,?,?,?,?,?)", self._row(job))
            c.execute("insert into archives (id, data) values (?, ?)", (job.id, archive))
            if results is not None:
                c.execute("insert into results (id, data) values (?, ?)", (job.id, results))
            c.execute("commit")
        except BaseException:
            c.execute("rollback")
            raise

    def get(self, job_id: str) -> Job | None:
        row = self._conn().execute("select record from jobs where id = ?", (job_id,)).fetchone()
        return Job.from_json(row[0]) if row else None

    def _update(self, job_id: str, change: Change, results: bytes | None = None) -> Job | None:
        c = self._conn()
        c.execute("begin immediate")
        try:
            row = c.execute("select record from jobs where id = ?", (job_id,)).fetchone()
            new = change(Job.from_json(row[0])) if row else None
            if new is not None:
                c.execute("update jobs set owner=?, kind=?, state=?, archive_sha=?, key=?, ord=?, created=?, "
                          "finished=?, ranked=?, record=? where id=?", self._row(new))
                if results is not None:
                    c.execute("insert or replace into results (id, data) values (?, ?)", (job_id, results))
            c.execute("commit")
            return new
        except BaseException:
            c.execute("rollback")
            raise

    def _blob(self, table: str, job_id: str) -> bytes | None:
        row = self._conn().execute(f"select data from {table} where id = ?", (job_id,)).fetchone()
        return bytes(row[0]) if row else None

    def archive(self, job_id: str) -> bytes | None:
        return self._blob("archives", job_id)

    def results(self, job_id: str) -> bytes | None:
        return self._blob("results", job_id)

    def _jobs(self, where: str, args: tuple, order: str = "created desc", limit: int = 100_000) -> list[Job]:
        rows = self._conn().execute(f"select record from jobs where {where} order by {order} limit ?",
                                    (*args, limit)).fetchall()
        return [Job.from_json(r[0]) for r in rows]

    def find_same(self, owner: str, archive_sha: str, key: str) -> Job | None:
        found = self._jobs("owner = ? and archive_sha = ? and key = ? and state != ?",
                           (owner, archive_sha, key, State.FAILED.value), limit=1)
        return found[0] if found else None

    def find_done(self, archive_sha: str, key: str, kind: Kind) -> Job | None:
        found = self._jobs("archive_sha = ? and key = ? and kind = ? and state = ?",
                           (archive_sha, key, kind.value, State.DONE.value), order="finished desc", limit=1)
        return found[0] if found else None

    def jobs_in(self, state: State) -> list[Job]:
        return self._jobs("state = ?", (state.value,), order="ord desc")

    def owner_jobs(self, owner: str, since: float) -> list[Job]:
        return self._jobs("owner = ? and (created >= ? or state in (?, ?))",
                          (owner, since, State.QUEUED.value, State.RUNNING.value))

    def finished_since(self, since: float, limit: int = 1000) -> list[Job]:
        return self._jobs("finished >= ? and state in (?, ?)", (since, State.DONE.value, State.FAILED.value),
                          order="finished desc", limit=limit)

    def leaderboard_jobs(self) -> list[Job]:
        return self._jobs("ranked = 1", ())

    def finished_before(self, before: float) -> list[Job]:
        return self._jobs("finished < ? and state in (?, ?)", (before, State.DONE.value, State.FAILED.value),
                          order="finished asc")

    def blob_sizes(self, job_id: str) -> tuple[int, int]:
        c = self._conn()
        sizes = [c.execute(f"select length(data) from {table} where id = ?", (job_id,)).fetchone()
                 for table in ("archives", "results")]
        return (sizes[0][0] if sizes[0] else 0), (sizes[1][0] if sizes[1] else 0)

    def forget(self, job_id: str, whole: bool) -> bool:
        # The freed pages are reused by later jobs; the file itself shrinks only on a VACUUM.
        c = self._conn()
        c.execute("begin immediate")
        try:
            row = c.execute("select state from jobs where id = ?", (job_id,)).fetchone()
            finished = row is not None and row[0] in (State.DONE.value, State.FAILED.value)
            if finished:
                c.execute("delete from archives where id = ?", (job_id,))
                if whole:
                    c.execute("delete from results where id = ?", (job_id,))
                    c.execute("delete from jobs where id = ?", (job_id,))
            c.execute("commit")
            return finished
        except BaseException:
            c.execute("rollback")
            raise

    def put_worker(self, info: WorkerInfo) -> None:
        self._conn().execute("insert or replace into workers (name, record) values (?, ?)",
                             (info.name, info.to_json()))

    def drop_worker(self, name: str) -> None:
        self._conn().execute("delete from workers where name = ?", (name,))

    def workers(self) -> list[WorkerInfo]:
        rows = self._conn().execute("select record from workers order by name").fetchall()
        return [WorkerInfo.from_json(r[0]) for r in rows]
