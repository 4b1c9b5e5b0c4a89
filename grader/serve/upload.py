"""An upload's way in: who sent it, decided from the headers alone, then its body, streamed to a
temporary file under ``<data>/uploads/`` while hashing, never past the archive limit nor the time.

Nothing of the body is read before the sender is authenticated in full: a student's token is looked
up; a Gradescope request's signature is verified over the headers (it binds the body's declared
sha256, grader/serve/signing.py) and its nonce taken once, in the job store, so a replay within the
skew is refused. An unknown assignment is refused with the same sentence as a wrong secret, after the
same HMAC work, so a refusal never says which names exist. Then (grader/serve/app.py) the service's
own checks that need no body: its store is whole, the declared content is not already the sender's
job, a token is within its limits. Only then is the body read, holding one of ``uploads_at_once``
slots (``uploads_per_token`` per token), within ``upload_timeout_s``, and held to the signed sha256.

The connection itself (its head and body deadlines, the minimum rate, the caps per address) is
bounded before any of this, in grader/serve/connections.py.

Upload slots are shared: ``gradescope_upload_slots`` of ``uploads_at_once`` are kept for signed
(Gradescope) uploads, so students' self-checks can never take them all; a token holds at most
``uploads_per_token`` of the rest, and a second one only while fewer than half of them are busy.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import ClientDisconnect, Request

from grader.serve import limits, signing
from grader.serve.auth import AuthError, Secrets, Tokens
from grader.serve.settings import Settings
from grader.serve.store import JobStore, Kind
from grader.untrusted.safe_copy import MAX_ENTRIES

log = logging.getLogger("grader.serve")
UPLOADS = "uploads"
EOCD_SEARCH = 22 + 65535  # a zip's end record and its longest comment
MAX_ZIP_ENTRIES = 5 * MAX_ENTRIES  # a submission's entries; the grader itself copies at most MAX_ENTRIES
# The HMAC key of an assignment the service does not have: the same work, and the same refusal, as a wrong secret.
_NO_SUCH_SECRET = secrets.token_bytes(32)


@dataclass
class Upload:
    kind: Kind
    owner: str
    label: str
    path: Path  # the body, on disk (deleted when the request ends)
    sha: str
    size: int
    submitter: str = ""  # Gradescope's submitter (signing.submitter_id), when the bridge sent one


@dataclass
class Sender:
    """Who sends a request, authenticated from its headers alone."""
    kind: Kind
    owner: str
    label: str
    declared_sha: str = ""  # the body's sha256 as the headers give it (signed, for Gradescope)
    signed: bool = False  # the body must then have exactly ``declared_sha``
    submitter: str = ""


def zip_entries(path: Path) -> int | None:
    """The entry count a zip's end record declares, read from its last 64 KiB alone (the central
    directory is not parsed: that is what costs a second for 200,000 entries); None when there is no
    end record (not a zip). A Zip64 archive's count comes from its Zip64 end record."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(size - EOCD_SEARCH, 0))
        tail = f.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < 22:
            return None
        count = int.from_bytes(tail[at + 10:at + 12], "little")
        if count != 0xFFFF:
            return count
        loc = tail.rfind(b"PK\x06\x07", 0, at)  # the Zip64 locator, just before the end record
        if loc < 0 or len(tail) - loc < 20:
            return None
        f.seek(int.from_bytes(tail[loc + 8:loc + 16], "little"))
        record = f.read(56)
        if record[:4] != b"PK\x06\x06" or len(record) < 40:
            return None
        return int.from_bytes(record[32:40], "little")


