"""The job store: the truth about every job (state, lease, archive, results), on SQLite or Redis.

huey only dispatches job ids; whether a job may run, who runs it and what it produced is decided
here, by conditional transitions that each backend applies atomically (:meth:`JobStore._update`:
one SQLite ``BEGIN IMMEDIATE`` transaction, or one Redis WATCH/MULTI). That is what makes a job
complete exactly once:

* :meth:`claim` takes a job only when it is queued, or running under a lease nobody renewed in time;
  a duplicate dispatch of a job that is running or done claims nothing;
* :meth:`heartbeat` renews the lease only for its holder, and :meth:`finish` stores results only
  for the holder of a live claim, so a worker that lost its lease cannot overwrite a later attempt;
* :meth:`requeue_expired` puts jobs whose lease ran out back to ``queued`` (the caller re-dispatches
  them); a job interrupted ``max_attempts`` times fails with a sentence saying so.

Both backends implement the same small set of primitives (the abstract methods below); archives and
results folders (a .tar.gz) travel through the store, so a worker on another host needs nothing but it.
"""
from __future__ import annotations

import abc
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

log = logging.getLogger("grader.serve")


class State(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Kind(str, Enum):
    SELFCHECK = "selfcheck"
    GRADESCOPE = "gradescope"


# Gradescope jobs go first; within a priority, the oldest job first (the order huey dequeues in too).
# A Gradescope job over its submitter's fair share (settings.gradescope_fair_share) waits with the
# self-checks instead: never refused, but behind every other student's Gradescope job.
PRIORITY = {Kind.GRADESCOPE: 10, Kind.SELFCHECK: 0}
DEMOTED_PRIORITY = PRIORITY[Kind.SELFCHECK]


@dataclass
class Job:
    id: str
    kind: Kind
    owner: str  # "token:<hash prefix>" or "gradescope:<assignment>": whose limits and dedup scope
    label: str  # the leaderboard's name for the owner (a pseudonym), or the assignment
    archive_sha: str
    key: str  # the grading key: rubric sha256 + mode + stages (grader/serve/settings.py)
    created: float
    state: State = State.QUEUED
    force: bool = False
    submission_id: str = ""  # Gradescope's, when the bridge sends it
    started: float | None = None
    finished: float | None = None
    worker: str = ""  # the lease holder (or the last one)
    lease_pid: int = 0
    lease_until: float = 0.0
    attempts: int = 0  # claims
    gradings: int = 0  # gradings that ran to completion (0 when the results were copied)
    grade_s: float | None = None
    score: float | None = None
    max_score: float | None = None
    error: str = ""
    files: list[str] = field(default_factory=list)
    leaderboard: list[dict] = field(default_factory=list)
    copied_from: str = ""
    submitter: str = ""  # Gradescope's submitter, as the bridge's keyed hash (signing.submitter_id)
    demoted: bool = False  # over its submitter's fair share when queued: waits with the self-checks
    # Why its grading had no GPU ("" when it had one, or before it is graded): its GPU items are "not
    # evaluated", and the bridge, the page and a later regrade must know it was not a GPU grading.
    without_gpu: str = ""

    @property
    def priority(self) -> int:
        return DEMOTED_PRIORITY if self.demoted else PRIORITY[self.kind]

    @property
    def order(self) -> float:
        """huey's priority: higher runs first; the kind's priority, then the age (older first)."""
        return self.priority * 1e10 - self.created

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["kind"], d["state"] = self.kind.value, self.state.value
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str | bytes) -> Job:
        d = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        d = {k: v for k, v in d.items() if k in names}  # a record written by a newer version
        d["kind"], d["state"] = Kind(d["kind"]), State(d["state"])
        return cls(**d)


@dataclass
class WorkerInfo:
    name: str
    gpu: str | None
    state: str  # "idle" | "grading"
    last_seen: float
    job_started: float | None = None
    pid: int = 0
    host: str = ""
    boot: str = ""  # the host's boot id (/proc/sys/kernel/random/boot_id): cloned hosts share a name, never this

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> WorkerInfo:
        d = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


Change = Callable[[Job], "Job | None"]


class UnreadableRecord(ValueError):
    """A job record this version cannot read (an unknown kind or state: a newer service queued it into a
    shared Redis, say). Lists skip it and log it once (:func:`readable`); only that job is affected."""


_reported: set[str] = set()


def parse_job(raw: str | bytes, job_id: str = "?") -> Job:
    """:meth:`Job.from_json`, or :class:`UnreadableRecord` naming the job and what is wrong."""
    try:
        return Job.from_json(raw)
    except json.JSONDecodeError:
        raise  # not a record at all: a corrupted store is a fault to see whole, not a version's record
    except (ValueError, KeyError, TypeError) as exc:
        raise UnreadableRecord(f"job {job_id}: its record cannot be read by this version of the service "
                               f"({type(exc).__name__}: {exc}); it is left alone (a service of the version that "
                               "queued it can grade it)") from None


