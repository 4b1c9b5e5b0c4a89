"""Resource limits of one sandboxed step, besides the per-step cgroup (grader.sandbox.cgroup).

* rlimits, set in the child before it execs (:func:`preexec`): RLIMIT_FSIZE (one file's size;
  the kernel sends SIGXFSZ), RLIMIT_CORE 0, and, where no cgroup does it, RLIMIT_DATA and, for a
  dedicated student user, RLIMIT_NPROC. RLIMIT_DATA rather than RLIMIT_AS: CUDA reserves tens of
  GiB of address space (PROT_NONE, not counted as data) and maps device memory through
  /dev/nvidia-uvm (shared, not counted either), so RLIMIT_AS breaks every CUDA program while
  RLIMIT_DATA caps what malloc/new/mmap(PRIVATE, writable) can take
  (docs/measurements/2026-11-30-h200-sandbox.md).
* a watchdog (:class:`Watchdog`), polled by grader.sandbox.process while the step runs: the number
  of processes of the step's tree, their resident anonymous memory (where no cgroup caps it),
  and the size of the scratch folder (always: nothing in the kernel caps one folder).
"""
from __future__ import annotations

import math
import os
import resource
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from grader.model import Limit
from grader.sandbox.process import live_stat_fields

# RLIMIT_DATA is per process and counts what a process may take, not what it touched; the
# watchdog stops the step on resident memory. The factor leaves room for allocators that map
# more than they use, so that a step over its memory limit is usually stopped (and named) by the
# watchdog, while no single process can run away faster than the watchdog polls.
DATA_RLIMIT_FACTOR = 2


def preexec(cgroup_procs: str | None, rlimits: Sequence[tuple[int, int]],
            switch: tuple[int, int] | None, nice: int = 0) -> Callable[[], None]:
    """What the child does between fork and exec: join the cgroup (while it still has the
    grader's rights), set its rlimits, lower its priority by ``nice``, then drop to ``switch`` =
    (uid, gid) if given.

    Only system calls on values prepared here: this runs in the forked child of a threaded
    process, where taking a lock another thread held at fork time would hang.
    """
    def child() -> None:
        if cgroup_procs is not None:
            fd = os.open(cgroup_procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")  # cgroup v2: "0" moves the writing process itself
            finally:
                os.close(fd)
        for which, value in rlimits:
            resource.setrlimit(which, (value, value))
        if nice:
            os.nice(nice)
        if switch is not None:
            os.setgroups([])
            os.setgid(switch[1])
            os.setuid(switch[0])

    return child


def rlimits_for(memory_bytes: int, file_bytes: int, processes: int, *, cgroup_memory: bool, cgroup_pids: bool,
                dedicated_user: bool) -> list[tuple[int, int]]:
    limits = [(resource.RLIMIT_FSIZE, int(file_bytes)), (resource.RLIMIT_CORE, 0)]
    if not cgroup_memory:
        limits.append((resource.RLIMIT_DATA, int(memory_bytes) * DATA_RLIMIT_FACTOR))
    # RLIMIT_NPROC counts every process (and thread) of the real uid: only meaningful for a user
    # that runs nothing but students' steps, and never enforced for root.
    if not cgroup_pids and dedicated_user:
        limits.append((resource.RLIMIT_NPROC, int(processes)))
    return limits


# /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN: distribution kernels have it, the test
# machines' Firecracker kernel does not) reads only the step's own tree; else all of /proc is read.
_HAS_CHILDREN_FILES = os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        pass
    return out


# Without those files every watch would read all of /proc on each poll, and a grading watches up
# to ~25 steps at once, each polled every 10 ms in its first second (grader.sandbox.process): one scan
# of the machine's process table is shared by every watch that asks within this long.
PROCESS_TABLE_MAX_AGE_S = 0.008
_table_lock = threading.Lock()
_table: tuple[float, dict[int, list[int]]] = (-math.inf, {})


def _scan_process_table() -> dict[int, list[int]]:
    """{parent pid: [live child pids]} from /proc/*/stat."""
    kids: dict[int, list[int]] = {}
    for pid, fields in live_stat_fields():
        if len(fields) > 1:
            kids.setdefault(int(fields[1]), []).append(pid)
    return kids


def process_table() -> dict[int, list[int]]:
    """The machine's parent -> children map, at most :data:`PROCESS_TABLE_MAX_AGE_S` old (a watch
    that waited for another's scan uses that one)."""
    global _table
    with _table_lock:
        taken, kids = _table
        if time.monotonic() - taken > PROCESS_TABLE_MAX_AGE_S:
            kids = _scan_process_table()
            _table = (time.monotonic(), kids)
        return kids


def _tree(root: int) -> list[int]:
    """``root`` and its live descendants."""
    if _HAS_CHILDREN_FILES:
        children_of: Callable[[int], Sequence[int]] = _children
    else:
        table = process_table()
        children_of = lambda pid: table.get(pid, ())  # noqa: E731
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children_of(pid))
    return out


def _anon_bytes(pid: int) -> int:
    """Resident anonymous + shmem memory of ``pid`` (what a memory hog grows; shared libraries excluded)."""
    total = 0
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith((b"RssAnon:", b"RssShmem:")):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return total


def folder_bytes(folder: Path, stop_at: int) -> int:
    """Disk the folder takes (allocated blocks, at least one 4 KiB block per entry, so that a
    million empty files count too); stops counting once past ``stop_at``."""
    total, todo = 0, [str(folder)]
    while todo and total <= stop_at:
        try:
            with os.scandir(todo.pop()) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += max(st.st_blocks * 512, 4096)
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
        except OSError:
            continue
    return total


class Watchdog:
    """Polled while a step runs; returns the limit the step went past, if any."""

    SCRATCH_EVERY_S = 0.2  # walking a folder costs more than reading /proc: less often

    def __init__(self, *, memory_bytes: int | None, processes: int | None, scratch: Path | None,
                 scratch_bytes: int, scratch_every_s: float | None = None):
        self.memory_bytes, self.processes = memory_bytes, processes
        self.scratch, self.scratch_bytes = scratch, scratch_bytes
        self.scratch_every_s = self.SCRATCH_EVERY_S if scratch_every_s is None else scratch_every_s
        self._next_scratch = 0.0

    def __call__(self, root: int) -> Limit | None:
        if self.memory_bytes is not None or self.processes is not None:
            tree = _tree(root)
            # At the cap, not past it: a kernel limit (pids.max, RLIMIT_NPROC) stops the count there.
            if self.processes is not None and len(tree) >= self.processes:
                return Limit.PROCESSES
            if self.memory_bytes is not None and sum(map(_anon_bytes, tree)) > self.memory_bytes:
                return Limit.MEMORY
        now = time.monotonic()
        if self.scratch is not None and now >= self._next_scratch:
            self._next_scratch = now + self.scratch_every_s
            if folder_bytes(self.scratch, self.scratch_bytes) > self.scratch_bytes:
                return Limit.SCRATCH
        return None
