"""HMAC request signing between the Gradescope package (grader/deploy/gradescope/bridge.py) and the service.

A request carries five headers:

    X-Grader-Assignment:     <name>             which per-assignment secret signs it
    X-Grader-Timestamp:      <unix seconds>     bounds replay to ``skew_s`` either side
    X-Grader-Nonce:          <32 hex digits>    fresh per request: the service takes each one once
    X-Grader-Content-SHA256: <hex>              the body's sha256
    X-Grader-Signature:      sha256=<hex>       HMAC-SHA256(secret, "<ts>\\n<METHOD>\\n<target>\\n<sha256>\\n<nonce>")

The body enters through its declared sha256, so the whole signature is checked from the headers
alone, before a byte of the body is read (:func:`verify_headers`), and the body is then held to that
sha256 as it streams in (:func:`verify` does both at once). The target is the path with its query
string (``/api/v1/jobs?force=1``): an unsigned ``?force=1`` would let anyone who saw one signed
request turn it into a new grading. The nonce makes each signed request good once: the service
keeps the nonces it has taken until their timestamp is out of the skew (grader/serve/upload.py),
so a captured request replayed within the skew is refused, whatever its query.

A sixth header, sent by the Gradescope bridge when Gradescope names the submitter, is signed too
(its value ends the signed text, after another newline; without it the text is as above):

    X-Grader-Submitter:  <hex>                  :func:`submitter_id`: a keyed hash of Gradescope's user ids

so the service can share the queue fairly between students without ever seeing who they are.

A secret is a line of text (``python -m grader serve secret`` writes ``secrets.token_urlsafe(32)``);
the HMAC key is that text, stripped, as UTF-8: :func:`secret_from_text` / :func:`read_secret`.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ASSIGNMENT_HEADER = "X-Grader-Assignment"
TIMESTAMP_HEADER = "X-Grader-Timestamp"
SIGNATURE_HEADER = "X-Grader-Signature"
NONCE_HEADER = "X-Grader-Nonce"
CONTENT_HEADER = "X-Grader-Content-SHA256"  # also sent with a token: the service's dedup before the body
SUBMISSION_ID_HEADER = "X-Grader-Submission-Id"
SUBMITTER_HEADER = "X-Grader-Submitter"
SUBMITTER = re.compile(r"^[0-9a-f]{32}$")
NONCE = re.compile(r"^[0-9a-f]{32}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
MISMATCH = "signature does not match (wrong secret or assignment, or the request was altered)"
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


def _message(method: str, path: str, digest: str, timestamp: int, nonce: str, submitter: str = "") -> bytes:
    text = f"{timestamp}\n{method.upper()}\n{path}\n{digest}\n{nonce}"
    return (text + f"\n{submitter}" if submitter else text).encode()


def _signature(secret: bytes, method: str, path: str, digest: str, timestamp: int, nonce: str,
               submitter: str) -> str:
    return hmac.new(secret, _message(method, path, digest, timestamp, nonce, submitter), hashlib.sha256).hexdigest()


def sign(secret: bytes, method: str, path: str, body: bytes, timestamp: int | None = None,
         submitter: str | None = None, nonce: str | None = None) -> dict[str, str]:
    """The timestamp, nonce, body-hash and signature headers (and the submitter's, when given) for
    one request (add ``X-Grader-Assignment`` yourself). A fresh nonce unless one is given."""
    ts = int(time.time()) if timestamp is None else int(timestamp)
    once = secrets.token_hex(16) if nonce is None else nonce
    digest = hashlib.sha256(body).hexdigest()
    headers = {TIMESTAMP_HEADER: str(ts), NONCE_HEADER: once, CONTENT_HEADER: digest,
               SIGNATURE_HEADER: PREFIX + _signature(secret, method, path, digest, ts, once, submitter or "")}
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


@dataclass(frozen=True)
class Signed:
    """What the signature headers of one request say (well formed, not yet verified)."""
    timestamp: int
    nonce: str
    digest: str  # the body's sha256, as declared
    signature: str  # hex, without the prefix
    submitter: str = ""


def parse(headers: Mapping[str, str], now: float | None = None, skew_s: int = DEFAULT_SKEW_S) -> Signed | str:
    """The signature headers, when all are there, well formed and the timestamp within ``skew_s`` of
    ``now``; else why not, in words. Nothing here depends on the assignment or its secret."""
    values = {name: (_get(headers, name) or "").strip()
              for name in (TIMESTAMP_HEADER, SIGNATURE_HEADER, NONCE_HEADER, CONTENT_HEADER, SUBMITTER_HEADER)}
    for name in (TIMESTAMP_HEADER, SIGNATURE_HEADER, NONCE_HEADER, CONTENT_HEADER):
        if not values[name]:
            return f"the {name} header is missing"
    ts_text, sig_text = values[TIMESTAMP_HEADER], values[SIGNATURE_HEADER]
    try:
        ts = int(ts_text)
    except ValueError:
        return f"{TIMESTAMP_HEADER} {ts_text[:40]!r} is not a whole number of unix seconds"
    now = time.time() if now is None else now
    age = int(now) - ts
    if age > skew_s:
        return f"timestamp {age} s old; at most {skew_s} s allowed (is the sender's clock right?)"
    if -age > skew_s:
        return f"timestamp {-age} s in the future; at most {skew_s} s allowed (is the sender's clock right?)"
    if not sig_text.startswith(PREFIX):
        return f"{SIGNATURE_HEADER} must start with {PREFIX!r}"
    if not NONCE.match(values[NONCE_HEADER]):
        return f"{NONCE_HEADER} must be 32 hex digits, fresh for each request, not {values[NONCE_HEADER][:40]!r}"
    if not SHA256.match(values[CONTENT_HEADER].lower()):
        return f"{CONTENT_HEADER} must be the body's sha256 (64 hex digits), not {values[CONTENT_HEADER][:70]!r}"
    submitter = values[SUBMITTER_HEADER]
    if _get(headers, SUBMITTER_HEADER) is not None and not SUBMITTER.match(submitter):
        return f"{SUBMITTER_HEADER} must be 32 hex digits (the bridge's keyed hash), not {submitter[:40]!r}"
    return Signed(ts, values[NONCE_HEADER], values[CONTENT_HEADER].lower(), sig_text[len(PREFIX):].lower(), submitter)


def verify_headers(secret: bytes, method: str, path: str, headers: Mapping[str, str], now: float | None = None,
                   skew_s: int = DEFAULT_SKEW_S) -> Signed | str:
    """The request's signature headers when ``secret`` signed them, over the declared body sha256,
    within ``skew_s`` of ``now``; else why not, in words. The body itself is not needed: hold it to
    ``.digest`` as it is read."""
    signed = parse(headers, now, skew_s)
    if isinstance(signed, str):
        return signed
    expected = _signature(secret, method, path, signed.digest, signed.timestamp, signed.nonce, signed.submitter)
    if not hmac.compare_digest(signed.signature.encode(), expected.encode()):
        return MISMATCH
    return signed


def body_mismatch(declared: str, digest: str) -> str | None:
    """Why a body whose sha256 is ``digest`` is not the signed one, ``declared`` (None: it is)."""
    if hmac.compare_digest(declared.lower().encode(), digest.lower().encode()):
        return None
    return "signature does not match the body (its sha256 is not the one signed: the request was altered)"


def verify(secret: bytes, method: str, path: str, body: bytes, headers: Mapping[str, str],
           now: float | None = None, skew_s: int = DEFAULT_SKEW_S) -> str | None:
    """None when the request with ``body`` is signed by ``secret`` within ``skew_s`` of ``now``; else
    why not, in words (the nonce's one use is the service's to track)."""
    signed = verify_headers(secret, method, path, headers, now, skew_s)
    if isinstance(signed, str):
        return signed
    return body_mismatch(signed.digest, hashlib.sha256(body).hexdigest())
