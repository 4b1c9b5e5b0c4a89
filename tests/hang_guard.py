"""A safety net against a hang, for tests whose claim is that something returns or stops (DEVELOPERS.md:
no test asserts a wall-clock time; a generous timeout against a hang is fine).

``with no_hang(): ...`` raises :class:`Hung` in the test's (main) thread when the block has not ended
after :data:`HANG_S` seconds, far above what any machine needs, so it fails only on a real hang. Where the
claim is "returns instead of waiting for X" (a grandchild holding a pipe), X is made to last far longer
than the net (``sleep 600``), so the net tells the two apart on the busiest machine, with no threshold
tuned to a speed. The evidence of a stop (``timed_out``, the limit's kind) is asserted as it is.
"""
from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

HANG_S = 90.0
FOREVER_S = 600  # what a test's stray process lasts when only a hang would wait for it (well above HANG_S)


class Hung(AssertionError):
    """The block did not end within its safety net."""


@contextmanager
def no_hang(what: str = "the call", seconds: float = HANG_S) -> Iterator[None]:
    def fire(signum, frame):
        raise Hung(f"{what} had not returned after {seconds:g} s: a hang")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
