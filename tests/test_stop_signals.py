"""A grading told to stop: SIGTERM (a scheduler, ``timeout``), or SIGHUP (the terminal it ran in closed).

Its steps run in sessions of their own, out of the terminal's reach, so before this the grader died
and left them running with no time limit. Now the process that holds the tree (``python -m grader``
and a TA's ``grader/run_local.py`` alike, grader/sandbox/process.py: run_holding_tree) kills every
step at once, starts no other, writes a results.json that says it was stopped, and exits with
128 + the signal. The weak sandbox is used: no PID namespace ends the compile for it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.serve_helpers import ENDLESS_COMPILE, ROOT, describe, tree_of

ENTRIES = {"run_local": ["grader/run_local.py"], "module": ["-m", "grader", "grade"]}


def _start(tmp_path: Path, entry: str, *, ignore_hup: bool = False) -> tuple[subprocess.Popen, Path]:
    sub = tmp_path / "sub"
    shutil.copytree(ROOT / "starter", sub)
    (sub / "gemm" / "naive.cu").write_text(ENDLESS_COMPILE)
    out = tmp_path / "out"
    cmd = [sys.executable, *ENTRIES[entry], str(sub), "--no-gpu", "--stages", "naive", "--out", str(out), "--quiet"]

    def nohup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "GRADER_SANDBOX": "weak"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=nohup if ignore_hup else None)
    return proc, out


def _compiling(proc: subprocess.Popen) -> set[int]:
    """The grading's tree once its endless compile is under way (nvcc's preprocessor)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        tree = tree_of(proc.pid)
        for pid in tree:
            try:
                if b"cc1plus" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return tree
            except OSError:
                continue
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the grading never reached nvcc's preprocessor:\n" + proc.communicate()[0].decode(errors="replace"))


def _alive(pids: set[int]) -> list[int]:
    return [pid for pid in pids if Path(f"/proc/{pid}/cmdline").exists() and Path(f"/proc/{pid}/cmdline").read_bytes()]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("entry", list(ENTRIES))
def test_a_signalled_grading_kills_its_steps_at_once_and_says_so(tmp_path, entry, signum):
    proc, out = _start(tmp_path, entry)
    try:
        tree = _compiling(proc)
        sent = time.monotonic()
        proc.send_signal(signum)
        output = proc.communicate(timeout=30)[0].decode(errors="replace")
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, output
    assert took < 10, f"{took:.1f} s to stop"  # not the compile's own time limit
    left = _alive(tree)
    assert left == [], describe(left)
    results = json.loads((out / "results.json").read_text())
    name = signal.Signals(signum).name
    assert results["score"] == 0 and f"the grading was stopped by {name}" in json.dumps(results), results


def test_a_sighup_ignored_at_start_stays_ignored(tmp_path):
    """``nohup run_local.py ...``: a closed terminal does not stop the grading; SIGTERM still does."""
    proc, out = _start(tmp_path, "run_local", ignore_hup=True)
    try:
        tree = _compiling(proc)
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.poll() is None, "the SIGHUP that nohup ignores stopped the grading"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM
    assert _alive(tree) == []
    assert "stopped by SIGTERM" in (out / "results.json").read_text()


def test_a_batch_stopped_by_sigterm_kills_its_gradings_and_leaves_no_row_of_them(tmp_path):
    """``run_local.py EXPORT --batch``: SIGTERM while a grading compiles. The gradings are killed at
    once, none is recorded as finished (no submission folder, no row), the grades of what finished
    before are written, batch.json says it was interrupted, and the exit code is 128 + SIGTERM."""
    exp = tmp_path / "export"
    meta = ""
    for name in ("submission_1", "submission_2", "submission_3"):
        (exp / name / "gemm").mkdir(parents=True)
        (exp / name / "gemm" / "naive.cu").write_text(ENDLESS_COMPILE)
        meta += f"{name}:\n  :submitters:\n  - :name: N {name}\n    :sid: '{name[-1]}'\n    :email: {name}@x.edu\n"
    (exp / "submission_metadata.yml").write_text(meta)
    out = tmp_path / "out"
    cmd = [sys.executable, "grader/run_local.py", str(exp), "--batch", "--out", str(out), "--no-gpu", "--stages",
           "naive", "--trusted-submissions", "--workers", "1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "GRADER_SANDBOX": "weak"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        tree = _compiling(proc)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0].decode(errors="replace")
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert took < 15, f"{took:.1f} s to stop"
    left = _alive(tree)
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
    exp = tmp_path / "export"
    meta = ""
    for name in ("submission_1", "submission_2"):
        (exp / name / "gemm").mkdir(parents=True)
        (exp / name / "gemm" / "naive.cu").write_text(ENDLESS_COMPILE)
        meta += f"{name}:\n  :submitters:\n  - :name: N {name}\n    :sid: '{name[-1]}'\n    :email: {name}@x.edu\n"
    (exp / "submission_metadata.yml").write_text(meta)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "grader", "batch", str(exp), "--out", str(out), "--no-gpu", "--stages", "naive",
           "--quiet", "--trusted-submissions", "--workers", "1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "GRADER_SANDBOX": "weak"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        tree = _compiling(proc)
        gradings = [pid for pid in tree if b"grader\0grade" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(gradings) == 1, describe(sorted(tree))
        [grading] = gradings
        compile_tree = tree_of(grading) - {grading}
        os.kill(grading, signal.SIGKILL)
        # Left alone, the compile lives on until its memory runs out (over 10 s, measured); the sweep
        # comes as soon as the batch sees its grading end.
        deadline = time.monotonic() + 5
        while _alive(compile_tree) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _alive(compile_tree)
        assert left == [], describe(left)
        assert proc.poll() is None, "the batch should go on with its next submission"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM
    assert _alive(tree) == []
