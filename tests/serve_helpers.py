"""Real processes for the grading service's tests: ``python -m grader serve`` and redis-server.

:class:`ServiceProcess` starts the service exactly as an instructor would (uvicorn and its worker
processes inside), on a free port, and stops it with SIGTERM. Gradings are static (``--no-gpu``)
and, to keep the tests short, of one stage (``--stages naive``). With ``standin=`` its workers grade with
tests/standin_grader.py (``--grade-command``) instead of the grader: a real child that writes a real
results.json after a controlled delay, told how to behave by ``key=value`` words (see that file).
"""
from __future__ import annotations

import io
import os
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
STAGES = "naive"  # one stage: a static grading of it takes a few seconds
STANDIN = ROOT / "tests" / "standin_grader.py"
STANDIN_COMMAND = shlex.join([sys.executable, str(STANDIN)])
# An idle worker's look at the SQLite queue (serve.yaml's queue_poll_s, 0.5 s by default): a test's job is taken
# within this, where the queue's order and not its latency is what the tests check.
QUEUE_POLL_S = "0.05"
# One TLS context for every HTTP client here: without it httpx builds a context and loads the CA bundle into it for
# each client, and the helpers below poll every 0.05-0.2 s. Every URL here is plain http://.
TLS = ssl.create_default_context()


def poller() -> httpx.Client:
    """The helpers' own requests (/healthz): a connection each, none kept open, as ``httpx.get`` makes them."""
    return httpx.Client(verify=TLS, limits=httpx.Limits(max_keepalive_connections=0))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def zip_folder(folder: Path, extra: dict[str, str] | None = None) -> bytes:
    """The folder as a zip (fixed timestamps: the same folder gives the same bytes), plus ``extra`` files
    (which replace the folder's files of the same names)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            if str(path.relative_to(folder)) in (extra or {}):
                continue
            info = zipfile.ZipInfo(str(path.relative_to(folder)), date_time=(2024, 1, 1, 0, 0, 0))
            zf.writestr(info, path.read_bytes())
        for name, text in (extra or {}).items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), text)
    return buf.getvalue()


def future_zip() -> bytes:
    """A zip of a version Python's zipfile does not read (it raises NotImplementedError, not BadZipFile)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        info = zipfile.ZipInfo("gemm/naive.cu", date_time=(2024, 1, 1, 0, 0, 0))
        info.extract_version = 150  # "zip 15.0"
        zf.writestr(info, "__global__ void k() {}\n")
    return buf.getvalue()


def issue_tokens(data: Path, labels: list[str], expires_days: float | None = 30,
                 now: float | None = None) -> dict[str, str]:
    from grader.serve.auth import Tokens

    issued, _ = Tokens(data).issue(labels, expires_days, now=now)
    return {label: token for label, _, token in issued}


def make_secret(data: Path, assignment: str) -> bytes:
    from grader.serve.auth import Secrets
    from grader.serve.signing import secret_from_text

    text = Secrets(data).create(assignment, rotate=True)
    assert text is not None
    return secret_from_text(text)


# A stage file whose compile never ends by itself, in any sandbox: one `#if` whose expression expands to
# 2^26 terms keeps the preprocessor busy, in constant memory, for far longer than any test waits
# (over 20 s on a 2-core machine), so a grading of it always outlives a short limit and is stopped
# while nvcc and its children run.
ENDLESS_COMPILE = "\n".join(
    ["// Compiles for ever, in constant memory: the #if below expands to 2^26 terms.", "#define G0 1"]
    + [f"#define G{i} (G{i - 1} + G{i - 1})" for i in range(1, 27)]
    + ["#if G26 > 0",
       'extern "C" __global__ void mmNaive(const float* A, const float* B, float* C, int N) { C[0] = 0.0f; }',
       "#endif", ""])


def endless_compile(folder: Path, tag: str) -> bytes:
    """``folder`` (a submission) zipped with its naive stage replaced by :data:`ENDLESS_COMPILE`."""
    return zip_folder(folder, {"gemm/naive.cu": ENDLESS_COMPILE, "NOTES.txt": tag})


