"""Who may submit: students' tokens (stored hashed) and the per-assignment HMAC secrets of Gradescope.

``<data>/tokens.json`` (mode 0600) holds, per token, only its sha256, the roster row's label (email or
sid: never shown to others), a pseudonym (the leaderboard's name), and when it was issued, expires or
was revoked. A token is printed once, when issued. The file is read again whenever it changes, so
``tokens revoke`` takes effect on a running service at once.

``<data>/secrets/<assignment>.secret`` (mode 0600, folder 0700) holds one assignment's HMAC secret
(grader/serve/signing.py); the Gradescope package is built with it and students never see it.
"""
from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
import os
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from grader.files import replace_whole
from grader.serve.signing import read_secret

TOKENS_FILE = "tokens.json"
SECRETS_DIR = "secrets"
TOKEN_PREFIX = "glt_"
ASSIGNMENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ADJECTIVES = ("amber", "brisk", "calm", "deft", "eager", "fleet", "gentle", "hardy", "keen", "lucid",
              "mellow", "nimble", "plucky", "quiet", "rapid", "sturdy", "tidy", "vivid", "witty", "zesty")
ANIMALS = ("otter", "falcon", "lynx", "heron", "badger", "gecko", "marten", "ibis", "koala", "puffin",
           "raven", "stoat", "tapir", "viper", "wombat", "yak", "bison", "crane", "dingo", "egret")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.strip().encode("utf-8")).hexdigest()


def pseudonym(digest: str) -> str:
    """A readable name that says nothing about the student (derived from the token's hash)."""
    n = int(digest[:8], 16)
    return f"{ADJECTIVES[n % 20]}-{ANIMALS[(n // 20) % 20]}-{(n // 400) % 100:02d}"


def _iso(t: float | None) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if t else "-"


@dataclass
class TokenRecord:
    hash: str
    label: str
    pseudonym: str
    created: float
    expires: float | None
    revoked: float | None = None

    @property
    def owner(self) -> str:
        return "token:" + self.hash[:24]

    def live(self, now: float) -> bool:
        return self.revoked is None and (self.expires is None or self.expires > now)


class AuthError(Exception):
    """A refused credential; the message is the sentence the client sees."""


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600, replacing it whole."""
    replace_whole(path, text, mode=0o600)


class Tokens:
    def __init__(self, data: Path):
        self.path = Path(data) / TOKENS_FILE
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._by_hash: dict[str, TokenRecord] = {}

    def records(self) -> list[TokenRecord]:
        with self._lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                self._stamp, self._by_hash = None, {}
                return []
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                raw = json.loads(self.path.read_text(encoding="utf-8"))
                self._by_hash = {r["hash"]: TokenRecord(**r) for r in raw.get("tokens", [])}
                self._stamp = stamp
            return list(self._by_hash.values())

    def _save(self, records: list[TokenRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _write_private(self.path, json.dumps({"tokens": [asdict(r) for r in records]}, indent=1) + "\n")

    def authenticate(self, token: str, now: float | None = None) -> TokenRecord:
        t = time.time() if now is None else now
        self.records()
        rec = self._by_hash.get(token_hash(token))
        if rec is None:
            raise AuthError("unknown token: check that you copied the whole token your instructor sent you")
        if rec.revoked is not None:
            raise AuthError(f"this token was revoked on {_iso(rec.revoked)}; ask your instructor for a new one")
        if rec.expires is not None and rec.expires <= t:
            raise AuthError(f"this token expired on {_iso(rec.expires)}; ask your instructor for a new one")
        return rec

    def issue(self, labels: list[str], expires_days: float | None, reissue: bool = False,
              now: float | None = None) -> tuple[list[tuple[str, str, str]], list[str]]:
        """New tokens for ``labels``: ([(label, pseudonym, token)], labels skipped because they already
        hold a live token). ``reissue`` revokes the old token and issues a new one instead."""
        t = time.time() if now is None else now
        records = self.records()
        live = {r.label: r for r in records if r.live(t)}
        names = {r.pseudonym for r in records}
        issued, skipped = [], []
        for label in labels:
            if label in live and not reissue:
                skipped.append(label)
                continue
            if label in live:
                live[label].revoked = t
            # A pseudonym names one student (the leaderboard, `tokens revoke NAME`): draw again on a clash
            # (40,000 names; bounded, so a full space gives a shared name rather than a hang).
            for _ in range(1000):
                token = TOKEN_PREFIX + secrets.token_urlsafe(24)
                digest = token_hash(token)
                if pseudonym(digest) not in names:
                    break
            names.add(pseudonym(digest))
            rec = TokenRecord(digest, label, pseudonym(digest), t,
                              t + expires_days * 86400 if expires_days else None)
            records.append(rec)
            live[label] = rec
            issued.append((label, rec.pseudonym, token))
        self._save(records)
        return issued, skipped

    def revoke(self, who: str, now: float | None = None) -> int:
        """Revoke the live tokens whose label, pseudonym or token is ``who``; how many."""
        t = time.time() if now is None else now
        records = self.records()
        digest = token_hash(who)
        hit = [r for r in records if r.revoked is None and (who in (r.label, r.pseudonym) or r.hash == digest)]
        for r in hit:
            r.revoked = r.revoked or t
        if hit:
            self._save(records)
        return len(hit)

    def describe(self, now: float | None = None) -> list[dict]:
        t = time.time() if now is None else now
        return [{"label": r.label, "pseudonym": r.pseudonym, "issued": _iso(r.created), "expires": _iso(r.expires),
                 "state": "revoked" if r.revoked else "expired" if not r.live(t) else "live"}
                for r in self.records()]


def read_roster(path: Path) -> list[str]:
    """The labels of a roster CSV: its ``email`` column, else its ``sid`` column (ValueError names what
    is missing)."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        columns = {c.strip().lower(): c for c in (reader.fieldnames or [])}
        col = columns.get("email") or columns.get("sid")
        if col is None:
            raise ValueError(f"{path}: no 'email' or 'sid' column (columns: {', '.join(columns) or 'none'})")
        labels = [(row.get(col) or "").strip() for row in reader]
    labels = list(dict.fromkeys(label for label in labels if label))
    if not labels:
        raise ValueError(f"{path}: the {col!r} column has no values")
    return labels


class Secrets:
    def __init__(self, data: Path):
        self.dir = Path(data) / SECRETS_DIR

    def _path(self, assignment: str) -> Path:
        if not ASSIGNMENT_NAME.match(assignment):
            raise AuthError(f"assignment name {assignment[:70]!r} is not valid (letters, digits, '.', '_', '-')")
        return self.dir / f"{assignment}.secret"

    def create(self, assignment: str, rotate: bool = False) -> str | None:
        """A new secret for ``assignment`` (None when it has one and not ``rotate``)."""
        path = self._path(assignment)
        if path.exists() and not rotate:
            return None
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        text = secrets.token_urlsafe(32)
        _write_private(path, text + "\n")
        return text

    def get(self, assignment: str) -> bytes:
        path = self._path(assignment)
        try:
            return read_secret(path)
        except (FileNotFoundError, ValueError):
            raise AuthError(f"no secret for assignment {assignment!r} on this service "
                            "(python -m grader serve secret --assignment NAME creates one)") from None
