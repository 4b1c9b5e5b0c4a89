"""The service stays up for honest students under hostile clients, with real processes.

Each test starts the real service (``python -m grader serve``: uvicorn and its worker processes, or
Redis), runs one attack of the red team's report, and shows that during it an honest student's
self-check and a signed Gradescope post both get graded. Gradings are the stand-in grade command
(tests/standin_grader.py: a real child writing a real results.json), since the service treats a
grading as a black box. Attackers connect from 127.0.0.2 (another address on loopback), honest
clients from 127.0.0.1, so the caps per address are what is tested, not a shared one.

No test asserts a duration: each waits with a generous timeout against a hang only.
"""
from __future__ import annotations

import io
import socket
import sqlite3
import struct
import subprocess
import threading
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from grader.serve.client import Client, ServiceError
from grader.serve.signing import submitter_id
from tests.serve_helpers import (
    ROOT,
    ServiceProcess,
    bearer,
    hand_worker,
    hand_worker_command,
    hand_worker_env,
    issue_tokens,
    make_secret,
    proc_states,
    redis_server,
    tiny_zip,
    tree_of,
    wait_job,
)
from tests.serve_standin import AnyHealth

JOBS = "/api/v1/jobs"
ATTACKER = "127.0.0.2"
ASSIGNMENT = "hw1"
HANG_S = 180.0  # against a hang only
FAST_CLOCKS = "header_timeout_s: 2\nupload_timeout_s: 20\n"
STANDIN = "delay=0.3"  # the stand-in's words: a grading of 0.3 s


def _loopback_alias_works() -> bool:
    with socket.socket() as srv, socket.socket() as cli:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        try:
            cli.bind((ATTACKER, 0))
            cli.connect(srv.getsockname())
        except OSError:
            return False
    return True


pytestmark = pytest.mark.skipif(not _loopback_alias_works(), reason="127.0.0.2 is not usable on this loopback")


class World:
    """A running service with an honest student's token and the assignment's secret."""

    def __init__(self, svc: ServiceProcess, tokens: dict[str, str], secret: bytes):
        self.svc, self.tokens, self.secret = svc, tokens, secret

    def attacker_socket(self) -> socket.socket:
        s = socket.socket()
        s.settimeout(HANG_S)
        s.bind((ATTACKER, 0))
        s.connect(("127.0.0.1", self.svc.port))
        return s

    def honest(self, tag: str, standin: str = "") -> None:
        """The honest student's self-check and a signed Gradescope post, each sent as its client does
        (the bridge tries a busy service again; a student tries again when told to), both graded (``standin``:
        the stand-in's words for both gradings)."""
        with Client(self.svc.url, token=self.tokens["honest@x.edu"]) as student, \
                Client(self.svc.url, assignment=ASSIGNMENT, secret=self.secret) as gradescope:
            mine = _patiently(lambda: student.submit(_zip(f"honest self-check {tag}", standin)))
            theirs = _patiently(lambda: gradescope.submit(_zip(f"honest gradescope {tag}", standin),
                                                          submitter=submitter_id(self.secret, [f"honest {tag}"])))
            for job in (mine, theirs):
                assert student.wait(job.id, HANG_S, first_delay_s=0.1, max_delay_s=0.2).state == "done", \
                    self.svc.log_text()


def _patiently(post):
    deadline = time.monotonic() + HANG_S
    while True:
        try:
            return post()
        except ServiceError as exc:
            if time.monotonic() > deadline or not (exc.passing or exc.status == 429):
                raise
            time.sleep(min(exc.retry_after or 1.0, 2.0))


def _zip(tag: str, standin: str = "") -> bytes:
    """A one-file archive unique to ``tag`` (tests/serve_helpers.py: tiny_zip), with the stand-in's words for its
    grading when given (its STANDIN.txt)."""
    if not standin:
        return tiny_zip(tag)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, text in (("NOTES.txt", tag), ("STANDIN.txt", standin)):
            zf.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), text)
    return buf.getvalue()


