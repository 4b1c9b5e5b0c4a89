"""Real Nsight Compute on a real GPU (marked `gpu`; skipped without one or without ncu).

One ncu run over the reference kernels, and one over the one-stage-shifted submission:
the rubric's ncu criteria must pass every reference kernel
and fail every predecessor on its transition items, and one run must stay well under a minute.
"""
import dataclasses
import sys
from pathlib import Path

import pytest

from grader.build import toolchain
from grader.build.compile import compile_stage
from grader.grading import StageOutcome
from grader.instructor.shifted import write_shifted
from grader.model import Status, Verdict
from grader.profile.collect import profile_stages
from grader.profile.criteria import evaluate_ncu_item
from grader.profile.diagnosis import diagnose
from grader.spec.rubric import load_rubric
from grader.spec.types import Profile

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent
N = 2048
RUBRIC = dataclasses.replace(load_rubric(ROOT / "rubric.yaml"), profile=Profile(n=N, timeout_s=300))


def profile(submission: Path, work: Path):
    ncu = toolchain.find_ncu()
    if ncu.path is None:
        pytest.skip(ncu.reason)
    nvcc = toolchain.find_nvcc()
    outcomes = {}
    for st in RUBRIC.stages:
        c = compile_stage(st, submission, work / st.id, nvcc, ["-arch=sm_90a"], RUBRIC, [512, 1280, 4096, N])
        assert c.ok, c.problem
        outcomes[st.id] = StageOutcome(stage=st, compile=c, verdict=Verdict.CORRECT)
    run = profile_stages(outcomes, RUBRIC, has_gpu=True, gpu_reason="",
                         work_dir=work / "ncu", seed=1234, ncu_tool=ncu)
    print(f"ncu: {run.proc.wall_s:.1f} s, {' '.join(run.command[:12])} ...", file=sys.stderr)
    assert run.reason == "", run.reason + "\n" + run.proc.stderr[-2000:]
    return outcomes, run


def items(stage_id):
    return [i for i in RUBRIC.stage(stage_id).items if i.kind == "ncu"]


def test_reference_kernels_meet_every_proposed_criterion(tmp_path):
    outcomes, run = profile(ROOT / "solutions", tmp_path)
    assert run.proc.wall_s < 60
    for sid, o in outcomes.items():
        assert o.ncu is not None, o.ncu_reason
        ffma = o.ncu["sm__sass_thread_inst_executed_op_ffma_pred_on.sum"]
        assert ffma == (N**3 if o.stage.inputs == "fp32" else 0), sid
        for it in items(sid):
            r = evaluate_ncu_item(it, o)
            assert r.status == Status.PASSED, f"{sid}.{it.id}: {r.message}"
        d = diagnose(o.ncu, sid)
        assert d.verdict and d.next_step and not d.missing, (sid, d.missing)


def test_shifted_submission_fails_exactly_the_transition_criteria(tmp_path):
    sub = tmp_path / "shifted"
    write_shifted(ROOT / "solutions", RUBRIC, sub)
    outcomes, _run = profile(sub, tmp_path / "work")
    for sid, o in outcomes.items():
        for it in items(sid):
            r = evaluate_ncu_item(it, o)
            integrity = it.params["op"] == "=="
            expected = Status.PASSED if integrity or sid == RUBRIC.stages[0].id else Status.FAILED
            assert r.status == expected, f"{sid}.{it.id}: {r.message}"