def proc_states() -> dict[int, tuple[bytes, int]]:
    """Every process, zombies included: (state, parent), read from /proc here (the tests' own reading,
    not the grader's)."""
    out: dict[int, tuple[bytes, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_bytes().rpartition(b")")[2].split()
            except OSError:
                continue
            if len(fields) > 1:
                out[int(entry)] = (fields[0], int(fields[1]))
    return out


def tree_of(root: int) -> set[int]:
    """``root`` and its live descendants (:func:`proc_states`)."""
    parent = {pid: ppid for pid, (state, ppid) in proc_states().items() if state not in (b"Z", b"X")}
    tree = {root}
    grew = True
    while grew:
        more = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return tree


def cmdlines() -> dict[int, str]:
    """Every process's command line (NUL-separated arguments joined by spaces)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if raw:
                out[int(entry)] = raw.replace(b"\0", b" ").decode("utf-8", "replace")
    return out


def pids_matching(*needles: str) -> list[int]:
    return [pid for pid, cmd in cmdlines().items() if all(n in cmd for n in needles)]


def describe(pids: list[int]) -> str:
    """Each process's state, parent, session and command line, for a failure's message."""
    lines = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            lines.append(f"{pid}: gone")
            continue
        lines.append(f"{pid}: state {stat[0]}, parent {stat[1]}, session {stat[3]}: {cmd[:300]}")
    return "\n".join(lines)


def tree_until(root: int, marks: tuple[str, ...] = ("cc1plus",), before: frozenset[int] | set[int] = frozenset(),
               running: Callable[[], bool] = lambda: True, timeout_s: float = 60.0) -> set[int] | None:
    """Every process seen in ``root``'s tree (less ``before``) until one whose command names one of
    ``marks`` runs (by default nvcc's preprocessor, which no probe of nvcc starts: an endless compile
    is under way); None when none did within ``timeout_s`` or while ``running()``."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and running():
        seen |= tree_of(root) - before
        if any(mark in cmd for pid, cmd in cmdlines().items() if pid in seen for mark in marks):
            return seen | (tree_of(root) - before)
        time.sleep(0.05)
    return None


def hand_worker_command(data: Path, name: str, *, standin: bool = False) -> list[str]:
    """``serve worker`` started by hand on a service's data folder (as on a second host): no GPU, the tests' stage,
    the tests' queue poll; with ``standin``, grading with the stand-in grade command (tests/standin_grader.py)."""
    cmd = [sys.executable, "-m", "grader", "serve", "worker", "--data", str(data), "--no-gpu", "--stages", STAGES,
           "--queue-poll-s", QUEUE_POLL_S, "--name", name]
    return cmd + (["--grade-command", STANDIN_COMMAND] if standin else [])


def hand_worker_env(standin: str | None = None) -> dict[str, str]:
    """The environment of :func:`hand_worker_command`: ``standin`` is the stand-in's words (GRADER_STANDIN)."""
    return {**os.environ, **({"GRADER_STANDIN": standin} if standin is not None else {})}


@contextmanager
def hand_worker(data: Path, name: str, *, standin: str | None = None) -> Iterator[Path]:
    """A :func:`hand_worker_command` worker running (grading with the stand-in when ``standin``, its words, is
    given), stopped (SIGTERM) afterwards. Yields its log's path, beside the data folder."""
    log_path = data.parent / f"{name}.log"
    with open(log_path, "ab") as log:
        worker = subprocess.Popen(hand_worker_command(data, name, standin=standin is not None), cwd=ROOT,
                                  env=hand_worker_env(standin), stdout=log, stderr=subprocess.STDOUT)
        try:
            yield log_path
        finally:
            worker.terminate()
            worker.wait(timeout=60)


class ServiceProcess:
    def __init__(self, data: Path, *args: str, stages: str = STAGES, gpu: bool = False,
                 env: dict[str, str] | None = None, standin: str | None = None):
        """``args``: more ``serve`` flags; ``gpu``: grade on the GPU (give ``--gpus``) instead of ``--no-gpu``;
        ``env``: variables set for the service (and so its workers and gradings) besides this process's;
        ``standin``: grade with tests/standin_grader.py, these words its default behaviour ("" for its own)."""
        self.data, self.args, self.stages, self.gpu = data, list(args), stages, gpu
        self.env = dict(env or {})
        if standin is not None:
            self.args += ["--grade-command", STANDIN_COMMAND]
            self.env["GRADER_STANDIN"] = standin
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.poller = poller()
        self.log_path = data.parent / f"{data.name}-serve-{self.port}.log"

    def start(self, timeout_s: float = 60.0) -> ServiceProcess:
        if self.poller.is_closed:
            self.poller = poller()
        cmd = [sys.executable, "-m", "grader", "serve", *([] if self.gpu else ["--no-gpu"]), "--data", str(self.data),
               "--host", "127.0.0.1",
               "--port", str(self.port), "--queue-poll-s", QUEUE_POLL_S,
               *(["--stages", self.stages] if self.stages else []), *self.args]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, **self.env})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"the service exited with {self.proc.returncode}:\n{self.log_text()}")
            try:
                if self.ready(self.poller.get(self.url + "/healthz", timeout=2)):
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)  # a refused connection costs next to nothing: look often
        self.stop()
        pytest.fail(f"the service did not answer /healthz in {timeout_s:g} s:\n{self.log_text()}")

    def ready(self, health: httpx.Response) -> bool:
        """Whether the service has started, by its /healthz answer: healthy."""
        return health.status_code == 200

    def wait_workers(self, n: int, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.poller.get(self.url + "/healthz", timeout=5).json().get("workers", 0) >= n:
                return
            time.sleep(0.2)
        pytest.fail(f"{n} worker(s) did not register in {timeout_s:g} s:\n{self.log_text()}")

    def stop(self, timeout_s: float = 40.0) -> None:
        self.poller.close()
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            pytest.fail(f"the service did not stop on SIGTERM in {timeout_s:g} s:\n{self.log_text()}")
        finally:
            self.log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() else ""

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, verify=TLS)

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def wait_job(client: httpx.Client, job_id: str, states=("done", "failed"), timeout_s: float = 90.0,
             service: ServiceProcess | None = None) -> dict:
    deadline = time.monotonic() + timeout_s
    view: dict = {}
    while time.monotonic() < deadline:
        view = client.get(f"/api/v1/jobs/{job_id}").json()
        if view.get("state") in states:
            return view
        time.sleep(0.2)  # each look is a request the service answers: more often costs about what it saves
    pytest.fail(f"job {job_id} did not reach {states} in {timeout_s:g} s: {view}\n"
                + (service.log_text() if service else ""))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/zip"}


