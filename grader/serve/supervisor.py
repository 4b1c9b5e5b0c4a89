"""The service's worker processes: ``gradings_per_gpu`` per GPU (CUDA_VISIBLE_DEVICES pinned), all
children of ``python -m grader serve``, restarted when one dies, stopped (their jobs re-queued) when it stops.

Several workers on one GPU share its lock file (``grade --gpu-lock``, as a batch's two gradings per
GPU do): one holds the GPU for its GPU steps while another compiles, and two never time kernels on
it at once. A GPU's first worker is ``HOST-gpuI``, its others ``HOST-gpuI.2`` and on. With one worker
per GPU there is no lock: its grading then starts its GPU children before its compiles, which a
lock forbids.

Each worker is ``python -m grader serve worker`` with the service's resolved settings as flags, so
a worker grades exactly as the service keys its jobs. It is started through grader/serve/child.py,
so it dies with the service even when the service is killed outright. The kernel sends that signal
when the *thread* that started the child ends, so one thread starts, restarts and stops them all.

A worker killed outright takes its grading with it (the same signal), but not what the grading
started: those orphans (an nvcc in the weak sandbox, a bwrap not yet bound to its parent) are
reparented to this process, a child subreaper (grader/__main__.py), and would run on with no time
limit, on the GPU the worker's restart grades on. So each second, before any restart, the same thread
kills every child of this process that is not one of its workers (grader/serve/child.py: kill_strays);
the service starts no other process once its workers run.
"""
from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from grader import IMPORT_ROOT
from grader.serve.child import kill_strays
from grader.serve.settings import Settings
from grader.serve.worker import default_name

log = logging.getLogger("grader.serve")
STOP_GRACE_S = 20.0  # a worker stops its grading and re-queues the job in well under this
MAX_BACKOFF_S = 60.0


def worker_command(settings: Settings, name: str, gpu: str | None, gpu_lock: Path | None = None) -> list[str]:
    s = settings
    cmd = [sys.executable, "-m", "grader", "serve", "worker", "--data", str(s.data), "--queue", s.queue,
           "--name", name, "--rubric", str(s.rubric), "--grade-timeout-s", str(s.grade_timeout_s),
           "--lease-s", str(s.lease_s), "--max-attempts", str(s.max_attempts), "--queue-poll-s", str(s.queue_poll_s)]
    cmd += ["--no-gpu"] if gpu is None else ["--gpu", gpu]
    cmd += ["--gpu-lock", str(gpu_lock)] if gpu is not None and gpu_lock is not None else []
    cmd += ["--stages", ",".join(s.stages)] if s.stages else []
    cmd += ["--grade-command", shlex.join(s.grade_command)] if s.grade_command else []
    return cmd


@dataclass
class Slot:
    name: str
    gpu: str | None
    gpu_lock: Path | None = None  # shared by every slot of this GPU (None: the GPU's only slot, or static)
    proc: subprocess.Popen | None = None
    started: float = 0.0
    backoff_s: float = 1.0
    restart_at: float = 0.0


def slots(settings: Settings, gpus: list[str | None]) -> list[Slot]:
    """One slot per static worker; ``settings.gradings_per_gpu`` per GPU, sharing its lock when more than one."""
    out: list[Slot] = []
    for i, gpu in enumerate(gpus):
        if gpu is None:
            out.append(Slot(default_name(None, i), None))
            continue
        n = settings.gradings_per_gpu
        lock = settings.gpu_lock(gpu) if n > 1 else None
        out += [Slot(default_name(gpu) + (f".{k + 1}" if k else ""), gpu, lock) for k in range(n)]
    return out


class Supervisor:
    def __init__(self, settings: Settings, gpus: list[str | None]):
        self.settings = settings
        self.slots = slots(settings, gpus)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)

    def _spawn(self, slot: Slot) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # The same grader as this process's, wherever the service was started from.
        env["PYTHONPATH"] = str(IMPORT_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        if slot.gpu is not None:
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the same numbering as nvidia-smi
            env["CUDA_VISIBLE_DEVICES"] = slot.gpu
        cmd = [sys.executable, "-m", "grader.serve.child", str(os.getpid()), "--",
               *worker_command(self.settings, slot.name, slot.gpu, slot.gpu_lock)]
        slot.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
        slot.started = time.monotonic()

    def start(self) -> None:
        self._thread.start()

    def _watch(self) -> None:
        for slot in self.slots:
            self._spawn(slot)
        try:
            self._supervise()
        finally:
            self._terminate()

    def _supervise(self) -> None:
        exited: list[str] = []  # the workers that died since the last sweep
        while not self._stop.wait(1.0):
            self._sweep(exited)
            now = time.monotonic()
            for slot in self.slots:
                if slot.proc is None:
                    if now >= slot.restart_at:
                        self._spawn(slot)
                    continue
                code = slot.proc.poll()
                if code is None:
                    if now - slot.started > 60:
                        slot.backoff_s = 1.0  # it ran a while: the next failure restarts it promptly
                    continue
                slot.proc = None
                exited.append(slot.name)
                slot.restart_at = now + slot.backoff_s
                log.warning("worker %s exited with code %s; restarting it in %.0f s", slot.name, code,
                            slot.backoff_s)
                slot.backoff_s = min(slot.backoff_s * 2, MAX_BACKOFF_S)

    def _sweep(self, exited: list[str]) -> None:
        """Kill what dead workers' gradings left to this subreaper: every child not a live worker."""
        strays = kill_strays({s.proc.pid for s in self.slots if s.proc is not None})
        if strays:
            log.warning("killed %d process(es) left behind by worker %s: pids %s", len(strays),
                        ", ".join(exited) or "(one that died earlier)", " ".join(map(str, strays)))
        exited.clear()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _terminate(self) -> None:
        procs = [s.proc for s in self.slots if s.proc is not None and s.proc.poll() is None]
        for p in procs:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in procs:
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
