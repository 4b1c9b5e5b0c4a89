"""The GPU lock taken first come, first served (grader/sandbox/lock.py: held_in_turn), between real
processes: flock alone lets a grading wait while later ones take turns (grader/sandbox/lock.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from grader.sandbox.lock import held, held_in_turn, queue_of, queued

ROOT = Path(__file__).resolve().parent.parent
# argv: lock, log, name, seconds to hold: waits its turn, writes its name, holds, leaves.
WAITER = """import sys, time
from pathlib import Path
from grader.sandbox.lock import held_in_turn
lock, log, name, hold = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], float(sys.argv[4])
with held_in_turn(lock):
    with open(log, "a") as f:
        f.write(name + "\\n")
    time.sleep(hold)
"""


def _start(lock: Path, log: Path, name: str, hold: float = 0.05) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WAITER, str(lock), str(log), name, str(hold)], cwd=ROOT)


def _queued(lock: Path, n: int, timeout_s: float = 60.0) -> None:
    """Wait until ``n`` waiters are in the lock's queue (a Python start took seconds on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(queued(queue_of(lock))) >= n:
            return
        time.sleep(0.01)
    raise AssertionError(f"fewer than {n} waiters queued for {lock}")


def test_waiters_take_the_lock_in_the_order_they_came(tmp_path):
    lock, log = tmp_path / "gpu0.lock", tmp_path / "log.txt"
    procs = []
    with held_in_turn(lock):  # the current holder; the others queue behind it
        for k in range(5):
            procs.append(_start(lock, log, f"w{k}"))
            _queued(lock, k + 1)
    for p in procs:
        assert p.wait(timeout=60) == 0
    assert log.read_text().split() == [f"w{k}" for k in range(5)]
    assert [e for e in os.listdir(queue_of(lock)) if not e.startswith(".")] == []


def test_a_waiter_that_died_in_the_queue_holds_nobody_up(tmp_path):
    lock, log = tmp_path / "gpu0.lock", tmp_path / "log.txt"
    with held_in_turn(lock):
        dead = _start(lock, log, "dead")
        _queued(lock, 1)
        alive = _start(lock, log, "alive")
        _queued(lock, 2)
        dead.send_signal(signal.SIGKILL)
        dead.wait(timeout=10)
    assert alive.wait(timeout=30) == 0
    assert log.read_text().split() == ["alive"]
    assert [e for e in os.listdir(queue_of(lock)) if not e.startswith(".")] == []


def test_the_lock_still_excludes_one_taken_without_the_queue(tmp_path):
    lock, log = tmp_path / "gpu0.lock", tmp_path / "log.txt"
    with held(lock):
        waiter = _start(lock, log, "queued")
        _queued(lock, 1)
        time.sleep(0.5)  # first in its queue, but the lock is held
        assert not log.exists() and waiter.poll() is None
    assert waiter.wait(timeout=30) == 0 and log.read_text().split() == ["queued"]


def test_a_link_to_the_lock_queues_in_the_same_place(tmp_path):
    lock, log = tmp_path / "real" / "gpu.lock", tmp_path / "log.txt"
    link = tmp_path / "other" / "gpu0.lock"
    lock.parent.mkdir()
    link.parent.mkdir()
    lock.touch()
    link.symlink_to(lock)
    assert queue_of(link) == queue_of(lock)
    with held_in_turn(lock):
        first = _start(link, log, "by-link")
        _queued(lock, 1)
        second = _start(lock, log, "by-file")
        _queued(lock, 2)
    assert first.wait(timeout=30) == 0 and second.wait(timeout=30) == 0
    assert log.read_text().split() == ["by-link", "by-file"]