def readable(raws: list[tuple[str, str | bytes]]) -> list[Job]:
    """The jobs of ``(id, record)`` pairs that this version can read; each unreadable one is logged
    once per process, and only it is left out."""
    jobs = []
    for job_id, raw in raws:
        try:
            jobs.append(parse_job(raw, job_id))
        except ValueError as exc:  # UnreadableRecord, or not JSON at all: only this job is left out
            if job_id not in _reported:
                _reported.add(job_id)
                log.error("%s", exc if isinstance(exc, UnreadableRecord) else f"job {job_id}: its record is not "
                          f"JSON ({exc}); it is left out of every list")
    return jobs


class StoreUnavailable(Exception):
    """The job store is gone or cannot write (its file deleted or replaced, a table missing, the disk
    full, its server away). The message is the real error, for the log; clients get a 503 that says
    nothing was stored, and /healthz reports not ok, until the store is repaired."""


class JobStore(abc.ABC):
    """The primitives each backend implements, and the transitions built on them."""

    kind = "?"

    # --- primitives ---------------------------------------------------------------------------
    @abc.abstractmethod
    def add(self, job: Job, archive: bytes, results: bytes | None = None) -> None:
        """Insert a new job with its archive (and, for a copied result, its results)."""

    @abc.abstractmethod
    def get(self, job_id: str) -> Job | None: ...

    @abc.abstractmethod
    def _update(self, job_id: str, change: Change, results: bytes | None = None) -> Job | None:
        """Atomically: read the job, ``change(copy)``; when it returns a job, write it (and
        ``results``, if given) and return it; else write nothing and return None."""

    @abc.abstractmethod
    def archive(self, job_id: str) -> bytes | None: ...

    @abc.abstractmethod
    def results(self, job_id: str) -> bytes | None: ...

    @abc.abstractmethod
    def find_same(self, owner: str, archive_sha: str, key: str) -> Job | None:
        """The newest job of ``owner`` for this content and grading key that did not fail."""

    @abc.abstractmethod
    def find_done(self, archive_sha: str, key: str, kind: Kind) -> Job | None:
        """A done job of ``kind`` (anyone's) for this content and grading key, whose results can be
        copied: a Gradescope grade only ever comes from a Gradescope grading of these bytes, never from
        a self-check a student could repeat (``--force``) until a timing or a race happened to pass."""

    @abc.abstractmethod
    def jobs_in(self, state: State) -> list[Job]:
        """Jobs in ``state``; queued ones in dispatch order (Gradescope first, then oldest)."""

    @abc.abstractmethod
    def owner_jobs(self, owner: str, since: float) -> list[Job]:
        """``owner``'s jobs created at or after ``since``, and all its queued or running ones."""

    @abc.abstractmethod
    def finished_since(self, since: float, limit: int = 1000) -> list[Job]:
        """Done or failed jobs finished at or after ``since``, newest first."""

    @abc.abstractmethod
    def finished_before(self, before: float) -> list[Job]:
        """Done or failed jobs finished before ``before``, oldest first (what retention may prune)."""

    @abc.abstractmethod
    def blob_sizes(self, job_id: str) -> tuple[int, int]:
        """Bytes of the job's stored archive and results (0 where there is none)."""

    @abc.abstractmethod
    def forget(self, job_id: str, whole: bool) -> bool:
        """Delete a done or failed job's archive; ``whole``: its results and record too (every index).
        False (nothing deleted) when the job is not finished."""

    @abc.abstractmethod
    def leaderboard_jobs(self) -> list[Job]:
        """Done self-check jobs whose results had leaderboard entries."""

    @abc.abstractmethod
    def use_nonce(self, name: str, until: float) -> bool:
        """Record a signed request's nonce until ``until`` (unix seconds); False when it is recorded
        already (the request is a replay). Entries past their ``until`` may be dropped."""

    @abc.abstractmethod
    def check(self) -> None:
        """Raise :class:`StoreUnavailable` unless the store is there, whole, and answers."""

    @abc.abstractmethod
    def put_worker(self, info: WorkerInfo) -> None: ...

    @abc.abstractmethod
    def drop_worker(self, name: str) -> None: ...

    @abc.abstractmethod
    def workers(self) -> list[WorkerInfo]: ...

    @abc.abstractmethod
    def claim_name(self, info: WorkerInfo, replaceable: Callable[[WorkerInfo], bool]) -> WorkerInfo | None:
        """Atomically: register ``info`` unless a worker of that name is registered whose record
        ``replaceable`` refuses (a live one); then return that holder and write nothing."""

    def close(self) -> None:  # noqa: B027 - optional for backends
        pass

    # --- transitions --------------------------------------------------------------------------
    def claim(self, job_id: str, worker: str, pid: int, lease_s: float, now: float | None = None) -> Job | None:
        """Take ``job_id`` for ``worker``: only a queued job, or a running one whose lease expired."""
        t = time.time() if now is None else now

        def change(job: Job) -> Job | None:
            if job.state is State.QUEUED or (job.state is State.RUNNING and job.lease_until < t):
                job.state, job.worker, job.lease_pid = State.RUNNING, worker, pid
                job.lease_until, job.started, job.attempts = t + lease_s, t, job.attempts + 1
                return job
            return None
        return self._update(job_id, change)

    def heartbeat(self, job_id: str, worker: str, pid: int, lease_s: float, now: float | None = None) -> bool:
        """Renew the lease; False when this worker no longer holds it (stop grading then)."""
        t = time.time() if now is None else now

        def change(job: Job) -> Job | None:
            if job.state is State.RUNNING and job.worker == worker and job.lease_pid == pid:
                job.lease_until = t + lease_s
                return job
            return None
        return self._update(job_id, change) is not None

    def finish(self, job_id: str, worker: str, pid: int, *, results: bytes | None, state: State,
               graded: bool, error: str = "", score: float | None = None, max_score: float | None = None,
               files: list[str] | None = None, leaderboard: list[dict] | None = None,
               grade_s: float | None = None, copied_from: str = "", without_gpu: str = "",
               now: float | None = None) -> Job | None:
        """Store the outcome, only when ``worker`` (process ``pid``) still holds the running job."""
        t = time.time() if now is None else now

        def change(job: Job) -> Job | None:
            if job.state is not State.RUNNING or job.worker != worker or job.lease_pid != pid:
                return None
            job.state, job.finished, job.error = state, t, error
            job.score, job.max_score, job.grade_s = score, max_score, grade_s
            job.files, job.leaderboard = list(files or []), list(leaderboard or [])
            job.gradings += 1 if graded else 0
            job.copied_from, job.lease_until, job.without_gpu = copied_from, 0.0, without_gpu
            return job
        return self._update(job_id, change, results=results)

    def supersede(self, job_id: str, newer: str, now: float | None = None) -> Job | None:
        """Fail a still-queued job because ``newer`` (the same submitter's later submission) replaces it."""
        t = time.time() if now is None else now

        def change(job: Job) -> Job | None:
            if job.state is not State.QUEUED:
                return None
            job.state, job.finished, job.lease_until = State.FAILED, t, 0.0
            job.error = (f"superseded: a newer submission from the same student (job {newer}) arrived while this "
                         "one waited, and only the newest is graded; its results are on the newer submission")
            return job
        return self._update(job_id, change)

    def requeue(self, job_id: str, worker: str, *, pid: int | None = None, lease_before: float | None = None,
                count_attempt: bool = True, max_attempts: int = 3, why: str = "") -> Job | None:
        """Put a running job of ``worker`` back in the queue (or fail it after ``max_attempts``);
        only while process ``pid`` holds it, or only while its lease ends before ``lease_before``."""
        def change(job: Job) -> Job | None:
            if job.state is not State.RUNNING or job.worker != worker:
                return None
            if (pid is not None and job.lease_pid != pid) or (lease_before is not None
                                                               and job.lease_until >= lease_before):
                return None
            if not count_attempt:
                job.attempts = max(job.attempts - 1, 0)
            if job.attempts >= max_attempts:
                job.state, job.finished = State.FAILED, time.time()
                job.error = (f"the grading was interrupted {job.attempts} times ({why or 'its worker was lost'}); "
                             "submit again, and tell the course staff if it happens again")
            else:
                job.state, job.started = State.QUEUED, None
            job.lease_until, job.lease_pid = 0.0, 0
            return job
        return self._update(job_id, change)

    def requeue_expired(self, max_attempts: int, now: float | None = None,
                        dead: Callable[[Job], bool] | None = None) -> list[Job]:
        """Running jobs whose lease expired (or whose holder ``dead`` says is gone) go back to the
        queue; the jobs changed (queued ones need dispatching again)."""
        t = time.time() if now is None else now
        changed = []
        for job in self.jobs_in(State.RUNNING):
            why = f"worker {job.worker} stopped renewing its lease"
            if dead is not None and dead(job):  # its process is gone: no need to wait for the lease
                new = self.requeue(job.id, job.worker, pid=job.lease_pid, max_attempts=max_attempts, why=why)
            elif job.lease_until < t:
                new = self.requeue(job.id, job.worker, lease_before=t, max_attempts=max_attempts, why=why)
            else:
                continue
            if new is not None:
                changed.append(new)
        return changed
