"""One lock file held exclusively: the GPU's lock (a grading's GPU steps, a service worker's probe) and
the warm CuPy cache's (grader/gpu/warm.py) are the same flock on a file, taken here.

:func:`held` takes the flock as the kernel grants it: not in the order the waiters came. For the GPU's
lock that lets a grading wait while others that came later take turns (docs/measurements/2026-12-01-h200-speed-round5.md),
and a service's queued jobs may be graded in any order. :func:`held_in_turn` queues first: each waiter leaves an entry in ``<lock>.queue/``, named
by when it came and flocked while it waits, and takes the lock only when its entry is the oldest
whose owner is alive (an entry whose flock anyone may take is a dead waiter's, and is removed). A
process that takes the lock with :func:`held` still excludes the others; it only skips the queue.
"""
from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

QUEUE_POLL_S = 0.01  # how often a waiter looks whether its entry is the oldest


@contextmanager
def held(lock: Path) -> Iterator[None]:
    """Hold ``lock`` (made, with its folder, if missing) with an exclusive flock until the block ends;
    the kernel releases it if this process dies meanwhile."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def queue_of(lock: Path) -> Path:
    """The waiters' folder of ``lock``: beside the file itself, so that every path to one lock file (a
    symbolic link to it among them) queues in one place."""
    real = lock.resolve()
    return real.with_name(real.name + ".queue")


@contextmanager
def held_in_turn(lock: Path) -> Iterator[None]:
    """Hold ``lock`` as :func:`held` does, after every waiter that came before this one (first come,
    first served among the callers of this function)."""
    queue = queue_of(lock)
    queue.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = f"{time.time_ns():020d}-{os.getpid()}-{threading.get_ident()}"
    tmp, entry = queue / f".{name}", queue / name
    with open(tmp, "a+b") as mine:
        try:
            fcntl.flock(mine, fcntl.LOCK_EX)  # taken before the entry shows: a listed entry is never unlocked
            os.rename(tmp, entry)
            while not _oldest(queue, entry):
                time.sleep(QUEUE_POLL_S)
            with held(lock):
                entry.unlink(missing_ok=True)  # the next waiter now blocks on the lock itself
                yield
        finally:
            tmp.unlink(missing_ok=True)
            entry.unlink(missing_ok=True)


def queued(queue: Path) -> list[str]:
    """The names of the waiters' entries in ``queue`` (a lock's :func:`queue_of`), oldest first, dead
    waiters' included; none when there is no queue. An entry being made (``.`` first) is not one yet."""
    try:
        return sorted(n for n in os.listdir(queue) if not n.startswith("."))
    except OSError:
        return []


def _oldest(queue: Path, entry: Path) -> bool:
    """Whether ``entry`` is the oldest live entry of ``queue``; dead waiters' entries are removed. No queue
    to wait in: True, so the lock is taken as held() would."""
    for name in queued(queue):
        if name == entry.name:
            return True
        if _alive(queue / name):
            return False
    return True


def _alive(path: Path) -> bool:
    """Whether the waiter of an entry is alive (it holds the entry's flock); a dead one's is removed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False  # gone meanwhile: its waiter took the lock or left
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also gives back a flock taken above
    try:
        path.unlink()
    except OSError:
        pass
    return False
