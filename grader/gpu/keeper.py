"""A CUDA context kept open on each GPU while gradings come and go on it (a batch, a service worker).

Every grading starts its own CUDA processes (up to 16 for a full submission: stage runs, racecheck,
the checker, ncu's child, occupancy), and between two gradings a GPU may have none at all. Measured on
an H200 pair with persistence mode on (tools/context_cost.py; docs/measurements/
2026-11-30-h200-kept-context-run26-31.md), a fresh process made its context and 64 MiB in 0.307 s
(median of 10) with nothing else on its GPU and in 0.166 s while another process held a context
there; with the other GPU's processes starting in a loop, 0.464 s against 0.204 s. A one-GPU batch of
24 took 161.8 s with a context kept against 171.0 s without (the same machine, the same grades);
a two-GPU batch gained nothing (103.8 s against 103.1 s).

So a batch keeps one context open per GPU for its whole run (grader/deploy/batch/run.py), and a
service worker for its life (grader/serve/worker.py). The keeper is the grader's own child
(grader/children/keep.py): the driver, one context, idle (no kernel; the context's own memory, about
0.5 GiB), then it reads its stdin until the pipe closes. :meth:`Keeper.close` closes the pipe and
kills the keeper's process group if it has not ended within :data:`CLOSE_WAIT_S`; if the process
that started it dies, the pipe closes with it, so no keeper outlives its batch or worker. A keeper
that cannot start is not an error: the gradings run as they would without one, and the caller notes why.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grader.children.keep import READY
from grader.children.protocol import KEEP, KeepSpec
from grader.records import to_jsonable
from grader.sandbox.launch import child_command, child_env, read_result

CLOSE_WAIT_S = 10.0
START_TIMEOUT_S = 60.0  # a service worker's wait for its keeper's context (a batch waits the rubric's probe_s)
_LINE_LIMIT = 4096  # bytes read while waiting for READY (the child prints one short line)


@dataclass
class Keeper:
    """One keeper child. ``proc`` is None once closed, or when it never got ready (``problem`` says why)."""

    gpu: str | None
    proc: subprocess.Popen | None
    problem: str = ""

    @property
    def kept(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self, grace_s: float = CLOSE_WAIT_S) -> None:
        """End the keeper: close its stdin, then kill its process group if it has not ended within
        ``grace_s``."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def _first_line(proc: subprocess.Popen, timeout_s: float) -> str | None:
    """The child's first stdout line (stripped), "" when stdout closed first, None after ``timeout_s``."""
    assert proc.stdout is not None
    fd, got, deadline = proc.stdout.fileno(), b"", time.monotonic() + timeout_s
    while b"\n" not in got and len(got) < _LINE_LIMIT:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, _LINE_LIMIT - len(got))
        if not chunk:
            break
        got += chunk
    return got.split(b"\n", 1)[0].decode(errors="replace").strip()


def start_keeper(work: Path, timeout_s: float, gpu: str | None = None,
                 extra_env: dict[str, str] | None = None) -> Keeper:
    """Start a keeper in ``work`` on the GPU the environment shows (``extra_env``: a batch's
    ``CUDA_VISIBLE_DEVICES``) and wait up to ``timeout_s`` for its context. Never raises."""
    work = Path(work).resolve()
    spec, result = work / "keep_spec.json", work / "keep_result.json"
    try:
        work.mkdir(parents=True, exist_ok=True)
        result.unlink(missing_ok=True)
        spec.write_text(json.dumps(to_jsonable(KeepSpec())))
        env = {**child_env(work / "cupy-cache"), **(extra_env or {})}
        with open(work / "keep_stderr.txt", "wb") as err:
            proc = subprocess.Popen(child_command(KEEP.name, spec, result), cwd=work, env=env, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    except OSError as exc:
        return Keeper(gpu, None, f"the keeper could not start: {exc}")
    keeper = Keeper(gpu, proc)
    line = _first_line(proc, timeout_s)
    if line == READY:
        return keeper
    keeper.close(grace_s=0.0 if line is None else 2.0)
    said, _why = read_result(result, KEEP.result)
    if said is not None and said.reason:
        keeper.problem = said.reason[:300]
    elif line is None:
        keeper.problem = f"the keeper had no context after {timeout_s:g} s"
    else:
        tail = _tail(work / "keep_stderr.txt")
        keeper.problem = f"the keeper ended (exit {proc.returncode}){': ' + tail if tail else ''}"
    return keeper


def _tail(path: Path, nbytes: int = 300) -> str:
    """The last ``nbytes`` of a file, stripped ("" when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - nbytes))
            return fh.read().decode(errors="replace").strip()
    except OSError:
        return ""


def keep_gpus(gpus: list[str], timeout_s: float, folder_of: Callable[[str], Path],
              env_of: Callable[[str], dict[str, str]]) -> dict[str, Keeper]:
    """A keeper per GPU, started side by side, each in ``folder_of(gpu)`` and pinned there by ``env_of(gpu)``."""
    if not gpus:
        return {}
    with ThreadPoolExecutor(max_workers=len(gpus), thread_name_prefix="keeper") as pool:
        return dict(zip(gpus, pool.map(lambda g: start_keeper(folder_of(g), timeout_s, g, env_of(g)), gpus)))
