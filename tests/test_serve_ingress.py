"""What reaches the service before any job does, against the real service process: an unhandled error
is a JSON 500 without internals, logged once with its traceback; an unsigned or stale Gradescope
request is refused before its body is sent; a body goes to a file under --data, never past the
limit, and is gone when the request ends (also when its client hangs up mid-upload)."""
from __future__ import annotations

import socket
import sqlite3
import time

import httpx
import pytest

from grader.serve.app import INTERNAL_ERROR
from grader.serve.signing import ASSIGNMENT_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER
from tests.serve_helpers import ServiceProcess, bearer, issue_tokens, make_secret, signed, tiny_zip

JOBS = "/api/v1/jobs"


class Ingress(ServiceProcess):
    tokens: dict[str, str]
    secret: bytes


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    data = tmp_path_factory.mktemp("ingress") / "data"
    service = Ingress(data, "--no-workers", "--archive-mib", "1")
    service.tokens = issue_tokens(data, ["a@x.edu"])
    service.secret = make_secret(data, "hw1")
    with service:
        yield service


def uploads(svc: ServiceProcess) -> list[str]:
    folder = svc.data / "uploads"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def full_log(svc: ServiceProcess) -> str:
    return svc.log_path.read_text(errors="replace")


def raw_request(svc: ServiceProcess, headers: dict[str, str], length: int = 900_000) -> bytes:
    """Send only the request's head (a body of ``length`` bytes announced, none sent); the answer."""
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as s:
        s.sendall(f"POST {JOBS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/zip\r\n{head}"
                  f"Content-Length: {length}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < _length(answer):
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
        return answer


def _length(answer: bytes) -> int:
    for line in answer.partition(b"\r\n\r\n")[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def test_unsigned_or_stale_requests_are_refused_before_the_body_is_sent(svc):
    unsigned = raw_request(svc, {ASSIGNMENT_HEADER: "hw1"})
    assert unsigned.startswith(b"HTTP/1.1 401") and f"the {TIMESTAMP_HEADER} header is missing".encode() in unsigned
    no_signature = raw_request(svc, {ASSIGNMENT_HEADER: "hw1", TIMESTAMP_HEADER: str(int(time.time()))})
    assert no_signature.startswith(b"HTTP/1.1 401") and f"the {SIGNATURE_HEADER} header is missing".encode() \
        in no_signature
    stale = raw_request(svc, {ASSIGNMENT_HEADER: "hw1", TIMESTAMP_HEADER: str(int(time.time()) - 900),
                              SIGNATURE_HEADER: "sha256=" + "0" * 64})
    assert stale.startswith(b"HTTP/1.1 401") and b"signature refused: timestamp 9" in stale
    unknown = raw_request(svc, {ASSIGNMENT_HEADER: "hw9", TIMESTAMP_HEADER: str(int(time.time())),
                                SIGNATURE_HEADER: "sha256=" + "0" * 64})
    assert unknown.startswith(b"HTTP/1.1 401") and b"no secret for assignment 'hw9'" in unknown
    assert uploads(svc) == []


def test_a_body_is_streamed_to_a_private_file_that_is_gone_when_the_request_ends(svc):
    # Headers that pass (fresh timestamp), a signature that will not: the body is read to disk, bounded.
    head = (f"POST {JOBS} HTTP/1.1\r\nHost: x\r\n{ASSIGNMENT_HEADER}: hw1\r\n{TIMESTAMP_HEADER}: {int(time.time())}"
            f"\r\n{SIGNATURE_HEADER}: sha256={'0' * 64}\r\nContent-Length: 500000\r\n\r\n")
    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as s:
        s.sendall(head.encode() + b"P" * 200_000)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            files = list((svc.data / "uploads").glob("upload-*"))
            if files and files[0].stat().st_size >= 150_000:  # (less what the file's buffer holds)
                break
            time.sleep(0.05)
        [part] = files
        assert 150_000 <= part.stat().st_size <= 200_000 and part.stat().st_mode & 0o077 == 0
    # The client hung up mid-upload: one line in the log, no traceback, and the file is deleted.
    deadline = time.monotonic() + 10
    while uploads(svc) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert uploads(svc) == []
    assert "an upload was cut off by its client after 200000 bytes" in svc.log_text()
    assert "Traceback" not in full_log(svc)

    body = tiny_zip("altered")
    with svc.client() as c:
        r = c.post(JOBS, content=body + b"!", headers=signed(svc.secret, "hw1", body))
        assert r.status_code == 401 and "signature does not match" in r.json()["error"]
        chunked = c.post(JOBS, content=iter([b"x" * 600_000] * 2), headers=signed(svc.secret, "hw1", b""))
        assert chunked.status_code == 413 and "at most 1.0 MiB" in chunked.json()["error"]
        ok = c.post(JOBS, content=body, headers=signed(svc.secret, "hw1", body))
        assert ok.status_code == 202, ok.text
    assert uploads(svc) == []


def test_an_unhandled_error_is_a_json_500_without_internals_logged_once(svc):
    db = sqlite3.connect(svc.data / "jobs.sqlite")
    db.execute("insert into jobs (id, owner, kind, state, archive_sha, key, ord, created, record) "
               "values ('BROKENBROKENBROKEN01', 'token:x', 'selfcheck', 'done', 's', 'k', 0, 0, '{not json')")
    db.commit()
    with svc.client() as c:
        before = full_log(svc).count("Traceback (most recent call last)")
        r = c.get(f"{JOBS}/BROKENBROKENBROKEN01")
        assert r.status_code == 500 and r.json() == {"error": INTERNAL_ERROR}
        db.execute("drop table archives")  # the store loses a table under the running service
        db.commit()
        r = c.post(JOBS, content=tiny_zip("store down"), headers=bearer(svc.tokens["a@x.edu"]))
        assert r.status_code == 500 and r.json() == {"error": INTERNAL_ERROR}, r.text
        assert r.headers["content-type"] == "application/json"
        assert c.get("/healthz").status_code == 200  # the service itself goes on
    db.close()
    log = full_log(svc)
    assert log.count("Traceback (most recent call last)") - before == 2, log
    assert log.count(f"GET {JOBS}/BROKENBROKENBROKEN01 failed") == 1 and "JSONDecodeError" in log
    assert log.count(f"POST {JOBS} failed") == 1 and "no such table: archives" in log
    assert "Exception in ASGI application" not in log  # uvicorn did not log it a second time
    assert uploads(svc) == []
    assert httpx.get(f"{svc.url}/healthz").json()["ok"] is True
