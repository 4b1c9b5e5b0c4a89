"""A child's pipes, read within bounds (the reading side of grader.sandbox.process).

* :class:`Capture` keeps the first and last ``limit // 2`` bytes of one stream and counts all of it.
* :class:`OutputCap` watches both streams' total against a cap and, the moment it is passed, wakes
  the loop waiting for the child (a pipe it selects on with the child's exit), which then kills the
  child's session: a flood is stopped as it happens, not trimmed afterwards.
* :func:`read_stream` / :func:`write_stdin` are the threads' bodies; they poll a stop flag, so a
  descendant that escaped the session and still holds a pipe cannot keep the caller waiting.
"""
from __future__ import annotations

import os
import selectors
import threading
from collections.abc import Callable

# How often the I/O threads look at their stop flag.
_POLL_S = 0.05
_CHUNK = 64 * 1024


class Capture:
    """Keep the first and last ``half`` bytes of a stream and count all of it; a ``sink`` also gets
    every chunk, in order (a caller that must read all of a long output, streaming)."""

    def __init__(self, limit: int, sink: Callable[[bytes], None] | None = None):
        self.half = max(0, int(limit)) // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.sink = sink

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if self.sink is not None:
            self.sink(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.half > 0:
            self.tail += data
            excess = len(self.tail) - self.half
            if excess > 0:
                del self.tail[:excess]

    def text(self) -> str:
        trimmed = self.total - len(self.head) - len(self.tail)
        head = _decode(bytes(self.head))
        if trimmed <= 0:
            return head + _decode(bytes(self.tail))
        return head + f"\n… [{trimmed:,} bytes trimmed] …\n" + _decode(bytes(self.tail))


def _decode(data: bytes) -> str:
    return data.replace(b"\x00", b"").decode("utf-8", errors="replace")


class OutputCap:
    """The total of both streams against ``cap`` bytes (None: no cap). The first reader to see the
    total past the cap sets :attr:`passed` and writes one byte to :attr:`wake_r`'s pipe."""

    def __init__(self, cap: int | None, captures: tuple[Capture, Capture]):
        self.cap, self.captures = cap, captures
        self.passed = threading.Event()
        self._lock = threading.Lock()  # check() against close(): never write to a closed (reused) fd
        self.wake_r, self._wake_w = os.pipe() if cap is not None else (-1, -1)

    @property
    def total(self) -> int:
        return sum(c.total for c in self.captures)

    def check(self) -> None:
        """Called by a reader thread after each chunk it read."""
        if self.cap is None or self.passed.is_set() or self.total <= self.cap:
            return
        with self._lock:
            if self.passed.is_set() or self._wake_w < 0:
                return
            self.passed.set()
            try:
                os.write(self._wake_w, b"!")
            except OSError:
                pass

    def close(self) -> None:
        with self._lock:
            for fd in (self.wake_r, self._wake_w):
                if fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            self.wake_r = self._wake_w = -1


def read_stream(fd: int, cap: Capture, stop: threading.Event, after: Callable[[], None] | None = None) -> None:
    """Read ``fd`` until EOF or until ``stop`` is set; ``after`` runs after each chunk read."""
    try:
        os.set_blocking(fd, False)
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while not stop.is_set():
                if not sel.select(_POLL_S):
                    continue
                try:
                    data = os.read(fd, _CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    return  # EOF: every writer closed the pipe
                cap.feed(data)
                if after is not None:
                    after()
    except OSError:
        return


def write_stdin(fd: int, data: bytes, stop: threading.Event) -> None:
    """Write ``data`` to ``fd`` (the child's stdin), then close it."""
    view = memoryview(data)
    try:
        os.set_blocking(fd, False)
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_WRITE)
            while view and not stop.is_set():
                if not sel.select(_POLL_S):
                    continue
                try:
                    n = os.write(fd, view[:_CHUNK])
                except BlockingIOError:
                    continue
                view = view[n:]
    except OSError:  # BrokenPipeError: the child does not read its stdin
        pass
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
