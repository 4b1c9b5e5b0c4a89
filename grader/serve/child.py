"""The grading child of a worker: ``python -m grader grade`` that dies with its worker.

A worker that is killed (SIGKILL, OOM) must leave no grading behind: it would hold the GPU while
the job's next attempt grades on it. The child is started through this module's ``main``, which
asks the kernel to SIGKILL it when its parent dies (``prctl(PR_SET_PDEATHSIG)``, through ctypes)
and then execs the grader (the setting survives exec). A wrapper rather than ``preexec_fn``, which
is unsafe in a process with threads (the worker's heartbeat).

A time limit or a shutdown stops the grading's whole tree (grader/sandbox/process.py: kill_tree): the
grader starts its tools and its students' steps in sessions of their own, so its process group is
not enough, and the grader, a child subreaper (grader/__main__.py), keeps even a daemon that left
its session inside that tree. The tree is frozen, killed and waited for before ``run`` returns, so
when a job is marked stopped nothing of its grading runs. A grading that died abruptly (the OOM
killer) leaves its orphans to the worker, itself a subreaper: ``keep`` names the worker's own
children, and every other child it has after a grading is killed too. A worker killed outright leaves
its grading's orphans to the service, a subreaper as well, whose supervisor kills them within a
second (grader/serve/supervisor.py). The sandboxed processes run in
bwrap with ``--die-with-parent`` (grader/sandbox/fence.py) besides, so they end with the grading even
where this process may not signal them.

    python -m grader.serve.child PARENT_PID -- COMMAND...
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from grader.sandbox.process import children_of, kill_tree, zombie_children

PR_SET_PDEATHSIG = 1
LOG_TAIL = 4000


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies; exit now if the parent is already gone."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m grader.serve.child PARENT_PID -- COMMAND...", file=sys.stderr)
        return 2
    die_with_parent(int(args[0]))
    os.execvp(args[2], args[2:])
    return 127  # pragma: no cover - execvp does not return


@dataclass
class ChildOutcome:
    returncode: int | None
    wall_s: float
    timed_out: bool = False
    stopped: bool = False  # ended by ``should_stop`` (a lost lease or the worker's shutdown)
    log_tail: str = ""


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: subprocess.Popen) -> None:
    """Kill the grading and everything it started, then reap it."""
    kill_tree(proc.pid)
    _kill_group(proc.pid)
    proc.wait()


def reap_zombies(keep: Collection[int]) -> int:
    """Reap this process's exited children not in ``keep`` (whose Popen waits for them itself): a
    subreaper inherits them from every grading (a sandboxed step's exited processes, reparented when
    the grading ends)."""
    reaped = 0
    for pid in zombie_children(os.getpid()):
        if pid in keep:
            continue
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                reaped += 1
        except ChildProcessError:
            pass
    return reaped


def kill_strays(keep: Collection[int]) -> list[int]:
    """Kill (tree and all) and reap every child of this process not in ``keep``: the orphans a
    grading left to this subreaper when it died abruptly, and the exited ones it left (zombies).
    Returns the pids of the live ones killed."""
    strays = [pid for pid in children_of(os.getpid()) if pid not in keep]
    for pid in strays:
        kill_tree(pid)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    reap_zombies(keep)
    return strays


def run(command: list[str], *, log: Path, timeout_s: float, env: Mapping[str, str],
        should_stop: Callable[[], bool], cwd: str | None = None, poll_s: float = 0.5,
        keep: Collection[int] | None = None) -> ChildOutcome:
    """Run ``command`` to its end, its time limit, or until ``should_stop()``; its output goes to ``log``.
    ``keep``: this process's own children; given, every other child it has afterwards is killed
    (:func:`kill_strays`; only for a process whose children are all known, the worker)."""
    start = time.monotonic()
    wrapped = [sys.executable, "-m", "grader.serve.child", str(os.getpid()), "--", *command]
    with open(log, "wb") as out:
        try:
            proc = subprocess.Popen(wrapped, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=dict(env), cwd=cwd, start_new_session=True, close_fds=True)
        except OSError as exc:
            return ChildOutcome(None, 0.0, log_tail=f"could not start the grader: {exc}")
        timed_out = stopped = False
        try:
            while True:
                try:
                    proc.wait(timeout=poll_s)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if time.monotonic() - start > timeout_s:
                    timed_out = True
                elif should_stop():
                    stopped = True
                else:
                    continue
                _stop(proc)
                break
        finally:
            if proc.poll() is None:  # an exception in this loop: never leave the grading behind
                _stop(proc)
    _kill_group(proc.pid)  # whatever of its group outlived it
    if keep is not None:
        kill_strays(keep)
    tail = log.read_bytes()[-LOG_TAIL:].decode("utf-8", "replace") if log.exists() else ""
    return ChildOutcome(proc.returncode, time.monotonic() - start, timed_out, stopped, tail)


if __name__ == "__main__":
    sys.exit(main())
