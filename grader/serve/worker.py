"""One worker: takes job ids from the queue, claims each in the store, grades it in a child process.

One grading at a time, on the GPU in CUDA_VISIBLE_DEVICES (the service pins ``gradings_per_gpu``
workers per GPU; with more than one they share the GPU's lock, ``--gpu-lock``, which each grading
takes for its GPU steps), or statically with --no-gpu. Each worker's files (its GPU's description,
its gradings') are in its own folder, ``<data>/work/<name>``. A GPU worker probes its GPU once when
it starts: each grading is handed that description (``grade --device``, as a batch does) instead of
starting a probe child of its own, which would cost every grading a second
(docs/measurements/2026-11-30-h200-kept-context-run26-31.md). If the worker's probe fails, each grading
probes for itself.

While grading, a heartbeat thread renews the job's lease every ``lease_s / 4``; a worker that loses
its lease (it stalled, another took the job) stops its grading and stores nothing. On SIGTERM the
grading is stopped and the job goes back to the queue.

At start and every ``lease_s / 4`` the worker also :func:`reap`\\ s: running jobs whose lease expired,
or whose holder was this worker's predecessor under the same name and is dead, go back to the queue,
and queued jobs the queue lost (a worker killed between taking and claiming) are dispatched again.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grader import IMPORT_ROOT
from grader.gpu.device import describe_into
from grader.grading import Grading, GradingFormatError
from grader.sandbox.lock import held_in_turn
from grader.serve import child, results
from grader.serve.child import reap_zombies
from grader.serve.queue import JobQueue
from grader.serve.settings import Settings
from grader.serve.store import Job, JobStore, Kind, State, WorkerInfo
from grader.untrusted.safe_copy import remove_tree

log = logging.getLogger("grader.serve")
PROBE_TIMEOUT_S = 60.0  # the worker's probe of its GPU at start (a batch waits the rubric's probe_s)
REDISPATCH_GRACE_S = 5.0  # a queued job younger than this may still be on its way into the queue


@contextmanager
def holding(lock: Path | None) -> Iterator[None]:
    """Hold the GPU's lock file (the exclusive flock a grading's GPU steps take: grader/pipeline.py:
    gpu_turn) while this worker probes the GPU, so a worker that starts or
    restarts beside another never touches the GPU during that one's timed turns. No lock: nothing."""
    if lock is None:
        yield
        return
    with held_in_turn(lock):
        yield


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap(store: JobStore, queue: JobQueue, settings: Settings, own_name: str | None = None) -> None:
    """Re-queue lost jobs and re-dispatch queued ones the queue does not hold (see the module docstring)."""
    def dead(job: Job) -> bool:  # only this worker's name can be judged here: same host, same slot
        return own_name is not None and job.worker == own_name and not pid_alive(job.lease_pid)

    for job in store.requeue_expired(settings.max_attempts, dead=dead):
        if job.state is State.QUEUED:
            log.info("job %s requeued: worker %s lost it (attempt %d)", job.id[:8], job.worker, job.attempts)
            queue.dispatch(job)
        else:
            log.info("job %s failed: %s", job.id[:8], job.error)
    pending = queue.pending_ids()
    now = time.time()
    for job in store.jobs_in(State.QUEUED):
        if job.id not in pending and now - job.created > REDISPATCH_GRACE_S:
            log.info("job %s dispatched again (the queue did not hold it)", job.id[:8])
            queue.dispatch(job)


def stale_without_gpu(job: Job, settings: Settings) -> bool:
    """A stored job graded without a GPU by a service that has GPUs (a worker whose CuPy or ncu was
    broken): never reused for the same content, so a regrade once the worker is repaired grades again."""
    return bool(job.without_gpu) and not settings.no_gpu


