"""An upload's way in: who sent it, decided from the headers alone, then its body, streamed to a
temporary file under ``<data>/uploads/`` while hashing, never past the archive limit.

Nothing of the body is read before the headers pass: a student's token is looked up; a Gradescope
request must name an assignment this service has a secret for and carry the signature headers with
a timestamp within the skew. Only the HMAC itself needs the body (it binds its sha256), so it is
checked after the read, which is bounded by the limit and goes to disk: an unsigned or stale request
costs the service no memory and no disk at all, a signed-looking one at most one archive on disk.
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import ClientDisconnect, Request

from grader.serve import limits, signing
from grader.serve.auth import AuthError, Secrets, Tokens
from grader.serve.settings import Settings
from grader.serve.store import Kind

log = logging.getLogger("grader.serve")
UPLOADS = "uploads"


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
class _Sender:
    kind: Kind
    owner: str
    label: str
    secret: bytes | None = None  # Gradescope's: the HMAC is checked once the body's hash is known
    headers_at: float = 0.0


class Receiver:
    def __init__(self, settings: Settings, tokens: Tokens, secrets: Secrets):
        self.settings, self.tokens, self.secrets = settings, tokens, secrets
        self.dir = settings.data / UPLOADS

    def clear(self) -> None:
        """Remove what a service killed mid-upload left (only this service writes here)."""
        if self.dir.is_dir():
            for p in self.dir.iterdir():
                if p.is_file() and not p.is_symlink():
                    p.unlink(missing_ok=True)

    def sender(self, request: Request) -> _Sender:
        """Who sends ``request``, from its headers alone; Refusal otherwise."""
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
            return _Sender(Kind.SELFCHECK, rec.owner, rec.pseudonym)
        if assignment is None:
            if request.headers.get(signing.SIGNATURE_HEADER):
                raise limits.Refusal(401, f"a signed request must name its assignment ({signing.ASSIGNMENT_HEADER})")
            raise limits.Refusal(401, "no credentials: send 'Authorization: Bearer <your token>' "
                                      "(students) or the Gradescope package's signature headers")
        name = assignment.strip()
        try:
            secret = self.secrets.get(name)
        except AuthError as exc:
            raise limits.Refusal(401, str(exc)) from None
        now = time.time()
        why = signing.check_time(request.headers, now=now, skew_s=self.settings.signature_skew_s)
        if why is not None:
            raise limits.Refusal(401, f"signature refused: {why}")
        return _Sender(Kind.GRADESCOPE, f"gradescope:{name}", name, secret, now)

    async def _stream(self, request: Request, path: Path) -> tuple[str, int]:
        """The body into ``path``: its sha256 and size; Refusal past the limit or when cut off."""
        cap = self.settings.limits.archive_bytes
        limits.check_length(request.headers.get("content-length"), cap)
        digest, size = hashlib.sha256(), 0
        with open(path, "wb") as f:
            try:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > cap:
                        raise limits.too_large(cap)
                    digest.update(chunk)
                    f.write(chunk)
            except ClientDisconnect:
                # Nobody is left to answer: one line in the log, no traceback, the file goes.
                log.info("an upload was cut off by its client after %d bytes", size)
                raise limits.Refusal(400, "the upload ended before its body was complete") from None
        return digest.hexdigest(), size

    @asynccontextmanager
    async def receive(self, request: Request) -> AsyncIterator[Upload]:
        """The authorised upload of ``request``, its file deleted when the block ends."""
        who = self.sender(request)
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="upload-", suffix=".zip", dir=self.dir)  # mode 0600
        os.close(fd)
        path = Path(name)
        try:
            sha, size = await self._stream(request, path)
            submitter = ""
            if who.secret is not None:
                why = signing.verify_digest(who.secret, request.method,
                                            signing.target(request.url.path, request.url.query), sha,
                                            request.headers, now=who.headers_at,
                                            skew_s=self.settings.signature_skew_s)
                if why is not None:
                    raise limits.Refusal(401, f"signature refused: {why}")
                submitter = (request.headers.get(signing.SUBMITTER_HEADER) or "").strip()
            yield Upload(who.kind, who.owner, who.label, path, sha, size, submitter)
        finally:
            path.unlink(missing_ok=True)
