"""Nothing a step starts outlives it: a limit kills the step's whole process tree, whatever sessions
its processes made, and a grader process kills what is left of its tree when it exits.

Real processes: a child that starts a daemon (fork, setsid, fork), the daemon's pid written to a file.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader.model import Limit
from tests.serve_helpers import ROOT

# The child: a daemon that leaves its session and its parent (a double fork), then both wait.
DAEMON = textwrap.dedent("""
    import os, sys, time
    out = sys.argv[1]
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(out + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(out + ".tmp", out)
            time.sleep(120)
        os._exit(0)
    time.sleep(120)
""")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def _wait_for(path: Path, timeout_s: float = 20.0) -> int:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.01)
    return int(path.read_text())


@pytest.mark.parametrize("ends", ["by its time limit", "by itself"])
def test_a_step_leaves_no_daemon_that_left_its_session(tmp_path, ends):
    """The daemon left its session and its parent. The grader is its subreaper here, as
    `python -m grader grade` is, so it is adopted, not lost to init, and killed when its step ends."""
    pid_file = tmp_path / "daemon.pid"
    child = DAEMON
    if ends == "by itself":  # the step's own process returns once the daemon is up
        child = DAEMON.rsplit("time.sleep(120)", 1)[0] + textwrap.dedent("""
            while not os.path.exists(out):
                time.sleep(0.01)
        """)
    # By its time limit: the daemon is up within a few hundredths of a second of the step's start, long before it.
    limit_s = 1.5 if ends == "by its time limit" else 30.0
    probe = textwrap.dedent(f"""
        import subprocess, sys, time
        from grader.sandbox.process import become_subreaper, run_process, sweep_after_steps
        assert become_subreaper() and sweep_after_steps()
        rec = run_process([sys.executable, "-c", {child!r}, {str(pid_file)!r}], timeout_s={limit_s}, cwd=None,
                          env=dict(__import__("os").environ), output_limit=1000)
        print(rec.limit.value if rec.limit else "none")
    """)
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (Limit.TIME.value if ends == "by its time limit" else "none")
    daemon = int(pid_file.read_text())
    assert not _alive(daemon), f"the daemon {daemon} outlived the step"


def test_the_grader_process_kills_what_is_left_of_its_tree_when_it_exits(tmp_path):
    """`python -m grader` is a subreaper and ends its own tree at exit: a daemon a step left behind
    (here started directly, as a step that escaped every fence would) does not outlive it."""
    pid_file = tmp_path / "daemon.pid"
    probe = textwrap.dedent(f"""
        import subprocess, sys
        from grader.sandbox.process import become_subreaper, end_own_tree
        become_subreaper()
        p = subprocess.Popen([sys.executable, "-c", {DAEMON!r}, {str(pid_file)!r}], start_new_session=True)
        import time
        while not __import__("os").path.exists({str(pid_file)!r}):
            time.sleep(0.01)
        p.kill(); p.wait()  # the step ended; its daemon is an orphan now, still this process's descendant
        print(len(end_own_tree()))
    """)
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    daemon = int(pid_file.read_text())
    assert int(r.stdout.strip()) >= 1
    assert not _alive(daemon), f"the daemon {daemon} outlived the grader process"


def test_python_m_grader_is_a_subreaper_and_ends_its_tree():
    """The entry point itself: a command's orphans are reparented to it, and killed when it exits."""
    r = subprocess.run([sys.executable, "-c", "import grader.__main__"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)}, input="")
    # Without a command the CLI prints its usage and exits 2: the entry point ran, its finally too.
    assert r.returncode == 2, r.stderr
    status = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import ctypes, runpy, sys
        sys.argv = ["grader", "--help"]
        try:
            runpy.run_module("grader", run_name="__main__")
        except SystemExit:
            pass
        out = ctypes.c_int(0)
        ctypes.CDLL(None).prctl(37, ctypes.byref(out), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
        print("subreaper", out.value)
    """)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "subreaper 1" in status.stdout


def test_a_worker_keeps_its_own_child_and_a_sweep_spares_running_steps(tmp_path):
    """A service worker (a subreaper that does not sweep after steps) keeps the grading it started in a
    session of its own (grader/serve/child.py): a step it runs must never take it. A sweep (a grading's
    or a batch's, after each step) spares the steps other threads are still running: here the sweep runs
    once the other thread's step has said it is running, and that step ends only when told to, after it."""
    started, go = tmp_path / "started", tmp_path / "go"
    step_code = (f"import os, time; open({str(started)!r}, 'w').close()\n"
                 f"while not os.path.exists({str(go)!r}): time.sleep(0.01)")
    probe = textwrap.dedent(f"""
        import os, subprocess, sys, threading, time
        from grader.sandbox.process import become_subreaper, kill_adopted, run_process
        become_subreaper()
        kept = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        step = run_process([sys.executable, "-c", "pass"], timeout_s=30, cwd=None, env={{}}, output_limit=100)
        print(step.returncode, kept.poll() is None)
        kept.kill(); kept.wait()
        other = []
        t = threading.Thread(target=lambda: other.append(run_process(
            [sys.executable, "-c", {step_code!r}], timeout_s=30, cwd=None, env={{}}, output_limit=100)))
        t.start()
        while not os.path.exists({str(started)!r}):
            time.sleep(0.01)
        print(kill_adopted())
        open({str(go)!r}, "w").close()
        t.join()
        print(other[0].returncode)
    """)
    r = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["0 True", "[]", "0"]
