"""A grading told to stop: SIGTERM (a scheduler, ``timeout``), SIGHUP (the terminal it ran in closed), or
SIGINT (Ctrl-C, for one grading; a batch lets its running gradings finish then).

Its steps run in sessions of their own, out of the terminal's reach, so before this the grader died
and left them running with no time limit. Now the process that holds the tree (``python -m grader``
and a TA's ``grader/run_local.py`` alike, grader/sandbox/process.py: run_holding_tree) kills every
step at once, starts no other, writes a results.json that says it was stopped, and exits with
128 + the signal. A batch whose grading was killed outright kills what that grading left.
The weak sandbox is used throughout: no PID namespace ends the compile for the grader.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from grader.sandbox.lock import held, queue_of
from tests.serve_helpers import ENDLESS_COMPILE, ROOT, cmdlines, describe, tree_of, tree_until

ENTRIES = {"run_local": ["grader/run_local.py"], "module": ["-m", "grader", "grade"]}
STATIC = ["--no-gpu", "--stages", "naive"]


@contextmanager
def started(cmd: list[str], *, ignore_hup: bool = False) -> Iterator[subprocess.Popen]:
    """``cmd`` from the repository, in the weak sandbox; killed if the test leaves it running. SIGHUP and
    SIGINT start at their defaults, as from a terminal, whatever this test process inherited: under
    ``nohup``, or started in the background by a shell, it ignores them, and so would the grader
    (run_holding_tree keeps an ignored SIGHUP ignored, and Python an ignored SIGINT)."""
    def signals() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN if ignore_hup else signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "GRADER_SANDBOX": "weak"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=signals)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def endless_submission(folder: Path) -> Path:
    shutil.copytree(ROOT / "starter", folder)
    (folder / "gemm" / "naive.cu").write_text(ENDLESS_COMPILE)
    return folder


def endless_export(root: Path, count: int) -> Path:
    """A Gradescope export of ``count`` submissions whose naive stage compiles for ever."""
    meta = ""
    for k in range(1, count + 1):
        name = f"submission_{k}"
        (root / name / "gemm").mkdir(parents=True)
        (root / name / "gemm" / "naive.cu").write_text(ENDLESS_COMPILE)
        meta += f"{name}:\n  :submitters:\n  - :name: N {name}\n    :sid: '{k}'\n    :email: {name}@x.edu\n"
    (root / "submission_metadata.yml").write_text(meta)
    return root


def compiling(proc: subprocess.Popen) -> dict[int, bytes]:
    """The tree of ``proc`` as seen until its endless compile is under way (nvcc's preprocessor), as
    :func:`identities`."""
    tree = tree_until(proc.pid, running=lambda: proc.poll() is None)
    if tree is None:
        proc.kill()
        pytest.fail("it never reached nvcc's preprocessor:\n" + proc.communicate()[0].decode(errors="replace"))
    return identities(tree)


def _start_time(pid: int) -> bytes | None:
    """When ``pid`` started (field 22 of /proc/PID/stat, in clock ticks since boot); None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()
    except OSError:
        return None
    return fields[19] if len(fields) > 19 else None


def identities(pids: set[int]) -> dict[int, bytes]:
    """Each of ``pids`` still there, with its start time: the kernel hands a freed pid out again once
    its counter wraps at pid_max (32768 on the test machines), so a pid alone may later name another
    test's process, such as another grading's nvcc."""
    found = {pid: _start_time(pid) for pid in pids}
    return {pid: t for pid, t in found.items() if t is not None}


def alive(tree: dict[int, bytes]) -> list[int]:
    """The processes of ``tree`` (:func:`identities`) still running: the same pid, started at the same
    time, and not a zombie."""
    live = cmdlines()  # a zombie has no command line
    return sorted(pid for pid, started in tree.items() if pid in live and _start_time(pid) == started)


def to_another_thread(proc: subprocess.Popen, signum: int) -> None:
    """Send ``signum`` to one of ``proc``'s threads other than its main one (tgkill), as the kernel may
    when the signal is sent to the whole process."""
    libc = ctypes.CDLL(None, use_errno=True)
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid):
        if libc.tgkill(proc.pid, tid, signum) == 0:
            return
    pytest.fail(f"no thread of {proc.pid} but its main one took the signal (errno {ctypes.get_errno()})")


