"""The fence the attack tests run the grader in, and what they look at afterwards.

`grade()` runs grader/run_local.py in a child process under an address-space cap (RLIMIT_AS; left off for
GPU runs, whose CUDA context reserves far more address space than it uses), a file-size cap (RLIMIT_FSIZE)
and a wall-clock limit, in its own session so that a run past the limit can be killed whole. Afterwards it
looks through /proc for any process of the case still alive (by the case's folders, the grader's session or
the daemons' marker), records and ends them. `Jobs` runs such gradings a few at a time in threads.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_LOCAL = ROOT / "grader" / "run_local.py"
AS_CAP = 6 << 30  # bytes of address space per process: a bomb dies here, not in the machine's swap
FSIZE_CAP = 512 << 20  # bytes per file written: an extracted zip bomb or a preprocessor flood stops here
DAEMON_TAG = "gemm-attack-"  # the hostile cases' daemons run under names that start with this
FAKE_RESULTS = "gemm-attack-fake-results"  # what those daemons write into a results.json they find

# Runs in the child before the grader: set the caps, then become the grader (exec keeps the pid).
_FENCE = """import os, resource, sys
for name, n in {caps!r}:
    resource.setrlimit(getattr(resource, name), (n, n))
os.execv(sys.argv[1], sys.argv[1:])
"""


@dataclass
class Graded:
    """One fenced run of the grader: how it ended and what it left behind."""

    rc: int | None
    wall_s: float
    timed_out: bool
    limit_s: float
    out: Path
    stderr: str
    leftovers: list[str] = field(default_factory=list)  # processes of the case alive after it, as text

    @property
    def results(self) -> dict | None:
        try:
            data = json.loads((self.out / "results.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    @property
    def tests(self) -> dict[str, dict]:
        return {str(t.get("number")): t for t in (self.results or {}).get("tests", []) if isinstance(t, dict)}

    def text(self, name: str = "results.json") -> str:
        path = self.out / name
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def _proc_info(pid: str) -> tuple[str, str, int, str] | None:
    """(cmdline, cwd, session id, state) of a live process, or None."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        stat = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        return cmd, cwd, int(stat[3]), stat[0].decode()
    except (OSError, IndexError, ValueError):
        return None


def case_processes(paths: list[str], session: int | None = None) -> dict[int, str]:
    """Live processes of a case: in ``session``, run from or naming one of ``paths``, or a daemon's tag."""
    found = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        info = _proc_info(pid)
        if info is None or info[3] in ("Z", "X"):
            continue
        cmd, cwd, sid, _ = info
        if (sid == session or DAEMON_TAG in cmd.split(" ", 1)[0]
                or any(p + "/" in cmd or p + " " in cmd + " " or (cwd + "/").startswith(p + "/") for p in paths)):
            found[int(pid)] = f"pid {pid} (cwd {cwd}): {cmd[:300]}"
    return found


def end_processes(procs: dict[int, str]) -> None:
    """SIGKILL these processes (started by this test's grading), one by one, by pid."""
    for pid in procs:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def grade(sub: Path, work: Path, stages: list[str] | None, *extra: str, rubric: Path, gpu: bool = False,
          limit_s: float = 120.0, env: dict[str, str] | None = None, command: list[str] | None = None) -> Graded:
    """Grade ``sub`` into ``work/out`` with the grader fenced; ``command`` replaces run_local's own arguments."""
    out = work / "out"
    tmp = work / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    args = command or [str(sub), "--out", str(out), "--quiet", "--rubric", str(rubric),
                       *(["--stages", ",".join(stages)] if stages else []), *([] if gpu else ["--no-gpu"]), *extra]
    caps = [("RLIMIT_FSIZE", FSIZE_CAP), ("RLIMIT_CORE", 0)] + ([] if gpu else [("RLIMIT_AS", AS_CAP)])
    child_env = {**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1", **(env or {})}
    err_path = work / "grader-stderr.txt"
    start = time.monotonic()
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", _FENCE.format(caps=caps), sys.executable, str(RUN_LOCAL),
                                 *args], cwd=ROOT, env=child_env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        timed_out = False
        try:
            rc: int | None = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    wall = time.monotonic() - start
    # What the grader killed may take a moment to go; what is still there after that outlived the grading.
    # Only the job's own folder: a committed case or solutions/ may be graded by other tests at the same time.
    paths = [str(work)]
    deadline = time.monotonic() + 2.0
    left = case_processes(paths, proc.pid)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = case_processes(paths, proc.pid)
    end_processes(left)
    return Graded(rc, wall, timed_out, limit_s, out, err_path.read_text(errors="replace")[-6000:],
                  list(left.values()))


class Jobs:
    """Gradings run ``workers`` at a time in threads; ``heavy`` ones (bombs) one at a time."""

    def __init__(self, base: Path, workers: int = 3):
        self.base = base
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="attack")
        self.heavy = threading.Semaphore(1)
        self.lock = threading.Lock()
        self.futures: dict[str, Future] = {}
        self.builders: dict[str, tuple[Callable[[Path], object], bool]] = {}

    def add(self, name: str, build: Callable[[Path], object], heavy: bool = False) -> None:
        self.builders[name] = (build, heavy)

    def start(self, names: list[str]) -> None:
        for name in names:
            self._submit(name)

    def _submit(self, name: str) -> Future:
        with self.lock:
            if name not in self.futures:
                build, heavy = self.builders[name]
                work = self.base / name.replace("/", "_").replace("[", "_").replace("]", "")
                work.mkdir(parents=True, exist_ok=True)

                def run() -> object:
                    if not heavy:
                        return build(work)
                    with self.heavy:
                        return build(work)

                self.futures[name] = self.pool.submit(run)
            return self.futures[name]

    def result(self, name: str):
        return self._submit(name).result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
