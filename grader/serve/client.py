"""The grading service's HTTP client, shared by ``python -m grader submit`` and the Gradescope bridge.

- :func:`make_archive`: a submission folder as a zip, deterministically (sorted names, fixed dates
  and modes), so the same files give the same bytes and the service's dedup (archive sha256 +
  rubric sha256) answers a regrade with the stored job. Symbolic links are never followed (left
  out, named); build outputs and caches are left out; a zip is sent as it is.
- :class:`Client`: submit, poll with backoff, download a job's files. Every refusal, network
  failure or odd answer is a :class:`ServiceError` with a typed :class:`Problem` and the server's
  own sentence; callers decide from the type, never from the words.

httpx (over urllib) for its timeouts per phase, connection reuse while polling, and errors that
say which phase failed.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import stat
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import httpx

from grader.serve.signing import ASSIGNMENT_HEADER, CONTENT_HEADER, SUBMISSION_ID_HEADER, SUBMITTER_HEADER, sign, target
from grader.untrusted.safe_copy import MAX_DEPTH

API = "/api/v1"
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
# Left out of the archive: what a build, an editor or a grading run writes, never graded.
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".pytest_cache", ".mypy_cache",
                       ".ruff_cache", ".ipynb_checkpoints", "__MACOSX", "build", "grading-out", ".vscode", ".idea"})
SKIP_FILES = frozenset({".DS_Store", "a.out"})
SKIP_SUFFIXES = (".o", ".obj", ".cubin", ".fatbin", ".ptx", ".so", ".a", ".exe", ".pyc", ".npy", ".swp")
# A results file name the service may list: one path component, no dot-files.
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
JOB_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")  # the service's ids (app.py): token_urlsafe, may begin with _ or -
MAX_DOWNLOAD_BYTES = 64 * 1024 * 1024
# Read into memory at most this much (the service refuses far less: 20 MiB by default, saying its limit).
MAX_INPUT_BYTES = 256 * 1024 * 1024


class Problem(str, Enum):
    """Why a request did not give what was asked (typed: callers branch on it)."""

    UNAUTHORIZED = "unauthorized"  # 401: bad token or signature
    TOO_LARGE = "too_large"  # 413
    RATE_LIMITED = "rate_limited"  # 429 (retry_after says when)
    BAD_REQUEST = "bad_request"  # 400 and other 4xx
    NOT_FOUND = "not_found"  # 404: no such job, or no such file
    SERVER = "server"  # 5xx
    UNREACHABLE = "unreachable"  # no connection, DNS, TLS, timeout
    BAD_ANSWER = "bad_answer"  # not the JSON the contract promises


class ServiceError(Exception):
    """``passing``: a busy or briefly unavailable service (503, 502, 504, no answer in time, the
    connection dropped mid-request), worth another try; never a refusal, nor a server that is not there."""

    def __init__(self, problem: Problem, message: str, status: int | None = None,
                 retry_after: float | None = None, passing: bool = False) -> None:
        super().__init__(message)
        self.problem, self.message, self.status, self.retry_after = problem, message, status, retry_after
        self.passing = passing


@dataclass
class Archive:
    data: bytes
    files: int
    skipped: list[str] = field(default_factory=list)  # "gemm/x.cu (a symbolic link)", for people

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass
class Submitted:
    id: str
    state: str
    url: str
    deduplicated: bool
    position: int | None = None
    estimate_s: float | None = None


@dataclass
class JobState:
    id: str
    state: str  # queued | running | done | failed
    position: int | None = None
    estimate_s: float | None = None
    score: float | None = None
    max_score: float | None = None
    error: str = ""
    files: list[str] = field(default_factory=list)
    started: str | None = None
    without_gpu: str = ""  # the service graded it without a GPU, and why ("" on a GPU)

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed")


def _skip_reason(name: str, is_dir: bool) -> str | None:
    if is_dir:
        return "a build or cache folder" if name in SKIP_DIRS else None
    if name in SKIP_FILES or name.endswith(SKIP_SUFFIXES):
        return "a build output"
    return None


def _unencodable(rel: str) -> str | None:
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return "a name that is not UTF-8"
    return None


def make_archive(path: Path) -> Archive:
    """The submission at ``path`` (a folder, or a zip sent as it is) as zip bytes. Raises OSError or
    ValueError with a sentence when it cannot be read."""
    path = Path(path)
    if path.is_symlink():
        raise ValueError(f"{path} is a symbolic link; give the folder itself")
    if path.is_file():
        if path.stat().st_size > MAX_INPUT_BYTES:
            raise ValueError(f"{path} is larger than {human_size(MAX_INPUT_BYTES)}")
        data = path.read_bytes()
        try:
            return Archive(data, len(zipfile.ZipFile(io.BytesIO(data)).namelist()))
        except (zipfile.BadZipFile, NotImplementedError):  # NotImplementedError: a zip version Python cannot read
            raise ValueError(f"{path} is neither a folder nor a zip file") from None
    if not path.is_dir():
        raise ValueError(f"{path} does not exist")
    members: list[tuple[str, Path]] = []
    skipped: list[str] = []
    total = 0
    for folder, dirs, files in os.walk(path):  # os.walk never descends into a linked folder
        rel_dir = Path(folder).relative_to(path)
        if len(rel_dir.parts) >= MAX_DEPTH and dirs:  # intake would leave them out; os.walk recurses per level
            skipped += [f"{(rel_dir / d).as_posix()}/ (more than {MAX_DEPTH} nested folders)" for d in sorted(dirs)]
            dirs.clear()
        for name in sorted(dirs):
            rel = (rel_dir / name).as_posix()
            full = Path(folder) / name
            why = "a symbolic link" if full.is_symlink() else _skip_reason(name, True)
            if why:
                dirs.remove(name)
                skipped.append(f"{rel}/ ({why})")
        for name in files:
            full, rel = Path(folder) / name, (rel_dir / name).as_posix()
            mode = full.lstat().st_mode
            why = ("a symbolic link" if stat.S_ISLNK(mode) else None if stat.S_ISREG(mode) else "not a regular file")
            why = why or _skip_reason(name, False) or _unencodable(rel)
            if why:
                skipped.append(f"{rel.encode('utf-8', 'replace').decode()} ({why})")
                continue
            members.append((rel, full))
            total += full.lstat().st_size
            if total > MAX_INPUT_BYTES:
                raise ValueError(f"{path} holds more than {human_size(MAX_INPUT_BYTES)} of files")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for rel, full in sorted(members):
            info = zipfile.ZipInfo(rel, date_time=ZIP_DATE)
            info.create_system = 3  # Unix: the mode bits below are read as such
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, full.read_bytes())
    return Archive(buf.getvalue(), len(members), sorted(skipped))


def human_size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / (1024 * 1024):.1f} MiB"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class Client:
    """One service, one credential: a student's token, or an assignment's HMAC secret (Gradescope)."""

    def __init__(self, server: str, *, token: str | None = None, assignment: str | None = None,
                 secret: bytes | None = None, timeout_s: float = 30.0,
                 transport: httpx.BaseTransport | None = None, deadline: float | None = None) -> None:
        """``deadline`` (unix seconds): no request may last past it, whatever ``timeout_s`` allows (the
        Gradescope bridge must be done before run_autograder stops it)."""
        if not re.match(r"^https?://[^/\s]+", server or ""):
            raise ValueError(f"--server {server!r}: expected a URL such as https://gpu.example.edu")
        self.server = server.rstrip("/")
        self.base_path = httpx.URL(self.server).path.rstrip("/")  # signed with the path, behind a prefix too
        self.token, self.assignment, self.secret = token, assignment, secret
        self.timeout_s, self.deadline = timeout_s, deadline
        timeout = httpx.Timeout(timeout_s, connect=min(10.0, timeout_s))
        self.http = httpx.Client(base_url=self.server, timeout=timeout, transport=transport,
                                 headers={"User-Agent": "gemm-ladder-grader"})

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _auth(self, method: str, path: str, body: bytes, submitter: str | None = None) -> dict[str, str]:
        if self.secret is not None:  # a fresh nonce, the body's sha256 and the submitter header, all signed
            return {ASSIGNMENT_HEADER: self.assignment or "", **sign(self.secret, method, path, body,
                                                                     submitter=submitter)}
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if body:  # the service answers a stored job of the same content without reading the body again
            headers[CONTENT_HEADER] = hashlib.sha256(body).hexdigest()
        return headers

    def _request(self, method: str, path: str, body: bytes = b"", params: dict | None = None,
                 headers: dict[str, str] | None = None) -> httpx.Response:
        query = str(httpx.QueryParams(params or {}))  # signed as sent (grader/serve/signing.py)
        extra = dict(headers or {})
        submitter = extra.pop(SUBMITTER_HEADER, None)
        all_headers = {**self._auth(method, target(self.base_path + path, query), body, submitter), **extra}
        timeout = self.http.timeout
        if self.deadline is not None:
            left = self.deadline - time.time()
            if left <= 0:
                raise ServiceError(Problem.UNREACHABLE, "no time left for another request before the run's deadline")
            timeout = httpx.Timeout(min(self.timeout_s, left), connect=min(10.0, self.timeout_s, left))
        try:
            resp = self.http.request(method, target(path, query), content=body or None, headers=all_headers,
                                     timeout=timeout)
        except httpx.TimeoutException as exc:
            raise ServiceError(Problem.UNREACHABLE, f"no answer in time ({type(exc).__name__})", passing=True) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:  # dropped mid-request
            raise ServiceError(Problem.UNREACHABLE, str(exc) or type(exc).__name__, passing=True) from None
        except httpx.HTTPError as exc:
            raise ServiceError(Problem.UNREACHABLE, str(exc) or type(exc).__name__) from None
        if resp.status_code >= 400:
            raise _refusal(resp)
        return resp

    def _json(self, resp: httpx.Response) -> dict[str, Any]:
        try:
            data = resp.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ServiceError(Problem.BAD_ANSWER, f"{self.server} answered {resp.request.url.path} with "
                               f"something other than a JSON object (is --server the grading service?)",
                               resp.status_code)
        return data

    def submit(self, archive: bytes, *, force: bool = False, submission_id: str | None = None,
               submitter: str | None = None) -> Submitted:
        """``submitter``: Gradescope's submitter (signing.submitter_id), for the service's fair share."""
        headers = {"Content-Type": "application/zip"}
        if submission_id:
            headers[SUBMISSION_ID_HEADER] = submission_id
        if submitter:
            headers[SUBMITTER_HEADER] = submitter
        resp = self._request("POST", f"{API}/jobs", archive, params={"force": "1"} if force else None,
                             headers=headers)
        data = self._json(resp)
        job_id = data.get("id")
        if not isinstance(job_id, str) or not JOB_ID.match(job_id):
            raise ServiceError(Problem.BAD_ANSWER, f"the service's answer has no usable job id: {str(data)[:200]}")
        url = data.get("url")
        url = url if isinstance(url, str) and url.startswith(("http://", "https://")) else f"{self.server}/jobs/{job_id}"
        return Submitted(job_id, str(data.get("state", "queued")), url, bool(data.get("deduplicated")),
                         _int(data.get("position")), _num(data.get("estimate_s")))

    def job(self, job_id: str) -> JobState:
        data = self._json(self._request("GET", f"{API}/jobs/{job_id}"))
        files = [f for f in data.get("files") or [] if isinstance(f, str) and FILE_NAME.match(f)]
        return JobState(job_id, str(data.get("state", "")), _int(data.get("position")), _num(data.get("estimate_s")),
                        _num(data.get("score")), _num(data.get("max_score")), str(data.get("error") or ""),
                        files, data.get("started") if isinstance(data.get("started"), str) else None,
                        str(data.get("without_gpu") or "")[:300])

    def wait(self, job_id: str, timeout_s: float, on_update: Callable[[JobState], None] | None = None,
             first_delay_s: float = 1.0, max_delay_s: float = 10.0) -> JobState:
        """Poll until the job is done or failed, or ``timeout_s`` passes (then the last state, unfinished).
        The delay grows 1.5x per poll up to ``max_delay_s``; a passing network failure is retried."""
        deadline = time.monotonic() + timeout_s
        delay, failures = first_delay_s, 0
        last: JobState | None = None
        while True:
            try:
                last = self.job(job_id)
                failures = 0
            except ServiceError as exc:
                failures += 1
                if exc.problem not in (Problem.UNREACHABLE, Problem.SERVER) or failures >= 5:
                    raise
            if last is not None:
                if on_update:
                    on_update(last)
                if last.finished:
                    return last
            left = deadline - time.monotonic()
            if left <= 0:
                if last is None:
                    raise ServiceError(Problem.UNREACHABLE, f"{self.server} did not answer while waiting")
                return last
            time.sleep(min(delay, left))
            delay = min(delay * 1.5, max_delay_s)

    def file(self, job_id: str, name: str) -> bytes:
        if not FILE_NAME.match(name):
            raise ServiceError(Problem.BAD_ANSWER, f"refusing the file name {name[:100]!r}")
        data = self._request("GET", f"{API}/jobs/{job_id}/files/{name}").content
        if len(data) > MAX_DOWNLOAD_BYTES:
            raise ServiceError(Problem.BAD_ANSWER, f"{name} is larger than {human_size(MAX_DOWNLOAD_BYTES)}")
        return data

    def download(self, job_id: str, names: list[str], dest: Path) -> list[Path]:
        """Each named file of the job into ``dest`` (created); returns the paths written."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        written = []
        for name in names:
            target = dest / name
            target.write_bytes(self.file(job_id, name))
            written.append(target)
        return written


def _refusal(resp: httpx.Response) -> ServiceError:
    """The service's error sentence ({"error": ...}) with its typed problem."""
    try:
        body = resp.json()
        sentence = body.get("error") if isinstance(body, dict) else None
    except ValueError:
        sentence = None
    code = resp.status_code
    sentence = str(sentence) if sentence else f"HTTP {code} {resp.reason_phrase}".strip()
    retry = None
    try:
        retry = float(resp.headers.get("Retry-After", ""))
    except ValueError:
        pass
    problem = {401: Problem.UNAUTHORIZED, 403: Problem.UNAUTHORIZED, 404: Problem.NOT_FOUND,
               413: Problem.TOO_LARGE, 429: Problem.RATE_LIMITED}.get(code)
    if problem is None:
        problem = Problem.SERVER if code >= 500 else Problem.BAD_REQUEST
    return ServiceError(problem, sentence, code, retry, passing=code in (502, 503, 504))