def stop(proc: subprocess.Popen, signum: int, *, thread: bool = False) -> tuple[str, float]:
    """Send ``signum`` to the process (to another thread than its main one with ``thread``); (its
    output, the seconds it took to exit)."""
    sent = time.monotonic()
    if thread:
        to_another_thread(proc, signum)
    else:
        proc.send_signal(signum)
    try:
        output = proc.communicate(timeout=60)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running 60 s after {signal.Signals(signum).name}")
    return output, time.monotonic() - sent


def stop_a_compiling_grading(tmp_path: Path, entry: str, signum: int, *, thread: bool = False
                             ) -> tuple[int | None, str, float, list[int], dict]:
    """Grade a submission that compiles for ever with ``entry``, and stop it with ``signum`` once nvcc
    runs: (its exit code, its output, the seconds it took to exit, what is left alive of its tree,
    its results.json)."""
    out = tmp_path / "out"
    sub = endless_submission(tmp_path / "sub")
    with started([sys.executable, *ENTRIES[entry], str(sub), *STATIC, "--out", str(out), "--quiet"]) as proc:
        tree = compiling(proc)
        output, took = stop(proc, signum, thread=thread)
    return proc.returncode, output, took, alive(tree), json.loads((out / "results.json").read_text())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["SIGTERM", "SIGHUP", "SIGINT"])
@pytest.mark.parametrize("entry", list(ENTRIES))
def test_a_signalled_grading_kills_its_steps_at_once_and_says_so(tmp_path, entry, signum):
    code, output, took, left, results = stop_a_compiling_grading(tmp_path, entry, signum)
    assert code == 128 + signum, output
    assert left == [], describe(left)
    name = signal.Signals(signum).name
    assert results["score"] == 0 and f"the grading was stopped by {name}" in json.dumps(results), results


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_that_another_thread_takes_stops_the_grading_as_soon(tmp_path, signum):
    """The kernel gives a signal sent to a process to any of its threads that does not block it, and
    Python runs its handler in the main thread only, between bytecodes: a main thread blocked on the
    compile's future would run it only when the endless compile died of its own limits. The steps die
    at once whichever thread took it."""
    code, output, took, left, results = stop_a_compiling_grading(tmp_path, "run_local", signum, thread=True)
    assert code == 128 + signum, output
    assert left == [], describe(left)
    assert f"the grading was stopped by {signal.Signals(signum).name}" in json.dumps(results), results


WAITS_FOR_THE_GPU = """
import sys, threading, time
from pathlib import Path
from grader.sandbox.lock import held_in_turn
from grader.sandbox.process import run_holding_tree

def main() -> int:
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()  # a thread besides the main one
    print("waiting", flush=True)
    with held_in_turn(Path(sys.argv[1])):  # as grader/pipeline.py: gpu_turn
        print("took the lock", flush=True)
    return 0

sys.exit(run_holding_tree(main))
"""


def test_a_process_waiting_for_the_gpu_lock_stops_when_another_thread_takes_the_signal(tmp_path):
    """A grading whose main thread waits for the GPU's lock, which another grading holds: no step of
    its own to kill ends that wait. The thread that saw the signal wakes the main thread, whose flock
    fails with EINTR and whose handler then runs; before, it waited for the lock (here, for ever)."""
    lock = tmp_path / "gpu0.lock"
    with held(lock):  # the other grading's turn
        with started([sys.executable, "-c", WAITS_FOR_THE_GPU, str(lock)]) as proc:
            assert proc.stdout is not None and proc.stdout.readline() == b"waiting\n"
            queue, deadline = queue_of(lock), time.monotonic() + 30
            while not (queue.is_dir() and any(queue.iterdir())):  # its entry: at (or about to be at) the flock
                if time.monotonic() > deadline:
                    pytest.fail("it never queued for the lock")
                time.sleep(0.01)
            time.sleep(0.2)
            output, took = stop(proc, signal.SIGTERM, thread=True)
    assert proc.returncode == 128 + signal.SIGTERM, output