def signed(secret: bytes, assignment: str, body: bytes, path: str = "/api/v1/jobs", **kw) -> dict[str, str]:
    from grader.serve.signing import ASSIGNMENT_HEADER, sign

    return {ASSIGNMENT_HEADER: assignment, "Content-Type": "application/zip", **sign(secret, "POST", path, body, **kw)}


SLOW_SERVICE = """
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Slow(BaseHTTPRequestHandler):
    def answer(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer({"id": "slowjob0123456789abcdef", "state": "queued", "deduplicated": False})

    def do_GET(self):
        time.sleep(float(sys.argv[2]))
        self.answer({"tests": []} if "/files/" in self.path else {"state": "done", "files": ["results.json"]})

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Slow).serve_forever()
"""


@contextmanager
def slow_service(delay_s: float):
    """A stand-in grading service (a real HTTP server process) that takes a job at once and answers
    every GET after ``delay_s`` (an overloaded service); yields its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SLOW_SERVICE, str(port), str(delay_s)])
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("the stand-in service did not start")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


@contextmanager
def redis_server(folder: Path):
    """A private redis-server on a free port (skips the test where redis-server is not installed)."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server); CI installs it")
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        r = redis.Redis.from_url(url)
        deadline = time.monotonic() + 20
        while True:
            try:
                r.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("redis-server did not start")
                time.sleep(0.1)
        r.close()
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def tiny_zip(tag: str) -> bytes:
    """A valid one-file archive, different for each tag (jobs that must not be deduplicated)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(zipfile.ZipInfo("NOTES.txt", date_time=(2024, 1, 1, 0, 0, 0)), tag)
    return buf.getvalue()
