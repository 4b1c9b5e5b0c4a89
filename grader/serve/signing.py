"""HMAC request signing between the Gradescope package (grader/serve/bridge.py) and the service.

A request carries three headers:

    X-Grader-Assignment: <name>                which per-assignment secret signs it
    X-Grader-Timestamp:  <unix seconds>         bounds replay to ``skew_s`` either side
    X-Grader-Signature:  sha256=<hex>           HMAC-SHA256(secret, "<ts>\\n<METHOD>\\n<target>\\n<sha256hex(body)>")

The body enters through its sha256, so the signature binds the archive without the secret touching
the whole upload twice; the target is the path with its query string (``/api/v1/jobs?force=1``):
an unsigned ``?force=1`` would let anyone who saw one signed request replay it within the skew as
many new gradings, each ahead of every self-check (:func:`target`).

A fourth header, sent by the Gradescope bridge when Gradescope names the submitter, is signed too
(its value ends the signed text, after another newline; without it the text is as above):

    X-Grader-Submitter:  <hex>                  :func:`submitter_id`: a keyed hash of Gradescope's user ids

so the service can share the queue fairly between students without ever seeing who they are.

The service checks what the headers alone can tell (:func:`check_time`: present, within the skew)
before it reads a byte of the body; the HMAC itself, which binds the body's sha256, after
(:func:`verify_digest`).

A secret is a line of text (``python -m grader serve secret`` writes ``secrets.token_urlsafe(32)``);
the HMAC key is that text, stripped, as UTF-8: :func:`secret_from_text` / :func:`read_secret`.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Mapping
from pathlib import Path

ASSIGNMENT_HEADER = "X-Grader-Assignment"
TIMESTAMP_HEADER = "X-Grader-Timestamp"
SIGNATURE_HEADER = "X-Grader-Signature"
SUBMISSION_ID_HEADER = "X-Grader-Submission-Id"
SUBMITTER_HEADER = "X-Grader-Submitter"
SUBMITTER = re.compile(r"^[0-9a-f]{32}$")
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


def target(path: str, query: str = "") -> str:
    """What a signature binds of the URL: the path, and ``?query`` when there is one (as sent)."""
    return f"{path}?{query}" if query else path


def submitter_id(secret: bytes, user_ids: list[str]) -> str:
    """The X-Grader-Submitter value for Gradescope's user ids (a group: all of them): an HMAC under the
    assignment's secret, so neither the service's store nor anyone reading it can recover the ids."""
    text = "submitter\n" + "\n".join(sorted(user_ids))
    return hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()[:32]


def _message(method: str, path: str, digest: str, timestamp: int, submitter: str = "") -> bytes:
    text = f"{timestamp}\n{method.upper()}\n{path}\n{digest}"
    return (text + f"\n{submitter}" if submitter else text).encode()


def signature(secret: bytes, method: str, path: str, body: bytes, timestamp: int, submitter: str = "") -> str:
    """The hex HMAC of one request (without the ``sha256=`` prefix)."""
    return _signature(secret, method, path, hashlib.sha256(body).hexdigest(), timestamp, submitter)


def _signature(secret: bytes, method: str, path: str, digest: str, timestamp: int, submitter: str) -> str:
    return hmac.new(secret, _message(method, path, digest, timestamp, submitter), hashlib.sha256).hexdigest()


def sign(secret: bytes, method: str, path: str, body: bytes, timestamp: int | None = None,
         submitter: str | None = None) -> dict[str, str]:
    """The timestamp and signature headers (and the submitter's, when given) for one request (add
    ``X-Grader-Assignment`` yourself)."""
    ts = int(time.time()) if timestamp is None else int(timestamp)
    headers = {TIMESTAMP_HEADER: str(ts),
               SIGNATURE_HEADER: PREFIX + signature(secret, method, path, body, ts, submitter or "")}
    if submitter:
        headers[SUBMITTER_HEADER] = submitter
    return headers


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


def check_time(headers: Mapping[str, str], now: float | None = None, skew_s: int = DEFAULT_SKEW_S) -> str | None:
    """What the headers alone can refuse, before the body is read: None when the signature headers are
    there, well formed and the timestamp within ``skew_s`` of ``now``; else why not, in words."""
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
    if not sig_text.strip().startswith(PREFIX):
        return f"{SIGNATURE_HEADER} must start with {PREFIX!r}"
    submitter = _get(headers, SUBMITTER_HEADER)
    if submitter is not None and not SUBMITTER.match(submitter.strip()):
        return f"{SUBMITTER_HEADER} must be 32 hex digits (the bridge's keyed hash), not {submitter[:40]!r}"
    return None


def verify_digest(secret: bytes, method: str, path: str, digest: str, headers: Mapping[str, str],
                  now: float | None = None, skew_s: int = DEFAULT_SKEW_S) -> str | None:
    """None when the request whose body has sha256 ``digest`` is signed by ``secret`` within ``skew_s``
    of ``now``; else why not, in words."""
    why = check_time(headers, now, skew_s)
    if why is not None:
        return why
    ts = int(str(_get(headers, TIMESTAMP_HEADER)).strip())
    sig_text = str(_get(headers, SIGNATURE_HEADER)).strip()
    submitter = (_get(headers, SUBMITTER_HEADER) or "").strip()
    expected = _signature(secret, method, path, digest, ts, submitter)
    if not hmac.compare_digest(sig_text[len(PREFIX):].lower().encode(), expected.encode()):
        return "signature does not match (wrong secret for this assignment, or the request was altered)"
    return None


def verify(secret: bytes, method: str, path: str, body: bytes, headers: Mapping[str, str],
           now: float | None = None, skew_s: int = DEFAULT_SKEW_S) -> str | None:
    """None when the request is signed by ``secret`` within ``skew_s`` of ``now``; else why not, in words."""
    return verify_digest(secret, method, path, hashlib.sha256(body).hexdigest(), headers, now, skew_s)
