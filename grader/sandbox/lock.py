"""One lock file held exclusively: the GPU's lock (a grading's GPU steps, a service worker's probe) and
the warm CuPy cache's (grader/gpu/warm.py) are the same flock on a file, taken here."""
from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
