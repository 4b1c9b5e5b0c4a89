"""The fence's limits, against the real bwrap: each hostile step is stopped, and the record names the limit."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from grader.evidence.sandbox import LimitMethod
from grader.sandbox import cgroup, limits
from grader.sandbox import guard as sandbox
from grader.sandbox.guard import MIB, Fence, Limit, run
from tests.fence_helpers import marker, py, switch_user, wait_none_with


@pytest.fixture(autouse=True)
def _bwrap(bwrap_required):
    """Every test here starts the real bwrap."""


# Grows by 8 MiB of touched memory every few milliseconds: fast enough to pass 256 MiB within a
# second, slow enough that the watchdog (where no cgroup does it) sees it before RLIMIT_DATA.
HOG = """
    import time
    hoard = []
    while True:
        hoard.append(b"x" * (8 << 20))
        time.sleep(0.005)
"""


def test_memory_hog_is_stopped(scratch: Path):
    rec = run(py(HOG), timeout_s=30, fence=Fence(scratch=scratch, memory_bytes=256 * MIB))
    assert rec.limit is Limit.MEMORY and rec.returncode == -signal.SIGKILL, rec
    assert not rec.ok and rec.brief() == "stopped: over its memory limit"


def test_one_huge_allocation_fails_inside(scratch: Path):
    """Untouched memory is no resident hog; the per-process cap (cgroup or RLIMIT_DATA) refuses it."""
    rec = run(py("b = bytearray(64 << 30); b[::4096] = b'x' * len(b[::4096])"), timeout_s=30,
              fence=Fence(scratch=scratch, memory_bytes=256 * MIB))
    assert rec.returncode != 0 and not rec.ok


@pytest.fixture(params=["children_files", "process_table"])
def tree_reader(request, monkeypatch) -> str:
    """Both ways the watchdog finds a step's processes: /proc/PID/task/TID/children where the kernel
    has them, else one shared scan of /proc (grader.sandbox.limits.process_table)."""
    if request.param == "children_files" and not limits._HAS_CHILDREN_FILES:
        pytest.skip("this kernel has no /proc/PID/task/TID/children files")
    monkeypatch.setattr(limits, "_HAS_CHILDREN_FILES", request.param == "children_files")
    return request.param


def test_fork_bomb_is_stopped(scratch: Path, monkeypatch, tree_reader):
    """A kernel bound (pids.max, or RLIMIT_NPROC of the student user) stops the forks; the watchdog
    then ends the step. The watchdog alone races the bomb (docs/measurements/2026-11-30-h200-sandbox.md);
    a compiled bomb forks faster, so tests take a kernel bound."""
    if not cgroup.cgroup_support().pids:
        if os.geteuid() != 0:
            pytest.skip("no kernel bound on processes: no pids cgroup, and not root to switch to a student user")
        monkeypatch.setenv(sandbox.STUDENT_USER_VAR, switch_user().pw_name)
    word = marker()
    code = f"""
        import os, sys
        while True:
            try:
                os.fork()
            except OSError:
                pass
        # {word}
    """
    rec = run(py(code), timeout_s=20, fence=Fence(scratch=scratch, processes=64))
    assert rec.limit is Limit.PROCESSES, rec
    assert rec.brief() == "stopped: over its process-count limit"
    assert wait_none_with(word) == [], "forked processes outlived the step"


def test_watchdog_counts_the_steps_processes(scratch: Path, tree_reader):
    code = """
        import subprocess, time
        while True:
            subprocess.Popen(["sleep", "60"])
            time.sleep(0.02)
    """
    rec = run(py(code), timeout_s=20, fence=Fence(scratch=scratch, processes=12))
    assert rec.limit is Limit.PROCESSES and rec.returncode == -signal.SIGKILL


def test_file_larger_than_file_bytes_fails(scratch: Path):
    rec = run(["dd", "if=/dev/zero", "of=big", "bs=1M", "count=8"], timeout_s=30,
              fence=Fence(scratch=scratch, file_bytes=2 * MIB))
    assert rec.limit is Limit.FILE_SIZE and rec.returncode == -signal.SIGXFSZ
    assert rec.brief() == "stopped: over its file-size limit"
    assert (scratch / "big").stat().st_size == 2 * MIB
    # Python ignores SIGXFSZ: the write fails instead, and the program sees EFBIG.
    rec = run(py("open('big2', 'wb').write(b'x' * (8 << 20))"), timeout_s=30,
              fence=Fence(scratch=scratch, file_bytes=2 * MIB))
    assert rec.returncode == 1 and "File too large" in rec.stderr


def test_scratch_over_its_cap_stops_the_step(scratch: Path):
    code = """
        import time
        for i in range(1000):
            open(f"f{i}", "wb").write(b"x" * (1 << 20))
            time.sleep(0.005)
        time.sleep(30)
    """
    rec = run(py(code), timeout_s=30, fence=Fence(scratch=scratch, scratch_bytes=32 * MIB))
    assert rec.limit is Limit.SCRATCH and rec.returncode == -signal.SIGKILL
    assert rec.brief() == "stopped: over its disk-space (work folder) limit"
    # The cap, and what the writes between two looks of the watchdog add.
    assert limits.folder_bytes(scratch, 1 << 40) < 32 * MIB + 128 * MIB


def test_many_empty_files_count_against_scratch(scratch: Path):
    code = """
        import time
        for i in range(100000):
            open(f"e{i}", "w").close()
        time.sleep(30)
    """
    rec = run(py(code), timeout_s=30, fence=Fence(scratch=scratch, scratch_bytes=16 * MIB))
    assert rec.limit is Limit.SCRATCH


def test_private_tmp_is_capped(scratch: Path):
    rec = run(["dd", "if=/dev/zero", "of=/tmp/fill", "bs=1M", "count=64"], timeout_s=30,
              fence=Fence(scratch=scratch, tmp_bytes=8 * MIB))
    assert rec.returncode != 0 and "No space left" in rec.stderr


def test_output_flood_is_stopped(scratch: Path):
    code = """
        import sys
        while True:
            sys.stdout.write("x" * 65536)
    """
    rec = run(py(code), timeout_s=30, output_limit=10_000, fence=Fence(scratch=scratch, output_bytes=4 * MIB))
    assert rec.limit is Limit.OUTPUT and rec.stdout_bytes > 4 * MIB
    assert len(rec.stdout) < 10_100


def test_time_limit_still_works(scratch: Path):
    rec = run(py("print('spinning', flush=True)\nwhile True: pass"), timeout_s=1.0, fence=Fence(scratch=scratch))
    assert rec.timed_out and rec.limit is Limit.TIME and rec.stdout == "spinning\n"
    assert rec.brief() == "timed out after 1 s"


def test_cgroup_limits_where_available(scratch: Path):
    support = cgroup.cgroup_support()
    if not support.memory:
        pytest.skip(f"no cgroup v2 memory limit here ({support.reason}); rlimits and the watchdog were tested")
    assert sandbox.mode().limits is LimitMethod.CGROUP
    before = {p.name for p in support.parent.iterdir() if p.name.startswith("gemm-grader-")}
    rec = run(py(HOG), timeout_s=30, fence=Fence(scratch=scratch, memory_bytes=128 * MIB))
    assert rec.limit is Limit.MEMORY
    after = {p.name for p in support.parent.iterdir() if p.name.startswith("gemm-grader-")}
    assert after == before, "the step's cgroup was not removed"
    assert os.path.exists(support.parent / "cgroup.procs")


def test_a_niced_fence_runs_its_step_at_lower_priority(scratch: Path):
    """Fence.nice: a batch's compiles yield the CPUs to the grading that holds the GPU (pipeline.py)."""
    rec = run(py("import os; print(os.nice(0))"), timeout_s=30, fence=Fence(scratch=scratch, nice=10))
    assert rec.ok and int(rec.stdout.strip()) == os.nice(0) + 10, rec
    assert int(run(py("import os; print(os.nice(0))"), timeout_s=30, fence=Fence(scratch=scratch)).stdout) == os.nice(0)
    with pytest.raises(ValueError):
        Fence(scratch=scratch, nice=20)


def test_fork_bomb_as_root_without_a_student_user_ends_at_its_limit(scratch: Path, monkeypatch, tree_reader):
    """As root with no GRADER_STUDENT_USER a student's program runs as `nobody` (host_code_user):
    RLIMIT_NPROC never binds uid 0, so a bomb as root was stopped only by the watchdog racing it."""
    if os.geteuid() != 0:
        pytest.skip("the root case needs root")
    monkeypatch.delenv(sandbox.STUDENT_USER_VAR, raising=False)
    user = sandbox.host_code_user()
    if user is None:
        pytest.skip(f"no {sandbox.FALLBACK_HOST_USER} account here")
    assert user == sandbox.FALLBACK_HOST_USER
    word = marker()
    code = f"""
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
        # {word}
    """
    rec = run(py(code), timeout_s=20, fence=Fence(scratch=scratch, processes=64), user=user)
    assert rec.limit is Limit.PROCESSES, rec
    assert wait_none_with(word) == [], "forked processes outlived the step"