SHARED_YAML = "limits:\n  submissions_per_hour: 3\n"


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> tuple[ServiceProcess, bytes]:
    """One service for the attacks that need no settings of their own but three submissions an hour per token:
    each test gets tokens of its own (:func:`_shared_world`: a token's hour and its jobs at once are its own), and
    leaves nothing queued or running."""
    data, _, secret = _world(tmp_path_factory.mktemp("shared"), SHARED_YAML)
    with ServiceProcess(data, "--workers", "1", standin=STANDIN) as svc:
        svc.wait_workers(1)
        yield svc, secret


def _shared_world(shared: tuple[ServiceProcess, bytes], tag: str) -> tuple[World, str]:
    """The shared service, an honest student's token and an attacker's, both new."""
    svc, secret = shared
    tokens = issue_tokens(svc.data, [f"honest-{tag}@x.edu", f"attacker-{tag}@x.edu"])
    return World(svc, {"honest@x.edu": tokens[f"honest-{tag}@x.edu"]}, secret), tokens[f"attacker-{tag}@x.edu"]


def _world(tmp_path: Path, yaml: str = "", *args: str, env: dict[str, str] | None = None) -> tuple[Path, dict, bytes]:
    data = tmp_path / "data"
    data.mkdir()
    (data / "serve.yaml").write_text(FAST_CLOCKS + yaml)
    tokens = issue_tokens(data, ["honest@x.edu"] + [f"attacker{i}@x.edu" for i in range(8)])
    return data, tokens, make_secret(data, ASSIGNMENT)


def _closed(s: socket.socket) -> bytes:
    """Everything the service sent on ``s`` until it closed it (a hang past HANG_S fails the test)."""
    got = b""
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk


