"""HMAC request signing between the Gradescope package (grader/serve/bridge.py) and the service.

A request carries three headers:

    X-Grader-Assignment: <name>                which per-assignment secret signs it
    X-Grader-Timestamp:  <unix seconds>         bounds replay to ``skew_s`` either side
    X-Grader-Signature:  sha256=<hex>           HMAC-SHA256(secret, "<ts>\\n<METHOD>\\n<path>\\n<sha256hex(body)>")

The body enters through its sha256, so the signature binds the archive without the secret touching
the whole upload twice; the path binds the endpoint (no query string: ``?force=1`` is not signed,
it only asks for more work, never for someone else's data).

A secret is a line of text (``python -m grader serve secret`` writes ``secrets.token_urlsafe(32)``);
the HMAC key is that text, stripped, as UTF-8: :func:`secret_from_text` / :func:`read_secret`.
"""
from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from pathlib import Path

ASSIGNMENT_HEADER = "X-Grader-Assignment"
TIMESTAMP_HEADER = "X-Grader-Timestamp"
SIGNATURE_HEADER = "X-Grader-Signature"
SUBMISSION_ID_HEADER = "X-Grader-Submission-Id"
PREFIX = "sha256="
DEFAULT_SKEW_S = 300


def secret_from_text(text: str) -> bytes:
    """The HMAC key a secret file's text stands for (surrounding whitespace and newline dropped)."""
    return text.strip().encode("utf-8")


def read_secret(path: str | Path) -> bytes:
    """The HMAC key in a secret file; ValueError when the file holds no secret."""
    key = secret_from_text(Path(path).read_text(encoding="utf-8"))
    if not key:
        raise ValueError(f"{path} is empty: it should hold the secret printed by `python -m grader serve secret`")
    return key


def _message(method: str, path: str, body: bytes, timestamp: int) -> bytes:
    digest = hashlib.sha256(body).hexdigest()
    return f"{timestamp}\n{method.upper()}\n{path}\n{digest}".encode()


def signature(secret: bytes, method: str, path: str, body: bytes, timestamp: int) -> str:
    """The hex HMAC of one request (without the ``sha256=`` prefix)."""
    return hmac.new(secret, _message(method, path, body, timestamp), hashlib.sha256).hexdigest()


def sign(secret: bytes, method: str, path: str, body: bytes, timestamp: int | None = None) -> dict[str, str]:
    """The timestamp and signature headers for one request (add ``X-Grader-Assignment`` yourself)."""
    ts = int(time.time()) if timestamp is None else int(timestamp)
    return {TIMESTAMP_HEADER: str(ts), SIGNATURE_HEADER: PREFIX + signature(secret, method, path, body, ts)}


def _get(headers: Mapping[str, str], name: str) -> str | None:
    """Case-insensitive header lookup (Starlette's headers are, a plain dict is not)."""
    value = headers.get(name)
    if value is not None:
        return value
    lower = name.lower()
    for key, val in headers.items():
        if key.lower() == lower:
            return val
    return None


def verify(secret: bytes, method: str, path: str, body: bytes, headers: Mapping[str, str],
           now: float | None = None, skew_s: int = DEFAULT_SKEW_S) -> str | None:
    """None when the request is signed by ``secret`` within ``skew_s`` of ``now``; else why not, in words."""
    ts_text = _get(headers, TIMESTAMP_HEADER)
    sig_text = _get(headers, SIGNATURE_HEADER)
    if not ts_text:
        return f"the {TIMESTAMP_HEADER} header is missing"
    if not sig_text:
        return f"the {SIGNATURE_HEADER} header is missing"
    try:
        ts = int(ts_text.strip())
    except ValueError:
        return f"{TIMESTAMP_HEADER} {ts_text[:40]!r} is not a whole number of unix seconds"
    now = time.time() if now is None else now
    age = int(now) - ts
    if age > skew_s:
        return f"timestamp {age} s old; at most {skew_s} s allowed (is the sender's clock right?)"
    if -age > skew_s:
        return f"timestamp {-age} s in the future; at most {skew_s} s allowed (is the sender's clock right?)"
    sig_text = sig_text.strip()
    if not sig_text.startswith(PREFIX):
        return f"{SIGNATURE_HEADER} must start with {PREFIX!r}"
    expected = signature(secret, method, path, body, ts)
    if not hmac.compare_digest(sig_text[len(PREFIX):].lower().encode(), expected.encode()):
        return "signature does not match (wrong secret for this assignment, or the request was altered)"
    return None
