"""The job store on one host: a SQLite file under --data (WAL, so the HTTP side reads while workers write).

Each job is one row: the columns that queries filter on, and the whole record as JSON; archives and
results folders are BLOBs in their own tables, read only when needed. Transitions are one
``BEGIN IMMEDIATE`` transaction each (read, decide, write), so two workers never both claim a job.

The store fails closed. Each thread has its own connection, and a connection to a file deleted under
the service would go on writing into the unlinked file (jobs accepted, then lost), while a new one
would make a new empty file: so every use checks that the path still names the file the store
opened (device and inode), connections open it read-write without creating it, and a failing
statement (a full disk, a missing table) raises :class:`StoreUnavailable` with SQLite's own words.
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from grader.serve.store import Change, Job, JobStore, Kind, State, StoreUnavailable, WorkerInfo, parse_job, readable

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
create table if not exists nonces (name text primary key, until real not null);
"""
TABLES = frozenset({"jobs", "archives", "results", "workers", "nonces"})
BUSY_TIMEOUT_S = 30.0


class _Connection(sqlite3.Connection):
    """A connection whose failing statements say the store is unavailable, with SQLite's words (an
    IntegrityError or a misuse is a bug and stays what it is)."""

    def execute(self, *args, **kw):
        try:
            return super().execute(*args, **kw)
        except sqlite3.Error as exc:
            if type(exc) in (sqlite3.OperationalError, sqlite3.DatabaseError):
                raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from exc
            raise


class SqliteStore(JobStore):
    kind = "sqlite"

    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        sqlite3.connect(self.path).close()  # the only place the file may be created
        st = os.stat(self.path)
        self._identity = (st.st_dev, st.st_ino)
        self._local = threading.local()
        self._conn().executescript(SCHEMA)

    def _same_file(self) -> None:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            raise StoreUnavailable(f"the job store {self.path} is gone ({exc.strerror}); restore it and restart "
                                   "the service") from None
        if (st.st_dev, st.st_ino) != self._identity:
            raise StoreUnavailable(f"the job store {self.path} was replaced while the service ran; restart it")

    def _conn(self) -> sqlite3.Connection:
        self._same_file()
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # Autocommit; transitions open their own BEGIN IMMEDIATE. mode=rw: never create a new file.
            try:
                conn = sqlite3.connect(f"file:{quote(str(self.path))}?mode=rw", uri=True, timeout=BUSY_TIMEOUT_S,
                                       isolation_level=None, factory=_Connection)
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"the job store {self.path} cannot be opened: {exc}") from exc
            conn.execute("pragma journal_mode=wal")
            conn.execute("pragma synchronous=normal")
            self._local.conn = conn
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction. SQLite rolls a transaction back by itself on some
        errors (a full disk): a second rollback then fails, and its "no transaction is active" would
        hide the real error, so it is issued only while a transaction is open."""
        c = self._conn()
        c.execute("begin immediate")
        try:
            yield c
            c.execute("commit")
        except BaseException:
            if c.in_transaction:
                c.execute("rollback")
            raise

    def check(self) -> None:
        tables = {r[0] for r in self._conn().execute("select name from sqlite_master where type = 'table'")}
        if not TABLES <= tables:
            raise StoreUnavailable(f"the job store {self.path} lacks its table(s) {', '.join(sorted(TABLES - tables))}")

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
        with self._write() as c:
            c.execute("insert into jobs (owner, kind, state, archive_sha, key, ord, created, finished, ranked, "
                      "record, id) values (?,?,?,?,?,?,?,?,?,?,?)", self._row(job))
            c.execute("insert into archives (id, data) values (?, ?)", (job.id, archive))
            if results is not None:
                c.execute("insert into results (id, data) values (?, ?)", (job.id, results))
            self._same_file()  # deleted since the transaction began: a job written there would be lost

    def get(self, job_id: str) -> Job | None:
        row = self._conn().execute("select record from jobs where id = ?", (job_id,)).fetchone()
        return parse_job(row[0], job_id) if row else None

    def _update(self, job_id: str, change: Change, results: bytes | None = None) -> Job | None:
        with self._write() as c:
            row = c.execute("select record from jobs where id = ?", (job_id,)).fetchone()
            new = change(parse_job(row[0], job_id)) if row else None
            if new is not None:
                c.execute("update jobs set owner=?, kind=?, state=?, archive_sha=?, key=?, ord=?, created=?, "
                          "finished=?, ranked=?, record=? where id=?", self._row(new))
                if results is not None:
                    c.execute("insert or replace into results (id, data) values (?, ?)", (job_id, results))
        return new

    def _blob(self, table: str, job_id: str) -> bytes | None:
        row = self._conn().execute(f"select data from {table} where id = ?", (job_id,)).fetchone()
        return bytes(row[0]) if row else None

    def archive(self, job_id: str) -> bytes | None:
        return self._blob("archives", job_id)

    def results(self, job_id: str) -> bytes | None:
        return self._blob("results", job_id)

    def _jobs(self, where: str, args: tuple, order: str = "created desc", limit: int = 100_000) -> list[Job]:
        rows = self._conn().execute(f"select id, record from jobs where {where} order by {order} limit ?",
                                    (*args, limit)).fetchall()
        return readable([(r[0], r[1]) for r in rows])

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
        with self._write() as c:
            row = c.execute("select state from jobs where id = ?", (job_id,)).fetchone()
            finished = row is not None and row[0] in (State.DONE.value, State.FAILED.value)
            if finished:
                c.execute("delete from archives where id = ?", (job_id,))
                if whole:
                    c.execute("delete from results where id = ?", (job_id,))
                    c.execute("delete from jobs where id = ?", (job_id,))
        return finished

    def use_nonce(self, name: str, until: float) -> bool:
        with self._write() as c:
            c.execute("delete from nonces where until < ?", (time.time(),))
            return c.execute("insert or ignore into nonces (name, until) values (?, ?)", (name, until)).rowcount == 1

    def put_worker(self, info: WorkerInfo) -> None:
        self._conn().execute("insert or replace into workers (name, record) values (?, ?)",
                             (info.name, info.to_json()))

    def drop_worker(self, name: str) -> None:
        self._conn().execute("delete from workers where name = ?", (name,))

    def workers(self) -> list[WorkerInfo]:
        rows = self._conn().execute("select record from workers order by name").fetchall()
        return [WorkerInfo.from_json(r[0]) for r in rows]

    def claim_name(self, info: WorkerInfo, replaceable) -> WorkerInfo | None:
        with self._write() as c:
            row = c.execute("select record from workers where name = ?", (info.name,)).fetchone()
            holder = WorkerInfo.from_json(row[0]) if row else None
            if holder is not None and not replaceable(holder):
                return holder
            c.execute("insert or replace into workers (name, record) values (?, ?)", (info.name, info.to_json()))
        return None