def boot_id() -> str:
    """This host's identity for as long as it runs: its name and its kernel's boot id (random at each
    boot, so two hosts cloned from one image, which share a host name, never share it)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def default_name(gpu: str | None, index: int = 0) -> str:
    return f"{socket.gethostname()}-{'gpu' + gpu if gpu is not None else f'cpu{index}'}"


# Why a job of a service started with --no-gpu has no GPU item evaluated: the service's choice, not the student's.
SERVICE_WITHOUT_GPU = "the grading service has no GPU: its operator started it with serve --no-gpu"


def grade_command(settings: Settings, archive: Path, out: Path, device_file: Path | None,
                  gpu_lock: Path | None = None, citations_from: Path | None = None,
                  student: str | None = None) -> list[str]:
    """The child that grades one job: ``grade`` with the service's rubric, mode and stages, the
    worker's description of its GPU when it has one, the GPU's lock when other workers share it, and a
    stored self-check of the same files (``citations_from``), for a report measured on another GPU.
    ``settings.grade_command`` runs in place of the grader when set (the service's tests and its soak run
    use a stand-in that writes a results.json, since the service treats a grading as a black box)."""
    program = list(settings.grade_command) or [sys.executable, "-m", "grader", "grade"]
    cmd = [*program, "--out", str(out), "--quiet", "--rubric", str(settings.rubric)]
    cmd += ["--citations-from", str(citations_from)] if citations_from is not None else []
    cmd += ["--no-gpu", "--no-gpu-because", SERVICE_WITHOUT_GPU] if settings.no_gpu else []
    cmd += ["--device", str(device_file)] if device_file is not None and not settings.no_gpu else []
    cmd += ["--gpu-lock", str(gpu_lock)] if gpu_lock is not None and not settings.no_gpu else []
    cmd += ["--stages", ",".join(settings.stages)] if settings.stages else []
    cmd += ["--student", student] if student else []  # the occupancy variants' seed (rubric occupancy.variants)
    return cmd + ["--", str(archive)]


def stored_self_check(store: JobStore, job: Job, folder: Path) -> Path | None:
    """The grading.json of a GPU-graded self-check of the same files and grading key (perhaps on
    another of the service's GPUs), written into ``folder``: a report's values are compared with it
    when it ran on the GPU the report names and this grading does not (grader/writeup/run.py).
    None when there is none or it cannot be read back (then only this grading's GPU counts)."""
    source = store.find_done(job.archive_sha, job.key, Kind.SELFCHECK)
    if source is None or source.id == job.id or source.without_gpu:
        return None
    blob = store.results(source.id)
    data = results.member(blob, "grading.json") if blob is not None else None
    if not data:
        return None
    try:
        Grading.from_json(json.loads(data))
    except (ValueError, GradingFormatError) as exc:  # another grader version's: said, and not used
        log.info("job %s: self-check %s's grading.json is not used (%s)", job.id[:8], source.id[:8], exc)
        return None
    path = folder / "citations-from.json"
    path.write_bytes(data)
    return path


class NameTaken(Exception):
    """Another live worker holds this worker's name (the message says which and what to do)."""


class Worker:
    def __init__(self, settings: Settings, store: JobStore, queue: JobQueue, name: str, gpu: str | None,
                 gpu_lock: Path | None = None):
        self.settings, self.store, self.queue, self.name, self.gpu = settings, store, queue, name, gpu
        self.gpu_lock = gpu_lock  # the GPU's lock file, shared with the other workers on this GPU
        self.pid = os.getpid()
        self.key = settings.grading_key()
        self.stopping = threading.Event()
        self.work = settings.data / "work" / name
        self._job_started: float | None = None
        self.device_file: Path | None = None  # the GPU's description, probed once (describe_gpu)

    def info(self, state: str) -> WorkerInfo:
        return WorkerInfo(self.name, self.gpu, state, time.time(), self._job_started, self.pid, socket.gethostname(),
                          boot_id())

    def register(self, state: str) -> None:
        self.store.put_worker(self.info(state))

    def claim_name(self) -> str | None:
        """Take this worker's name in the store, atomically; a sentence saying why not when another live
        worker holds it. Two workers of one name would each take the other's running job for a dead
        predecessor's (:func:`reap`) and grade jobs twice. The name is free when its holder ran on this
        boot of this host and its process is gone (this worker's predecessor), or stopped renewing its
        record for a lease."""
        me, now = self.info("idle"), time.time()

        def replaceable(holder: WorkerInfo) -> bool:
            if holder.boot == me.boot and holder.pid == self.pid:
                return True
            if holder.boot == me.boot and holder.boot and not pid_alive(holder.pid):
                return True
            return now - holder.last_seen > self.settings.lease_s

        holder = self.store.claim_name(me, replaceable)
        if holder is None:
            return None
        return (f"the worker name {self.name!r} is taken by a live worker (process {holder.pid} on {holder.host or '?'}, "
                f"seen {max(now - holder.last_seen, 0.0):.0f} s ago): two workers of one name would take each other's "
                "jobs; start this one with another --name (or give the hosts different host names)")

    def run(self) -> None:
        """Take jobs until SIGTERM or SIGINT."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stopping.set())
        log.info("worker %s started (%s)", self.name, f"GPU {self.gpu}" if self.gpu is not None else "static")
        self.work.mkdir(parents=True, exist_ok=True)  # its own: its GPU's description, its gradings
        next_reap = 0.0
        claimed = False
        try:
            if self.gpu is not None and not self.settings.no_gpu:
                with holding(self.gpu_lock):  # another worker on this GPU may be timing a kernel meanwhile
                    self.device_file = self.describe_gpu()
            taken = self.claim_name()  # after the probe: nothing is registered while the GPU's lock is awaited
            if taken is not None:
                log.error("worker %s refuses to start: %s", self.name, taken)
                raise NameTaken(taken)
            claimed = True
            while not self.stopping.is_set():
                if time.monotonic() >= next_reap:
                    reap_zombies(())  # what a grading's children left exited here, should any outlive kill_strays
                    self._safely(lambda: reap(self.store, self.queue, self.settings, self.name))
                    self._safely(lambda: self.register("idle"))
                    next_reap = time.monotonic() + self.settings.lease_s / 4
                took = False
                try:
                    took = self.queue.take(self.handle)
                except Exception as exc:  # the queue's server went away: wait and try again
                    log.warning("worker %s: queue error: %s", self.name, exc)
                    self.stopping.wait(2.0)
                if not took and not self.queue.blocking:
                    self.stopping.wait(self.settings.queue_poll_s)
        finally:
            if claimed:  # never another worker's record
                self._safely(lambda: self.store.drop_worker(self.name))
            log.info("worker %s stopped", self.name)

    def describe_gpu(self) -> Path | None:
        """Probe this worker's GPU once and keep its description for every grading (None: each
        grading probes for itself; the log says why)."""
        path = self.work / "device.json"
        problem = describe_into(path, PROBE_TIMEOUT_S)
        if problem:
            log.warning("worker %s: its GPU's probe failed (%s); each grading probes it itself", self.name, problem)
            return None
        return path

    def _safely(self, fn) -> None:
        try:
            fn()
        except Exception as exc:  # the store's server went away: the next round tries again
            log.warning("worker %s: %s: %s", self.name, type(exc).__name__, exc)

    def handle(self, job_id: str) -> None:
        """One dispatched job id. A store error leaves the job to the reaper: still queued (dispatched
        again), or running under a lease that runs out (queued again)."""
        try:
            self._handle(job_id)
        except Exception as exc:
            log.warning("job %s: worker %s: %s: %s", job_id[:8], self.name, type(exc).__name__, exc)

    def _handle(self, job_id: str) -> None:
        job = self.store.claim(job_id, self.name, self.pid, self.settings.lease_s)
        if job is None:
            return  # running elsewhere or finished: a duplicate dispatch
        self._job_started = time.time()
        self._safely(lambda: self.register("grading"))
        log.info("job %s started on %s (%s, attempt %d)", job.id[:8], self.name, job.kind.value, job.attempts)
        try:
            self._grade(job)
        finally:
            self._job_started = None
            self._safely(lambda: self.register("idle"))

    def _finish(self, job: Job, **outcome) -> None:
        done = self.store.finish(job.id, self.name, self.pid, **outcome)
        if done is None:
            log.warning("job %s: worker %s no longer holds it; its outcome was dropped", job.id[:8], self.name)
        elif done.state is State.DONE:
            log.info("job %s done in %.1f s: %s of %s%s", job.id[:8], done.grade_s or 0.0, done.score,
                     done.max_score, f" (results of {done.copied_from[:8]})" if done.copied_from else "")
        else:
            log.info("job %s failed after %.1f s: %s", job.id[:8], done.grade_s or 0.0, done.error)

    def _grade(self, job: Job) -> None:
        if job.key != self.key:
            self._finish(job, results=None, state=State.FAILED, graded=False, error=(
                f"worker {self.name} grades with a different rubric, mode or stages than the service that "
                "queued this job; every host must run the same settings"))
            return
        source = None if job.force else self.store.find_done(job.archive_sha, job.key, job.kind)
        if source is not None and source.id != job.id and not stale_without_gpu(source, self.settings):
            blob = self.store.results(source.id)
            if blob is not None:
                self._finish(job, results=blob, state=State.DONE, graded=False, score=source.score,
                             max_score=source.max_score, files=source.files, leaderboard=source.leaderboard,
                             grade_s=0.0, copied_from=source.id, without_gpu=source.without_gpu)
                return
        archive = self.store.archive(job.id)
        if archive is None:
            self._finish(job, results=None, state=State.FAILED, graded=False,
                         error="the job's archive is missing from the store")
            return
        folder = self.work / f"{job.id}-{job.attempts}"
        remove_tree(folder, ignore_errors=True)  # any depth: a grading's folder is the student's to fill
        folder.mkdir(parents=True)
        try:
            self._grade_in(job, archive, folder)
        finally:
            remove_tree(folder, ignore_errors=True)

    def _grade_in(self, job: Job, archive: bytes, folder: Path) -> None:
        (folder / "submission.zip").write_bytes(archive)
        out = folder / "out"
        s = self.settings
        # A student's token job is drawn for ``token:<its hash's prefix>`` (what `grader variant --token` prints).
        student = job.owner if job.owner.startswith("token:") else None
        cmd = grade_command(s, folder / "submission.zip", out, self.device_file, self.gpu_lock,
                            stored_self_check(self.store, job, folder), student=student)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = str(IMPORT_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")

        lost = threading.Event()
        beating = threading.Event()

        def beat() -> None:
            while not beating.wait(s.lease_s / 4):
                try:
                    if not self.store.heartbeat(job.id, self.name, self.pid, s.lease_s):
                        lost.set()
                        return
                    self.register("grading")
                except Exception as exc:  # keep trying until the lease really runs out
                    log.warning("job %s: heartbeat failed: %s", job.id[:8], exc)

        thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
        thread.start()
        try:
            outcome = child.run(cmd, log=folder / "log.txt", timeout_s=s.grade_timeout_s, env=env,
                                should_stop=lambda: lost.is_set() or self.stopping.is_set(), keep=())
        finally:
            beating.set()
            thread.join()
        if lost.is_set():
            log.warning("job %s: worker %s lost its lease and stopped grading", job.id[:8], self.name)
            return
        if outcome.stopped:  # shutting down: someone else grades it, and it was not an attempt
            if self.store.requeue(job.id, self.name, pid=self.pid, count_attempt=False) is not None:
                self.queue.dispatch(job)
                log.info("job %s requeued: worker %s is stopping", job.id[:8], self.name)
            return
        packed = results.collect(out, outcome, s.grade_timeout_s)
        self._finish(job, results=packed.blob, state=packed.state, graded=True, error=packed.error,
                     score=packed.score, max_score=packed.max_score, files=packed.files,
                     leaderboard=packed.leaderboard, grade_s=round(outcome.wall_s, 2),
                     without_gpu=packed.without_gpu)
