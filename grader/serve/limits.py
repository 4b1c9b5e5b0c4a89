"""Limits on what one student token may ask of the GPUs: archive size, submissions per hour, jobs at once.

A refusal that comes after the service spent work on the request (its body read, in part or whole:
too slow, too large, cut off, not a zip, a wrong signed sha256) is *charged*: it counts against the
token's submissions per hour as a failed job (grader/serve/app.py), so a student cannot make the
service read and parse bodies for ever at no cost. A refusal decided from the headers alone (a
limit, a full service) is not.

Each refusal is a :class:`Refusal`: the HTTP status, a sentence that says what the limit is and when
to try again, and for 429 the ``Retry-After`` seconds. The archive's size is checked against
Content-Length before any byte is read (:func:`check_length`), and the read itself stops at the
limit (a chunked upload has no Content-Length; grader/serve/upload.py).
"""
from __future__ import annotations

import datetime as dt
import math

from grader.serve.settings import Limits
from grader.serve.store import Job, State
from grader.serve.views import about


class Refusal(Exception):
    """``close``: the body was not read to its end, so the connection is closed after the answer
    (else a slow client would hold it while it sends what nobody reads)."""

    def __init__(self, status: int, message: str, retry_after: int | None = None, close: bool = False,
                 charged: bool = False):
        super().__init__(message)
        self.status, self.message, self.retry_after, self.close = status, message, retry_after, close
        self.charged = charged  # the body was read (the service spent work on it): it counts against the token


def charged(refusal: Refusal) -> Refusal:
    refusal.charged = True
    return refusal


DISK_FULL = ("the service has no room left to store uploads, so nothing was stored; try again later, and tell "
             "the course staff if it lasts")


def _mib(n: float) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"


def too_large(limit: int, size: int | None = None) -> Refusal:
    got = f" ({_mib(size)})" if size is not None else ""
    return Refusal(413, f"the archive is too large{got}: at most {_mib(limit)}; leave out build outputs, "
                        "data files and profiler reports", close=True)


def check_length(content_length: str | None, limit: int) -> None:
    """Refuse a declared Content-Length over ``limit`` (or not a number) before any byte is read."""
    if content_length is not None:
        if not content_length.strip().isdigit():
            raise Refusal(400, f"Content-Length {content_length[:40]!r} is not a number of bytes")
        if int(content_length) > limit:
            raise too_large(limit, int(content_length))


def check_token(jobs: list[Job], limits: Limits, now: float, wait_s: float) -> None:
    """Refuse (429) when ``jobs`` (the token's jobs: the last hour's and all active ones) use up a
    limit; ``wait_s`` is the expected time until an active job finishes."""
    active = [j for j in jobs if j.state in (State.QUEUED, State.RUNNING)]
    if len(active) >= limits.concurrent_jobs:
        n = len(active)
        raise Refusal(429, f"you already have {n} job{'s' if n != 1 else ''} queued or running, and at most "
                           f"{limits.concurrent_jobs} at a time are allowed; try again when it has finished "
                           f"(in {about(wait_s)}, as the job page says)", retry_after=max(int(math.ceil(wait_s)), 1))
    window = sorted(j.created for j in jobs if j.created > now - 3600)
    if len(window) >= limits.submissions_per_hour:
        # The oldest submission that must leave the hour's window before another fits.
        free_at = window[len(window) - limits.submissions_per_hour] + 3600
        at = dt.datetime.fromtimestamp(free_at, dt.timezone.utc).strftime("%H:%M:%S UTC")
        per = limits.submissions_per_hour
        raise Refusal(429, f"at most {per} submission{'s' if per != 1 else ''} per hour; "
                           f"the next one is accepted in {about(free_at - now)} (at {at})",
                      retry_after=max(int(math.ceil(free_at - now)), 1))
