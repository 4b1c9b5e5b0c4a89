"""The job store on Redis: several GPU hosts share jobs, archives and results through one server.

Keys (prefix ``grader:``): ``job:<id>`` (the record as JSON), ``archive:<id>`` and ``results:<id>``
(bytes), and indexes kept in the same MULTI as the record: ``state:<state>`` (sorted sets; the
queued one scored in dispatch order), ``owner:<owner>`` and ``content:<sha>:<key>`` (by creation),
``finished`` (by finish time), ``ranked`` (done self-checks with leaderboard entries), ``workers``
(a hash), and ``nonce:<assignment>:<nonce>`` (signed requests already taken, each expiring with its skew). A transition WATCHes the job's key, so a concurrent change makes it retry, never overwrite.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import redis
from redis.client import Pipeline

from grader.serve.store import Change, Job, JobStore, Kind, State, StoreUnavailable, WorkerInfo, parse_job, readable

PREFIX = "grader:"
R = TypeVar("R")
# Given the job's stored record: None to change nothing, or the writes to queue in one MULTI.
Plan = Callable[[bytes | str], "Callable[[Pipeline], R] | None"]


class RedisStore(JobStore):
    kind = "redis"

    def __init__(self, url: str, prefix: str = PREFIX):
        self.r = redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=10,
                                      health_check_interval=30)
        self.p = prefix

    def close(self) -> None:
        self.r.close()

    def _k(self, *parts: str) -> str:
        return self.p + ":".join(parts)

    def _index(self, pipe, old: Job | None, new: Job) -> None:
        """Move ``new`` between the indexes (``old`` is the record before the change, if any)."""
        if old is not None and old.state is not new.state:
            pipe.zrem(self._k("state", old.state.value), new.id)
        score = -new.order if new.state is State.QUEUED else new.created
        pipe.zadd(self._k("state", new.state.value), {new.id: score})
        if old is None:
            pipe.zadd(self._k("owner", new.owner), {new.id: new.created})
            pipe.zadd(self._k("content", new.archive_sha, new.key), {new.id: new.created})
        if new.finished is not None and new.state in (State.DONE, State.FAILED):
            pipe.zadd(self._k("finished"), {new.id: new.finished})
        if new.kind is Kind.SELFCHECK and new.state is State.DONE and new.leaderboard:
            pipe.sadd(self._k("ranked"), new.id)

    def add(self, job: Job, archive: bytes, results: bytes | None = None) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.set(self._k("archive", job.id), archive)
        if results is not None:
            pipe.set(self._k("results", job.id), results)
        pipe.set(self._k("job", job.id), job.to_json())
        self._index(pipe, None, job)
        pipe.execute()

    def get(self, job_id: str) -> Job | None:
        raw = self.r.get(self._k("job", job_id))
        return parse_job(raw, job_id) if raw else None

    def _transact(self, job_id: str, plan: Plan[R]) -> R | None:
        """Read the job's record under WATCH; ``plan(raw)`` returns None to leave it as it is, or the
        writes to make (queued after MULTI; their answer is returned). If the record changed in the
        meantime, Redis refuses the MULTI and the record is read and planned again, never overwritten."""
        key = self._k("job", job_id)
        with self.r.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(key)
                    raw = pipe.get(key)
                    write = plan(raw) if raw else None
                    if write is None:
                        pipe.reset()
                        return None
                    pipe.multi()
                    answer = write(pipe)
                    pipe.execute()
                    return answer
                except redis.WatchError:
                    continue  # changed under us: read again and decide again

    def _update(self, job_id: str, change: Change, results: bytes | None = None) -> Job | None:
        def plan(raw: bytes | str) -> Callable[[Pipeline], Job] | None:
            old = parse_job(raw, job_id)
            new = change(parse_job(raw, job_id))  # a fresh copy: change may alter its argument
            if new is None:
                return None

            def write(pipe: Pipeline) -> Job:
                pipe.set(self._k("job", job_id), new.to_json())
                if results is not None:
                    pipe.set(self._k("results", job_id), results)
                self._index(pipe, old, new)
                return new
            return write

        return self._transact(job_id, plan)

    def _bytes(self, key: str) -> bytes | None:
        raw = self.r.get(key)
        return raw if isinstance(raw, bytes) else None  # the client answers bytes (no decode_responses)

    def archive(self, job_id: str) -> bytes | None:
        return self._bytes(self._k("archive", job_id))

    def results(self, job_id: str) -> bytes | None:
        return self._bytes(self._k("results", job_id))

    def _load(self, ids) -> list[Job]:
        ids = [i.decode() if isinstance(i, bytes) else i for i in ids]
        if not ids:
            return []
        raws = self.r.mget([self._k("job", i) for i in ids])
        return readable([(i, raw) for i, raw in zip(ids, raws) if raw])

    def _content(self, archive_sha: str, key: str) -> list[Job]:
        return self._load(self.r.zrevrange(self._k("content", archive_sha, key), 0, -1))

    def find_same(self, owner: str, archive_sha: str, key: str) -> Job | None:
        return next((j for j in self._content(archive_sha, key)
                     if j.owner == owner and j.state is not State.FAILED), None)

    def find_done(self, archive_sha: str, key: str, kind: Kind) -> Job | None:
        done = [j for j in self._content(archive_sha, key) if j.state is State.DONE and j.kind is kind]
        return max(done, key=lambda j: j.finished or 0.0) if done else None

    def jobs_in(self, state: State) -> list[Job]:
        return self._load(self.r.zrange(self._k("state", state.value), 0, -1))

    def owner_jobs(self, owner: str, since: float) -> list[Job]:
        recent = self._load(self.r.zrangebyscore(self._k("owner", owner), since, "+inf"))
        seen = {j.id for j in recent}
        active = [j for s in (State.QUEUED, State.RUNNING) for j in self.jobs_in(s)
                  if j.owner == owner and j.id not in seen]
        return sorted(recent + active, key=lambda j: -j.created)

    def finished_since(self, since: float, limit: int = 1000) -> list[Job]:
        ids = self.r.zrevrangebyscore(self._k("finished"), "+inf", since, start=0, num=limit)
        return self._load(ids)

    def leaderboard_jobs(self) -> list[Job]:
        return self._load(self.r.smembers(self._k("ranked")))

    def finished_before(self, before: float) -> list[Job]:
        return self._load(self.r.zrangebyscore(self._k("finished"), "-inf", f"({before}"))

    def blob_sizes(self, job_id: str) -> tuple[int, int]:
        return self.r.strlen(self._k("archive", job_id)), self.r.strlen(self._k("results", job_id))

    def forget(self, job_id: str, whole: bool) -> bool:
        def plan(raw: bytes | str) -> Callable[[Pipeline], bool] | None:
            job = parse_job(raw, job_id)
            if job.state not in (State.DONE, State.FAILED):
                return None

            def write(pipe: Pipeline) -> bool:
                pipe.delete(self._k("archive", job_id))
                if whole:
                    pipe.delete(self._k("results", job_id), self._k("job", job_id))
                    pipe.zrem(self._k("state", job.state.value), job_id)
                    pipe.zrem(self._k("owner", job.owner), job_id)
                    pipe.zrem(self._k("content", job.archive_sha, job.key), job_id)
                    pipe.zrem(self._k("finished"), job_id)
                    pipe.srem(self._k("ranked"), job_id)
                return True
            return write

        return bool(self._transact(job_id, plan))

    def use_nonce(self, name: str, until: float) -> bool:
        # SET NX with an expiry: one atomic step, and Redis drops the entry once it is of no use.
        ttl = max(int(until - time.time()) + 1, 1)
        return bool(self.r.set(self._k("nonce", name), b"1", nx=True, ex=ttl))

    def check(self) -> None:
        try:
            self.r.ping()
        except redis.RedisError as exc:
            raise StoreUnavailable(f"the job store's Redis does not answer: {type(exc).__name__}: {exc}") from exc

    def put_worker(self, info: WorkerInfo) -> None:
        self.r.hset(self._k("workers"), info.name, info.to_json())

    def drop_worker(self, name: str) -> None:
        self.r.hdel(self._k("workers"), name)

    def workers(self) -> list[WorkerInfo]:
        raw = self.r.hgetall(self._k("workers"))
        return sorted((WorkerInfo.from_json(v) for v in raw.values()), key=lambda w: w.name)

    def claim_name(self, info: WorkerInfo, replaceable) -> WorkerInfo | None:
        key = self._k("workers")
        with self.r.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(key)
                    raw = pipe.hget(key, info.name)
                    holder = WorkerInfo.from_json(raw) if raw else None
                    if holder is not None and not replaceable(holder):
                        pipe.reset()
                        return holder
                    pipe.multi()
                    pipe.hset(key, info.name, info.to_json())
                    pipe.execute()
                    return None
                except redis.WatchError:
                    continue