# ---------------------------------------------------------------------------------------------------
# 1. Connections held by announced bodies that nobody reads, without a credential
# ---------------------------------------------------------------------------------------------------
def test_held_connections_without_credentials_are_refused_and_closed(tmp_path):
    data, tokens, secret = _world(tmp_path, "anonymous_per_ip_per_minute: 20\n")
    with ServiceProcess(data, "--workers", "1", standin=STANDIN) as svc:
        w = World(svc, tokens, secret)
        held = []
        for _ in range(40):  # more than connections_per_ip (16)
            s = w.attacker_socket()
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\nA")
            held.append(s)
        w.honest("during held connections")
        answers = [_closed(s) for s in held]
        for s in held:
            s.close()
        trickled = w.attacker_socket()  # a body on a path nobody reads, one byte at a time
        trickled.sendall(b"POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\nA")
        assert all(a.startswith((b"HTTP/1.1 400", b"HTTP/1.1 503")) for a in answers), answers[:3]
        assert any(b"carries no body" in a for a in answers) and any(b"too many connections" in a for a in answers)
        deadline = time.monotonic() + HANG_S
        answered = b""
        while (got := _poll(trickled)) != b"":  # the trickle is closed once it falls under the minimum rate
            assert time.monotonic() < deadline, "a trickled body was never cut off"
            answered += got or b""
            try:
                trickled.sendall(b"A")
            except OSError:
                break
            time.sleep(0.5)
        trickled.close()
        assert answered.startswith(b"HTTP/1.1 404"), answered  # answered, then cut: its body is read by nobody
        assert httpx.get(svc.url + "/healthz", timeout=10).status_code == 200
        statuses = []
        for _ in range(25):  # requests without credentials from one address: capped per minute
            s = w.attacker_socket()
            s.sendall(b"GET /api/v1/queue HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            statuses.append(_closed(s)[:12])
            s.close()
        ok = statuses.count(b"HTTP/1.1 200")  # 20 a minute, less the trickle's own request if still within it
        assert ok in (19, 20) and statuses == [b"HTTP/1.1 200"] * ok + [b"HTTP/1.1 429"] * (25 - ok), statuses
        w.honest("after the address's minute is used up")


def _poll(s: socket.socket) -> bytes | None:
    """What the service sent on ``s`` now: None when nothing, b"" when it closed the connection."""
    s.settimeout(0.01)
    try:
        return s.recv(65536)
    except (TimeoutError, BlockingIOError):
        return None
    except OSError:
        return b""
    finally:
        s.settimeout(HANG_S)


# ---------------------------------------------------------------------------------------------------
# 2. Trickled uploads from several tokens, started again as soon as each is cut
# ---------------------------------------------------------------------------------------------------
def test_trickled_uploads_cannot_take_every_slot_and_each_one_counts(tmp_path):
    data, tokens, secret = _world(tmp_path, "connections_per_ip: 0\n")
    with ServiceProcess(data, "--workers", "1", standin=STANDIN) as svc:
        w = World(svc, tokens, secret)
        stop, seen = threading.Event(), []

        def trickle(token: str) -> None:
            while not stop.is_set():
                s = w.attacker_socket()
                head = (f"POST {JOBS} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
                        f"Content-Type: application/zip\r\nContent-Length: {19 * 1024 * 1024}\r\n\r\nPK").encode()
                try:
                    s.sendall(head)
                    for _ in range(30):  # a refusal from the head comes first (before more bytes make a reset)
                        got = _poll(s)
                        if got is not None:
                            break
                        time.sleep(0.05)
                    while not stop.is_set():
                        if got is not None:
                            seen.append(got)
                            break
                        got = _poll(s)
                        if got is not None:
                            seen.append(got)
                            break
                        s.sendall(b"x" * 512)
                        time.sleep(0.5)
                except OSError:
                    pass
                s.close()

        threads = [threading.Thread(target=trickle, args=(tokens[f"attacker{i}@x.edu"],), daemon=True)
                   for i in range(8) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            time.sleep(1.0)  # the attack is under way
            w.honest("during trickled uploads")
            # The Gradescope path has slots kept for it: its post is received at the first try.
            with Client(svc.url, assignment=ASSIGNMENT, secret=secret) as gradescope:
                first = gradescope.submit(tiny_zip("gradescope at once"), submitter=submitter_id(secret, ["once"]))
                assert first.state in ("queued", "running", "done")
            # The attack goes on until the service has cut a trickle and refused one from its head: the honest
            # posts above can be served before the first trickle outlives header_timeout_s on a quiet machine.
            deadline = time.monotonic() + HANG_S
            while not {b"HTTP/1.1 408", b"HTTP/1.1 429"} <= {bytes(a[:12]) for a in list(seen) if a}:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
    statuses = {bytes(a[:12]) for a in seen if a}
    assert b"HTTP/1.1 408" in statuses, statuses  # cut for being too slow
    assert b"HTTP/1.1 429" in statuses, statuses  # and, once the cut ones used up the hour, refused from the head
    assert "refused and counted" in svc.log_text()


# ---------------------------------------------------------------------------------------------------
# 3. A zip of 200,000 entries, posted again and again
# ---------------------------------------------------------------------------------------------------
def _many_entries(n: int = 200_000) -> bytes:
    """A zip of ``n`` (over 65,535: ZIP64's end records) empty folders whose last central directory entry is broken:
    the bytes zipfile writes for them (ZIP_STORED, one date), made from its one-entry zip's headers with only the
    names and offsets changed (zipfile's own writing, entry by entry, is many times slower)."""
    assert n > 0xFFFF
    one = io.BytesIO()
    with zipfile.ZipFile(one, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(zipfile.ZipInfo("d/000000/", date_time=(2024, 1, 1, 0, 0, 0)), b"")
    template = one.getvalue()
    local = template[:30]  # its local header, less its name
    at = template.index(b"PK\x01\x02")
    central = template[at:at + 42]  # its central directory entry, up to its local header's offset
    names = [b"d/%06d/" % i for i in range(n)]
    body = b"".join(local + name for name in names)
    directory = b"".join(central + struct.pack("<L", i * (30 + len(name))) + name for i, name in enumerate(names))
    offset, size = len(body), len(directory)
    zip64_end = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, size, offset)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, offset + size, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, size, offset, 0)
    raw = bytearray(body + directory + zip64_end + locator + end)
    last = raw.rfind(b"PK\x01\x02")  # the last central directory entry, broken
    raw[last:last + 4] = b"PK\x09\x09"
    return bytes(raw)


def test_a_zip_of_200k_entries_is_refused_from_its_end_record_and_counted(shared):
    w, attacker = _shared_world(shared, "bomb")  # 3 submissions an hour
    bomb = _many_entries()
    with w.svc.client() as c:
        answers = [c.post(JOBS, content=bomb, headers=bearer(attacker)) for _ in range(3)]
        for r in answers:
            assert r.status_code == 400 and "200000 entries" in r.json()["error"], r.text
        w.honest("after the 200k-entry zips")
        fourth = c.post(JOBS, content=tiny_zip("a fourth"), headers=bearer(attacker))
        assert fourth.status_code == 429 and "per hour" in fourth.json()["error"], fourth.text


# ---------------------------------------------------------------------------------------------------
# 4. One submitter's burst of signed Gradescope posts
# ---------------------------------------------------------------------------------------------------
def test_one_submitters_burst_leaves_one_job_ahead_of_another_student(tmp_path):
    data, tokens, secret = _world(tmp_path)
    with ServiceProcess(data, "--no-workers", standin=STANDIN) as svc:
        burst = submitter_id(secret, ["burst"])
        with Client(svc.url, assignment=ASSIGNMENT, secret=secret) as gradescope:
            jobs = [gradescope.submit(tiny_zip(f"burst {i}"), submitter=burst) for i in range(30)]
        with Client(svc.url, token=tokens["honest@x.edu"]) as student:
            mine = student.submit(tiny_zip("another student"))
        assert mine.position is not None and mine.position <= 2, mine
        with svc.client() as c:
            states = [c.get(f"{JOBS}/{j.id}").json() for j in jobs]
        assert all(s["state"] == "failed" and s["error"].startswith("superseded") for s in states[:-1])
        assert [s["superseded_by"] for s in states[:-1]] == [j.id for j in jobs[1:]]  # each by the next one
        assert states[-1]["state"] == "queued"
        with hand_worker(data, "after-burst", standin=STANDIN), svc.client() as c:  # a worker comes: the two jobs left are graded
            assert wait_job(c, mine.id, timeout_s=HANG_S, service=svc)["state"] == "done"
            assert wait_job(c, jobs[-1].id, timeout_s=HANG_S, service=svc)["state"] == "done"
            World(svc, tokens, secret).honest("after a burst")


# ---------------------------------------------------------------------------------------------------
# 5. Zombies: gradings leave exited children to the worker, a subreaper
# ---------------------------------------------------------------------------------------------------
def _zombies_under(root: int) -> list[int]:
    tree = tree_of(root)
    return [pid for pid, (state, ppid) in proc_states().items() if state == b"Z" and ppid in tree]


def test_gradings_in_a_row_leave_no_zombies_and_a_flat_process_count(shared):
    w, _ = _shared_world(shared, "zombies")
    svc, secret = w.svc, w.secret
    zombies = "delay=0 zombies=3"  # each grading leaves 3 exited children unreaped, as the grader's sandboxed steps do
    with svc.client() as c:
        assert svc.proc is not None
        before = len(tree_of(svc.proc.pid))
        with Client(svc.url, assignment=ASSIGNMENT, secret=secret) as gradescope:
            # Each from its own submitter: none supersedes another. The worker reaps after every grading, so one
            # child left per grading would show after the first; ten in a row show the count stays flat.
            for i in range(10):
                job = gradescope.submit(_zip(f"row {i}", zombies), submitter=submitter_id(secret, [f"row {i}"]))
                assert wait_job(c, job.id, timeout_s=HANG_S, service=svc)["state"] == "done"
        assert _zombies_under(svc.proc.pid) == []
        assert len(tree_of(svc.proc.pid)) == before
        w.honest("after 10 gradings", zombies)
        assert _zombies_under(svc.proc.pid) == []


# ---------------------------------------------------------------------------------------------------
# 6. Two workers with one name
# ---------------------------------------------------------------------------------------------------
def test_a_second_worker_with_a_taken_name_refuses_to_start(shared):
    """A worker started by hand beside the shared service's own (a second host's, say), then another of its name:
    the second refuses to start, and the honest gradings go on beside them."""
    w, _ = _shared_world(shared, "clone")
    svc = w.svc
    with hand_worker(svc.data, "clone", standin=STANDIN) as clone_log:
        svc.wait_workers(2)  # the service's own and the clone
        second = subprocess.run(hand_worker_command(svc.data, "clone", standin=True), cwd=ROOT, env=hand_worker_env(STANDIN),
                                capture_output=True, text=True, timeout=HANG_S)
        assert second.returncode == 2, second.stderr
        assert "the worker name 'clone' is taken by a live worker" in second.stderr
        assert "another --name" in second.stderr
        w.honest("beside a refused clone")
    assert "outcome was dropped" not in svc.log_text() + clone_log.read_text(errors="replace")


# ---------------------------------------------------------------------------------------------------
# 7. A full disk
# ---------------------------------------------------------------------------------------------------
def test_a_full_disk_is_reported_by_healthz_and_refused_in_a_sentence(tmp_path):
    data, tokens, secret = _world(tmp_path, "min_free_mib: 1000000000000\n")  # more than any disk: "full"
    with AnyHealth(data, "--workers", "1", standin=STANDIN) as svc, svc.client() as c:
        health = c.get("/healthz")
        assert health.status_code == 503 and health.json()["disk"] == "full", health.text
        r = c.post(JOBS, content=tiny_zip("on a full disk"), headers=bearer(tokens["honest@x.edu"]))
        assert r.status_code == 503 and "no room left" in r.json()["error"], r.text
        assert int(r.headers["Retry-After"]) >= 1
    (data / "serve.yaml").write_text(FAST_CLOCKS)  # the disk has room again
    with ServiceProcess(data, "--workers", "1", standin=STANDIN) as svc2, svc2.client() as c:
        assert c.get("/healthz").json()["disk"] == "ok"
        World(svc2, tokens, secret).honest("once the disk has room")


# ---------------------------------------------------------------------------------------------------
# 8. One record this version cannot read, in a shared Redis and in SQLite
# ---------------------------------------------------------------------------------------------------
BAD_RECORD = ('{"id": "badbadbadbadbadbad", "kind": "gpu-v9", "owner": "token:x", "label": "x", "archive_sha": "a", '
              '"key": "k", "created": 1.0, "state": "queued"}')


def test_a_record_of_an_unknown_kind_in_redis_fails_only_itself(tmp_path):
    import redis

    data, tokens, secret = _world(tmp_path)
    with redis_server(tmp_path / "redis") as url:
        r = redis.Redis.from_url(url)
        r.set("grader:job:badbadbadbadbadbad", BAD_RECORD)
        r.zadd("grader:state:queued", {"badbadbadbadbadbad": 1e12})
        with ServiceProcess(data, "--workers", "1", "--queue", url, standin=STANDIN) as svc, svc.client() as c:
            assert c.get("/healthz").status_code == 200
            assert c.get("/api/v1/queue").status_code == 200
            World(svc, tokens, secret).honest("beside an unreadable record")
            bad = c.get(f"{JOBS}/badbadbadbadbadbad")
            assert bad.status_code == 500 and "another version of the service" in bad.json()["error"]
        r.close()
    assert "job badbadbadbadbadbad: its record cannot be read by this version" in svc.log_text()
    assert "'gpu-v9' is not a valid Kind" in svc.log_text()


def test_a_record_of_an_unknown_kind_in_sqlite_fails_only_itself(shared):
    w, _ = _shared_world(shared, "unreadable")
    svc = w.svc
    db = sqlite3.connect(svc.data / "jobs.sqlite")
    try:
        with svc.client() as c:
            db.execute("insert into jobs (id, owner, kind, state, archive_sha, key, ord, created, record) "
                       "values ('badbadbadbadbadbad', 'token:x', 'gpu-v9', 'queued', 'a', 'k', 1e12, 1.0, ?)",
                       (BAD_RECORD,))
            db.commit()
            assert c.get("/healthz").status_code == 200
            assert c.get("/api/v1/queue").status_code == 200
            w.honest("beside an unreadable record")
            bad = c.get(f"{JOBS}/badbadbadbadbadbad")
            assert bad.status_code == 500 and "another version of the service" in bad.json()["error"]
        assert "its record cannot be read by this version" in svc.log_text()
    finally:  # the shared service's store as it was
        db.execute("delete from jobs where id = 'badbadbadbadbadbad'")
        db.commit()
        db.close()
