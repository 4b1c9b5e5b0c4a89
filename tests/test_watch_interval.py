"""How often a running step is watched (grader/sandbox/process.py: run_process; Fence.student_host_code).

A step that may run a student's host code is looked at every 10 ms in its first second (a fork bomb
doubles every few milliseconds); the grader's own children are looked at every WATCH_TRUSTED_S from
the start, and a Control's tick (the gated children's) does not make the watch run sooner."""
import os
import sys

from grader.sandbox.fence import WATCH_TRUSTED_S, Fence
from grader.sandbox.process import Control, run_process


def _count_watches(sleep_s: float, **kwargs) -> tuple[int, float]:
    """(how many times a step sleeping ``sleep_s`` was watched, how long it ran)."""
    calls = []

    def watch(pid: int):
        calls.append(pid)
        return None

    rec = run_process([sys.executable, "-c", f"import time; time.sleep({sleep_s})"], timeout_s=30, cwd=None,
                      env=dict(os.environ), output_limit=1000, watch=watch, **kwargs)
    assert rec.returncode == 0 and rec.limit is None and rec.wall_s is not None, rec
    return len(calls), rec.wall_s


def test_a_step_that_may_fork_is_watched_every_10_ms_in_its_first_second():
    # 100 looks in the first second at most; a loaded machine delays some, never to 4 a second
    n, _wall = _count_watches(1.2)
    assert n >= 15, n


def test_the_graders_own_children_are_watched_every_quarter_second_even_with_a_control():
    # the control ticks every 50 ms (a dozen ticks in this step); the watch still waits its own interval
    n, wall = _count_watches(0.6, watch_every_s=WATCH_TRUSTED_S, fast_start=False, control=Control())
    assert 1 <= n <= wall / WATCH_TRUSTED_S + 1, (n, wall)


def test_fences_run_student_host_code_unless_said_otherwise(tmp_path):
    assert Fence(scratch=tmp_path).student_host_code
    assert not Fence(scratch=tmp_path, student_host_code=False).student_host_code


def test_the_tools_fence_is_the_graders_own_and_a_compile_is_not(tmp_path):
    import inspect

    from grader import pipeline
    from grader.gpu import racecheck

    assert not racecheck.tool_fence(tmp_path, []).student_host_code  # ncu and compute-sanitizer
    # the compile's fence is the default one: nvcc reads the student's source
    assert "student_host_code" not in inspect.getsource(pipeline._compile_one)