class Receiver:
    def __init__(self, settings: Settings, tokens: Tokens, secrets: Secrets, store: JobStore):
        self.settings, self.tokens, self.secrets, self.store = settings, tokens, secrets, store
        self.dir = settings.data / UPLOADS
        self._receiving: Counter[str] = Counter()  # bodies being read, per owner (the event loop's only)
        self._signed: set[str] = set()  # owners that are Gradescope assignments (their uploads use the kept slots)

    def clear(self) -> None:
        """Remove what a service killed mid-upload left (only this service writes here)."""
        if self.dir.is_dir():
            for p in self.dir.iterdir():
                if p.is_file() and not p.is_symlink():
                    p.unlink(missing_ok=True)

    def sender(self, request: Request) -> Sender:
        """Who sends ``request``, from its headers alone; Refusal otherwise. (Blocking: the token file
        and the store's nonces; run it in a thread.)"""
        auth = request.headers.get("authorization")
        assignment = request.headers.get(signing.ASSIGNMENT_HEADER)
        if auth is not None:
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise limits.Refusal(401, "the Authorization header must be 'Bearer <your token>'")
            try:
                rec = self.tokens.authenticate(token)
            except AuthError as exc:
                raise limits.Refusal(401, str(exc)) from None
            declared = (request.headers.get(signing.CONTENT_HEADER) or "").strip().lower()
            return Sender(Kind.SELFCHECK, rec.owner, rec.pseudonym, declared if signing.SHA256.match(declared) else "")
        if assignment is None:
            if request.headers.get(signing.SIGNATURE_HEADER):
                raise limits.Refusal(401, f"a signed request must name its assignment ({signing.ASSIGNMENT_HEADER})")
            raise limits.Refusal(401, "no credentials: send 'Authorization: Bearer <your token>' "
                                      "(students) or the Gradescope package's signature headers")
        name = assignment.strip()
        try:
            secret = self.secrets.get(name)
        except AuthError:
            secret = _NO_SUCH_SECRET
        skew = self.settings.signature_skew_s
        signed = signing.verify_headers(secret, request.method, signing.target(request.url.path, request.url.query),
                                        request.headers, now=time.time(), skew_s=skew)
        if isinstance(signed, str):
            raise limits.Refusal(401, f"signature refused: {signed}")
        if not self.store.use_nonce(f"{name}:{signed.nonce}", until=signed.timestamp + skew + 1):
            raise limits.Refusal(401, "signature refused: this signed request was used already (each one is good "
                                      "once; the Gradescope package signs every request afresh)")
        return Sender(Kind.GRADESCOPE, f"gradescope:{name}", name, signed.digest, True, signed.submitter)

    @asynccontextmanager
    async def _slot(self, who: Sender) -> AsyncIterator[None]:
        """One of the bodies the service reads at once (Refusal when none is free for ``who``)."""
        s = self.settings
        total = sum(self._receiving.values())
        if who.kind is Kind.SELFCHECK:
            shared = s.uploads_at_once - s.gradescope_upload_slots
            busy = total - sum(n for owner, n in self._receiving.items() if owner in self._signed)
            if busy >= shared:
                raise limits.Refusal(503, f"the service is receiving {busy} uploads already, as many as it takes "
                                          "at once from students; try again in a few seconds", retry_after=5)
            mine = self._receiving[who.owner]
            if mine >= s.uploads_per_token or (mine and busy >= shared // 2):
                allowed = s.uploads_per_token if busy < shared // 2 else 1
                raise limits.Refusal(429, f"this token is sending {mine} upload(s) already, and at most {allowed} "
                                          "at a time are allowed now; wait for it to finish", retry_after=5)
        elif total >= s.uploads_at_once:
            raise limits.Refusal(503, f"the service is receiving {s.uploads_at_once} uploads already; "
                                      "try again in a few seconds", retry_after=5)
        else:
            self._signed.add(who.owner)
        self._receiving[who.owner] += 1
        try:
            yield
        finally:
            self._receiving[who.owner] -= 1
            if self._receiving[who.owner] <= 0:
                del self._receiving[who.owner]

    async def _stream(self, request: Request, path: Path) -> tuple[str, int]:
        """The body into ``path``: its sha256 and size; Refusal past the limit, the time, or when cut off."""
        cap, budget = self.settings.limits.archive_bytes, self.settings.upload_timeout_s
        limits.check_length(request.headers.get("content-length"), cap)
        digest, size = hashlib.sha256(), 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        chunks = request.stream().__aiter__()
        with open(path, "wb") as f:
            try:
                while True:  # one deadline for the whole body, however it trickles in
                    try:
                        chunk = await asyncio.wait_for(chunks.__anext__(), max(deadline - loop.time(), 0.0))
                    except StopAsyncIteration:
                        break
                    size += len(chunk)
                    if size > cap:
                        raise limits.charged(limits.too_large(cap))
                    digest.update(chunk)
                    try:
                        f.write(chunk)
                    except OSError as exc:  # a full disk: the student is told, the staff's log says what
                        log.error("an upload could not be written under %s: %s", self.dir, exc)
                        raise limits.Refusal(503, limits.DISK_FULL, retry_after=60, close=True) from None
            except ClientDisconnect:
                # Nobody is left to answer: one line in the log, no traceback, the file goes.
                log.info("an upload was cut off by its client after %d bytes", size)
                raise limits.Refusal(400, "the upload ended before its body was complete", charged=True) from None
            except asyncio.TimeoutError:
                log.info("an upload was stopped after %g s and %d bytes: too slow", budget, size)
                raise limits.Refusal(408, f"the upload took longer than {budget:g} s and was stopped; "
                                          "send it again over a faster connection", close=True, charged=True) from None
        return digest.hexdigest(), size

    @asynccontextmanager
    async def receive(self, request: Request, who: Sender) -> AsyncIterator[Upload]:
        """The body of ``who``'s request, its file deleted when the block ends."""
        async with self._slot(who):
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                fd, name = tempfile.mkstemp(prefix="upload-", suffix=".zip", dir=self.dir)  # mode 0600
                os.close(fd)
            except OSError as exc:
                log.error("no upload file could be made under %s: %s", self.dir, exc)
                raise limits.Refusal(503, limits.DISK_FULL, retry_after=60, close=True) from None
            path = Path(name)
            try:
                sha, size = await self._stream(request, path)
                if who.signed:
                    why = signing.body_mismatch(who.declared_sha, sha)
                    if why is not None:
                        raise limits.Refusal(401, f"signature refused: {why}", charged=True)
                yield Upload(who.kind, who.owner, who.label, path, sha, size, who.submitter)
            finally:
                path.unlink(missing_ok=True)
