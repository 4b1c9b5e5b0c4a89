"""A CUDA context kept open per GPU while a batch runs (grader/gpu/keeper.py, grader/children/keep.py).

The keeper child is the real one, over the stand-in driver tests/fixtures/fake_libcuda.c (it logs
every call) or over no driver at all; the batch is the real batch with a recording child in place
of each grading. What is checked: the keeper makes the primary context and waits; it ends when
closed, when the process that started it dies, and when it never gets ready; a batch keeps one per
GPU for its run, ends them all, and says so in batch.json, or notes why it could not.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader.children.driver import LIBRARY_VAR
from grader.deploy import batch
from grader.deploy.batch.pool import gpu_env, keeper_folder
from grader.gpu import keeper as keeper_module
from grader.gpu.device import read_device_file
from grader.gpu.keeper import Keeper, keep_gpus, start_keeper
from tests.test_batch import _small_export
from tests.test_batch_devices import _recording
from tests.test_children import FAKE_CUPY
from tests.test_sanitize_child import _calls, _use_fake

ROOT = Path(__file__).resolve().parent.parent


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """The process ``pid`` has ended (reaped, or a zombie) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def keepers() -> list[int]:
    """The pids of this host's keeper children (``python -m grader.children keep ...``)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"grader.children" in argv and b"keep" in argv:
            found.append(int(entry.name))
    return found


def _wait(predicate, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.1)
    return predicate()


def test_the_keeper_holds_the_primary_context_until_closed(tmp_path, monkeypatch, fake_libcuda):
    log = tmp_path / "driver.log"
    _use_fake(monkeypatch, fake_libcuda, log)
    k = start_keeper(tmp_path / "keep", 60, gpu="0")
    try:
        assert k.problem == "" and k.kept
        pid = k.proc.pid
        assert _calls(log, "cuInit") == [["0"]] and len(_calls(log, "cuDevicePrimaryCtxRetain")) == 1
        assert _calls(log, "cuLaunchKernel") == [] and _calls(log, "cuMemAlloc_v2") == []  # idle: no work
        time.sleep(0.3)
        assert k.kept  # still there: it waits on its stdin
    finally:
        k.close()
    assert not k.kept and _gone(pid, 1.0)
    assert json.loads((tmp_path / "keep" / "keep_result.json").read_text()) == {"ok": True, "reason": ""}
    k.close()  # a second close does nothing


def test_without_a_driver_the_keeper_says_why_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(LIBRARY_VAR, str(tmp_path / "no-libcuda.so.1"))
    t0 = time.monotonic()
    k = start_keeper(tmp_path / "keep", 60, gpu="0")
    assert time.monotonic() - t0 < 20
    assert not k.kept and k.proc is None
    assert "no-libcuda.so.1 could not be loaded" in k.problem


def test_a_keeper_that_never_gets_ready_is_killed_at_its_time_limit(tmp_path, monkeypatch):
    pid_file = tmp_path / "pid"
    monkeypatch.setattr(keeper_module, "child_command", lambda *_a: [
        sys.executable, "-c", f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
                              "time.sleep(120)"])
    t0 = time.monotonic()
    k = start_keeper(tmp_path / "keep", 1.0, gpu="0")
    assert time.monotonic() - t0 < 8
    assert k.problem == "the keeper had no context after 1 s" and not k.kept
    assert _gone(int(pid_file.read_text()), 5.0)


def test_a_keeper_ends_when_the_process_that_started_it_dies(tmp_path, fake_libcuda, monkeypatch):
    _use_fake(monkeypatch, fake_libcuda, tmp_path / "driver.log")
    parent = textwrap.dedent(f"""\
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from grader.gpu.keeper import start_keeper
        k = start_keeper({str(tmp_path / "keep")!r}, 60, gpu="0")
        print(k.proc.pid if k.kept else "none: " + k.problem, flush=True)
        os._exit(0)  # no close: the pipe closes because this process is gone
        """)
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    pid = int(out.stdout.strip())
    assert _gone(pid, 10.0)


def test_keep_gpus_starts_one_per_gpu_pinned_to_it(tmp_path, monkeypatch, fake_libcuda):
    _use_fake(monkeypatch, fake_libcuda, tmp_path / "driver.log")
    seen: dict[str, dict] = {}
    real = keeper_module.start_keeper

    def spy(work, timeout_s, gpu=None, extra_env=None):
        seen[gpu] = {"work": work, "env": extra_env}
        return real(work, timeout_s, gpu, extra_env)

    monkeypatch.setattr(keeper_module, "start_keeper", spy)
    locks = tmp_path / "locks"
    kept = keep_gpus(["0", "GPU-1/x"], 60, lambda g: keeper_folder(locks, g), gpu_env)
    try:
        assert sorted(kept) == ["0", "GPU-1/x"] and all(k.kept for k in kept.values())
        assert seen["0"] == {"work": locks / "gpu-0.keeper", "env": gpu_env("0")}
        assert seen["GPU-1/x"]["work"] == locks / "gpu-GPU-1_x.keeper"  # a safe folder name, as the lock's
        assert seen["GPU-1/x"]["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-1/x"
    finally:
        for k in kept.values():
            k.close()
    assert keep_gpus([], 60, lambda g: tmp_path, gpu_env) == {}


def test_a_batch_keeps_a_context_per_gpu_for_its_run_and_ends_them(tmp_path, monkeypatch, fake_libcuda):
    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY))  # the batch's probes
    _use_fake(monkeypatch, fake_libcuda, tmp_path / "driver.log")
    started: list[Keeper] = []
    real = keeper_module.start_keeper

    def spy(*a, **k):
        started.append(real(*a, **k))
        return started[-1]

    monkeypatch.setattr(keeper_module, "start_keeper", spy)
    alive_during: list[bool] = []
    recording = _recording(tmp_path)

    def cmd(sub, out, opts):  # each grading is started while every keeper is still there
        alive_during.append(all(k.kept for k in started))
        return recording(sub, out, opts)

    s = batch.grade_export(_small_export(tmp_path / "exp", ("submission_1", "submission_2", "submission_3")),
                           tmp_path / "out", quiet=True, gpus=["0", "1"], make_cmd=cmd)
    assert s.graded == 3 and alive_during == [True, True, True]
    assert len(started) == 2 and not any(k.kept for k in started)
    info = json.loads((tmp_path / "out" / "batch.json").read_text())
    assert info["contexts_kept"] == ["0", "1"]
    assert not any("no CUDA context kept open" in n for n in info["notes"])


def test_a_batch_without_a_driver_notes_it_and_grades_all_the_same(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY))
    monkeypatch.setenv(LIBRARY_VAR, str(tmp_path / "no-libcuda.so.1"))
    s = batch.grade_export(_small_export(tmp_path / "exp", ("submission_1", "submission_2")), tmp_path / "out",
                           quiet=True, gpus=["0"], make_cmd=_recording(tmp_path))
    assert s.graded == 2
    info = json.loads((tmp_path / "out" / "batch.json").read_text())
    assert info["contexts_kept"] == []
    note = next(n for n in info["notes"] if n.startswith("GPU 0: no CUDA context kept open"))
    assert "no-libcuda.so.1 could not be loaded" in note


def test_the_batch_can_be_told_not_to_keep_contexts(tmp_path, monkeypatch, fake_libcuda):
    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY))
    _use_fake(monkeypatch, fake_libcuda, tmp_path / "driver.log")
    s = batch.grade_export(_small_export(tmp_path / "exp", ("submission_1",)), tmp_path / "out", quiet=True,
                           gpus=["0"], make_cmd=_recording(tmp_path), keep_contexts=False)
    assert s.graded == 1
    assert json.loads((tmp_path / "out" / "batch.json").read_text())["contexts_kept"] == []
    assert not keeper_folder(tmp_path / "out" / "locks", "0").exists()


def test_a_gpu_worker_of_the_service_keeps_a_context_for_its_life(tmp_path, monkeypatch, fake_libcuda):
    """The real service, one GPU worker over the stand-in driver and tests/fake_cupy (its probe: an
    H100-like GPU); no job is sent. The worker also probes its GPU once and keeps the description."""
    from tests.serve_helpers import ServiceProcess

    log = tmp_path / "driver.log"
    _use_fake(monkeypatch, fake_libcuda, log)
    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY))
    before = set(keepers())
    with ServiceProcess(tmp_path / "data", "--gpus", "0", gpu=True) as svc:
        svc.wait_workers(1)
        [described] = (tmp_path / "data" / "work").glob("*-gpu0/device.json")
        device, problem = read_device_file(described)
        assert problem == "" and device is not None and device["cc"] == [9, 0], svc.log_text()
        assert _wait(lambda: set(keepers()) - before, 30), svc.log_text()
        [pid] = set(keepers()) - before
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        parent_argv = Path(f"/proc/{parent}/cmdline").read_bytes().split(b"\0")
        assert b"worker" in parent_argv and b"--gpu" in parent_argv  # the worker's own child
        assert len(_calls(log, "cuDevicePrimaryCtxRetain")) == 1
    assert _gone(pid, 15)


@pytest.mark.gpu
def test_on_a_gpu_the_keeper_holds_a_context_until_closed(tmp_path):
    k = start_keeper(tmp_path / "keep", 120, gpu="0")
    try:
        assert k.problem == "" and k.kept, k.problem
        pid = k.proc.pid
    finally:
        k.close()
    assert _gone(pid, 1.0)


def test_a_keeper_that_ends_at_once_says_how_and_what_it_printed(tmp_path, monkeypatch):
    monkeypatch.setattr(keeper_module, "child_command", lambda *_a: [
        sys.executable, "-c", "import sys; sys.stderr.write('x' * 5000 + ' the driver is gone'); sys.exit(3)"])
    k = start_keeper(tmp_path / "keep", 30, gpu="0")
    assert not k.kept and k.problem.startswith("the keeper ended (exit 3): ")
    assert k.problem.endswith("the driver is gone") and len(k.problem) < 400  # the last 300 bytes only
