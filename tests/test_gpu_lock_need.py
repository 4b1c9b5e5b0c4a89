"""A grading takes its GPU's lock only when a GPU step has something to run (grader/pipeline.py:
gpu_steps_have_work): with no compiled stage it does not wait for gradings that hold the GPU. The GPU
is faked by the environment's description alone: with nothing compiled, no step starts a GPU child."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
from pathlib import Path

from grader.evidence.compile import CompileResult
from grader.evidence.protocol import ProbeResult
from grader.gpu.job import Job
from grader.grading import StageOutcome
from grader.pipeline import detect_environment, gpu_steps_have_work, grade
from grader.rubric.load import load_rubric

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")

HOLD = """import fcntl, sys, time
f = open(sys.argv[1], "w")
fcntl.flock(f, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(120)
"""


def _job(tmp_path: Path, compiled: dict[str, bool]) -> Job:
    env = detect_environment(RUBRIC, use_gpu=False)
    outcomes = {sid: StageOutcome(stage=RUBRIC.stage(sid), compile=CompileResult(sid, ok)) for sid, ok in compiled.items()}
    return Job(RUBRIC, tmp_path, tmp_path / "work", env, None, False, lambda _m: None, outcomes=outcomes)


def test_only_a_compiled_stage_gives_the_gpu_steps_work(tmp_path):
    assert not gpu_steps_have_work(_job(tmp_path, {}))
    assert not gpu_steps_have_work(_job(tmp_path, {"naive": False, "tiled": False}))
    assert gpu_steps_have_work(_job(tmp_path, {"naive": False, "tiled": True}))


def test_a_grading_with_nothing_compiled_does_not_wait_for_a_held_gpu_lock(tmp_path):
    lock = tmp_path / "gpu.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        env = detect_environment(RUBRIC, use_gpu=False)
        env = dataclasses.replace(env, device=ProbeResult(ok=True, name="a GPU another grading holds"), device_reason="")
        sub = tmp_path / "empty"
        (sub / "gemm").mkdir(parents=True)  # no stage's file: nothing compiles
        done: list = []
        worker = threading.Thread(target=lambda: done.append(grade(sub, RUBRIC, tmp_path / "out", stages=["naive"],
                                                                   env=env, gpu_lock=lock)), daemon=True)
        worker.start()
        worker.join(60)  # the lock is held for 120 s
        assert done, "the grading waited for the GPU lock with nothing to run on the GPU"
        grading = done[0]
        assert grading.outcomes["naive"].compile is not None and not grading.outcomes["naive"].compile.ok
        assert not [p for p in grading.phases if p.name in ("gpu_wait", "gpu_held")]
    finally:
        holder.kill()
        holder.wait()
