"""What reaches the service before any job does, against the real service process: an unhandled error
is a JSON 500 without internals, logged once with its traceback; a Gradescope request that is not
signed in full (or names no assignment the service has: the same refusal), and a token over its
limits, are refused before the body is sent; a body goes to a file under --data, never past the
limit nor the time, and is gone when the request ends (also when its client hangs up mid-upload);
slow heads are cut off, and uploads are capped per token and in all."""
from __future__ import annotations

import hashlib
import select
import socket
import sqlite3
import time

import httpx
import pytest

from grader.serve.signing import (
    ASSIGNMENT_HEADER,
    CONTENT_HEADER,
    NONCE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
)
from tests.serve_helpers import ServiceProcess, bearer, issue_tokens, make_secret, signed, tiny_zip

JOBS = "/api/v1/jobs"


class Ingress(ServiceProcess):
    tokens: dict[str, str]
    secret: bytes


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    data = tmp_path_factory.mktemp("ingress") / "data"
    service = Ingress(data, "--no-workers", "--archive-mib", "1")
    service.tokens = issue_tokens(data, ["a@x.edu", "l@x.edu"])
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


def answer_of(raw: bytes) -> tuple[bytes, bytes]:
    """The status line and the body of a raw HTTP answer (its Date header differs from one to the next)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], body


def test_a_signed_request_is_verified_in_full_before_the_body_is_sent(svc):
    now = str(int(time.time()))
    forged = {ASSIGNMENT_HEADER: "hw1", TIMESTAMP_HEADER: now, NONCE_HEADER: "0" * 32, CONTENT_HEADER: "0" * 64,
              SIGNATURE_HEADER: "sha256=" + "0" * 64}  # every header there and well formed, the signature wrong
    unsigned = raw_request(svc, {ASSIGNMENT_HEADER: "hw1"})
    assert unsigned.startswith(b"HTTP/1.1 401") and f"the {TIMESTAMP_HEADER} header is missing".encode() in unsigned
    no_signature = raw_request(svc, {ASSIGNMENT_HEADER: "hw1", TIMESTAMP_HEADER: now})
    assert no_signature.startswith(b"HTTP/1.1 401") and f"the {SIGNATURE_HEADER} header is missing".encode() \
        in no_signature
    no_nonce = raw_request(svc, {k: v for k, v in forged.items() if k != NONCE_HEADER})
    assert no_nonce.startswith(b"HTTP/1.1 401") and f"the {NONCE_HEADER} header is missing".encode() in no_nonce
    stale = raw_request(svc, {**forged, TIMESTAMP_HEADER: str(int(time.time()) - 900)})
    assert stale.startswith(b"HTTP/1.1 401") and b"signature refused: timestamp 9" in stale
    wrong = raw_request(svc, forged)  # answered at once: the body it announces is never waited for
    assert wrong.startswith(b"HTTP/1.1 401") and b"signature does not match" in wrong
    unknown = raw_request(svc, {**forged, ASSIGNMENT_HEADER: "hw9"})
    assert answer_of(unknown) == answer_of(wrong)  # the same refusal: it confirms no assignment name
    assert uploads(svc) == []


def test_a_token_over_its_limit_is_refused_before_its_body(svc):
    token, body = svc.tokens["l@x.edu"], tiny_zip("limit before the body")
    with svc.client() as c:
        first = c.post(JOBS, content=body, headers=bearer(token))
        assert first.status_code == 202, first.text
    # Queued (no workers): the token has its one job at a time; another upload is refused from its head.
    over = raw_request(svc, {"Authorization": f"Bearer {token}"})
    assert over.startswith(b"HTTP/1.1 429") and b"at most 1 at a time" in over, over
    # The same content, declared by its sha256 (python -m grader submit sends it): the stored job, body unread.
    again = raw_request(svc, {"Authorization": f"Bearer {token}", CONTENT_HEADER: hashlib.sha256(body).hexdigest()})
    assert again.startswith(b"HTTP/1.1 200") and first.json()["id"].encode() in again, again
    assert uploads(svc) == []


def test_a_body_is_streamed_to_a_private_file_that_is_gone_when_the_request_ends(svc):
    # A request signed in full for a body of 500000 bytes, of which only 200000 come: read to disk, bounded.
    head = "".join(f"{k}: {v}\r\n" for k, v in signed(svc.secret, "hw1", b"P" * 500_000).items())
    with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as s:
        s.sendall(f"POST {JOBS} HTTP/1.1\r\nHost: x\r\n{head}Content-Length: 500000\r\n\r\n".encode() + b"P" * 200_000)
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
        assert r.status_code == 401 and "signature does not match the body" in r.json()["error"]
        chunked = c.post(JOBS, content=iter([b"x" * 600_000] * 2), headers=signed(svc.secret, "hw1", b""))
        assert chunked.status_code == 413 and "at most 1.0 MiB" in chunked.json()["error"]
        ok = c.post(JOBS, content=body, headers=signed(svc.secret, "hw1", body))
        assert ok.status_code == 202, ok.text
    assert uploads(svc) == []


def closed_within(s: socket.socket, deadline: float, trickle: bytes = b"") -> bytes | None:
    """Send ``trickle`` one byte every 0.25 s until the service answers and closes the connection
    (what it answered, b"" for nothing) or ``deadline`` (monotonic) passes (None)."""
    answer = b""
    while time.monotonic() < deadline:
        if trickle:
            try:
                s.sendall(trickle[:1])
            except OSError:  # closed under us
                return answer
            trickle = trickle[1:]
        readable, _, _ = select.select([s], [], [], 0.25)
        if readable:
            try:
                chunk = s.recv(65536)
            except OSError:
                return answer
            if not chunk:
                return answer
            answer += chunk
    return None


def test_slow_heads_and_bodies_are_cut_off_and_uploads_are_capped(tmp_path):
    """Real slow clients on loopback: a head trickled in byte by byte is closed after header_timeout_s;
    a body after upload_timeout_s (408, its file deleted); a token may send one body at a time and
    the service two in all, refusing more from their heads."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "serve.yaml").write_text("header_timeout_s: 2\nupload_timeout_s: 3\nuploads_at_once: 2\n"
                                     "uploads_per_token: 1\ngradescope_upload_slots: 0\n")
    tokens = issue_tokens(data, ["a@x.edu", "b@x.edu", "c@x.edu"])
    with ServiceProcess(data, "--no-workers") as svc, svc.client() as c:
        with socket.create_connection(("127.0.0.1", svc.port), timeout=10) as s:
            opened = time.monotonic()
            head = f"POST {JOBS} HTTP/1.1\r\nHost: x\r\nX-Slow: {'a' * 200}\r\n".encode()
            assert closed_within(s, opened + 15, trickle=head) is not None, "a trickled head was never cut off"
            assert time.monotonic() - opened >= 1.5  # cut at its limit, not before; closed_within is the net

        def slow_upload(token: str) -> socket.socket:
            s = socket.create_connection(("127.0.0.1", svc.port), timeout=10)
            s.sendall(f"POST {JOBS} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                      "Content-Type: application/zip\r\nContent-Length: 100000\r\n\r\nP".encode())
            return s

        def receiving(n: int) -> None:
            deadline = time.monotonic() + 10
            while len(uploads(svc)) != n and time.monotonic() < deadline:  # n = 0 too: a cut upload's file goes
                time.sleep(0.05)
            assert len(uploads(svc)) == n, uploads(svc)

        a = slow_upload(tokens["a@x.edu"])
        started = time.monotonic()
        receiving(1)
        second = c.post(JOBS, content=tiny_zip("a again"), headers=bearer(tokens["a@x.edu"]))
        assert second.status_code == 429 and "sending 1 upload(s) already" in second.json()["error"], second.text
        b = slow_upload(tokens["b@x.edu"])
        receiving(2)
        third = c.post(JOBS, content=tiny_zip("c"), headers=bearer(tokens["c@x.edu"]))
        assert third.status_code == 503 and "receiving 2 uploads already" in third.json()["error"], third.text
        assert int(third.headers["Retry-After"]) >= 1
        with a, b:
            cut = closed_within(a, started + 15, trickle=b"P" * 100)  # one byte every 0.25 s: too slow
            assert cut is not None and cut.startswith(b"HTTP/1.1 408"), cut
            assert time.monotonic() - started >= 1.5  # cut at its limit, not before; closed_within is the net
            stalled = closed_within(b, started + 15)
            assert stalled is not None and stalled.startswith(b"HTTP/1.1 408"), stalled
        receiving(0)
        assert "too slow" in svc.log_text()
        ok = c.post(JOBS, content=tiny_zip("c"), headers=bearer(tokens["c@x.edu"]))  # the slots are free again
        assert ok.status_code == 202, ok.text


def test_an_unhandled_error_is_a_json_500_without_internals_logged_once(svc):
    from grader.serve.app import INTERNAL_ERROR  # FastAPI's import, here: every worker collects this file

    db = sqlite3.connect(svc.data / "jobs.sqlite")
    db.execute("insert into jobs (id, owner, kind, state, archive_sha, key, ord, created, record) "
               "values ('BROKENBROKENBROKEN01', 'token:x', 'selfcheck', 'done', 's', 'k', 0, 0, '{not json')")
    db.commit()
    db.close()
    with svc.client() as c:
        before = full_log(svc).count("Traceback (most recent call last)")
        r = c.get(f"{JOBS}/BROKENBROKENBROKEN01")
        assert r.status_code == 500 and r.json() == {"error": INTERNAL_ERROR}
        assert r.headers["content-type"] == "application/json"
        assert c.get("/healthz").status_code == 200  # the service itself goes on
    log = full_log(svc)
    assert log.count("Traceback (most recent call last)") - before == 1, log
    assert log.count(f"GET {JOBS}/BROKENBROKENBROKEN01 failed") == 1 and "JSONDecodeError" in log
    assert "Exception in ASGI application" not in log  # uvicorn did not log it a second time
    assert uploads(svc) == []
    assert httpx.get(f"{svc.url}/healthz").json()["ok"] is True


def test_a_refused_upload_closes_its_connection_so_idle_refused_clients_cannot_fill_the_service(tmp_path):
    """A client with no credential announces a body, takes its 401, then sends a byte now and then and
    never more: the service closes the connection after the answer (it never reads that body). So
    refused clients cannot hold the service's connections until a fresh client gets a 503."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "serve.yaml").write_text("max_connections: 12\nheader_timeout_s: 5\n")
    tokens = issue_tokens(data, ["over@x.edu"])
    with ServiceProcess(data, "--no-workers", "--per-hour", "1") as svc, svc.client() as c:
        first = c.post(JOBS, content=tiny_zip("first"), headers=bearer(tokens["over@x.edu"]))
        assert first.status_code == 202, first.text

        def refused(headers: str) -> tuple[socket.socket, bytes]:
            s = socket.create_connection(("127.0.0.1", svc.port), timeout=10)
            s.sendall(f"POST {JOBS} HTTP/1.1\r\nHost: x\r\nContent-Type: application/zip\r\n{headers}"
                      "Content-Length: 10485760\r\n\r\n".encode())
            answer = b""
            deadline = time.monotonic() + 10
            while b"\r\n\r\n" not in answer and time.monotonic() < deadline:
                answer += s.recv(65536)
            return s, answer

        held = []
        for k in range(20):  # more than max_connections, one after another
            who = f"Authorization: Bearer {tokens['over@x.edu']}\r\n" if k % 2 else ""
            s, answer = refused(who)
            assert answer.startswith(b"HTTP/1.1 401" if not who else b"HTTP/1.1 429"), answer[:200]
            assert b"connection: close" in answer.lower(), answer[:400]
            closed = closed_within(s, time.monotonic() + 3, trickle=b"P" * 20)
            assert closed is not None, f"refused connection {k} was still open 3 s after its answer"
            held.append(s)
        assert c.get("/healthz").status_code == 200  # a fresh client is still served
        for s in held:
            s.close()