def test_a_sighup_ignored_at_start_stays_ignored(tmp_path):
    """``nohup run_local.py ...``: a closed terminal does not stop the grading; SIGTERM still does."""
    out = tmp_path / "out"
    sub = endless_submission(tmp_path / "sub")
    with started([sys.executable, "grader/run_local.py", str(sub), *STATIC, "--out", str(out), "--quiet"],
                 ignore_hup=True) as proc:
        tree = compiling(proc)
        proc.send_signal(signal.SIGHUP)
        # A SIGHUP that was not ignored would show here, or below: its exit code and results.json would name it
        time.sleep(0.3)
        assert proc.poll() is None, "the SIGHUP that nohup ignores stopped the grading"
        stop(proc, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM
    assert alive(tree) == []
    assert "stopped by SIGTERM" in (out / "results.json").read_text()


def test_a_batch_stopped_by_sigterm_kills_its_gradings_and_leaves_no_row_of_them(tmp_path):
    """``run_local.py EXPORT --batch``: SIGTERM while a grading compiles. The gradings are killed at
    once, none is recorded as finished (no submission folder, no row), the grades of what finished
    before are written, batch.json says it was interrupted, and the exit code is 128 + SIGTERM."""
    exp, out = endless_export(tmp_path / "export", 3), tmp_path / "out"
    with started([sys.executable, "grader/run_local.py", str(exp), "--batch", "--out", str(out), *STATIC,
                  "--trusted-submissions", "--workers", "1"]) as proc:
        tree = compiling(proc)
        output, took = stop(proc, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM, output
    left = alive(tree)
    assert left == [], describe(left)
    assert "stopped by SIGTERM" in output, output
    subs = out / "submissions"
    assert not subs.exists() or sorted(p.name for p in subs.iterdir()) == [], sorted(subs.iterdir())
    assert json.loads((out / "batch.json").read_text())["interrupted"] is True
    assert (out / "grades.csv").is_file()


def test_a_batch_kills_what_a_grading_that_died_abruptly_left(tmp_path):
    """One of a batch's gradings is killed outright (SIGKILL: the OOM killer, a TA's kill -9) while its
    nvcc runs. nvcc, in a session of its own, is then the batch's (a subreaper): the batch kills it at
    that grading's end, not at its own end, and goes on with the next submission."""
    exp, out = endless_export(tmp_path / "export", 2), tmp_path / "out"
    with started([sys.executable, "-m", "grader", "batch", str(exp), "--out", str(out), *STATIC, "--quiet",
                  "--trusted-submissions", "--workers", "1"]) as proc:
        tree = compiling(proc)
        live = cmdlines()
        gradings = [pid for pid in tree if "-m grader grade " in live.get(pid, "")]
        assert len(gradings) == 1, describe(sorted(tree))
        [grading] = gradings
        compile_tree = identities(tree_of(grading) - {grading})
        os.kill(grading, signal.SIGKILL)
        # Left alone, the compile lives on until its memory runs out (over 10 s, measured); the sweep
        # comes as soon as the batch sees its grading end.
        deadline = time.monotonic() + 5
        while alive(compile_tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = alive(compile_tree)
        assert left == [], (f"left alive 5 s after the grading's kill:\n{describe(left)}\n"
                            f"the batch, then the killed grading:\n{describe([proc.pid, grading])}")
        assert proc.poll() is None, "the batch should go on with its next submission"
        stop(proc, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM
    assert alive(tree) == []
