"""Real Nsight Compute on a real GPU (marked `gpu`; skipped without one or without ncu).

The reference kernels' metrics come from the full grading of solutions/ that the other GPU tests share
(its one ncu run, at the rubric's profile size); the one-stage-shifted submission gets one ncu run of
its own (tests/gpu_jobs.py). The rubric's ncu criteria must pass every reference kernel and fail every
predecessor on its transition items, and the run over the references must stay well under a minute.
"""
import pytest

from grader.compile import toolchain
from grader.grading import load_grading
from grader.model import Status
from grader.profile.diagnosis import diagnose
from grader.rubric.kinds import judge_ncu

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_ncu():
    ncu = toolchain.find_ncu()
    if ncu.path is None:
        pytest.skip(ncu.reason)


def test_reference_kernels_meet_every_proposed_criterion(solutions_graded):
    assert solutions_graded.rc == 0, solutions_graded.stderr
    grading = load_grading(solutions_graded.out / "grading.json")
    run = grading.profile
    assert run is not None and run.reason == "", run
    assert run.wall_s is not None and run.wall_s > 0  # its time: docs/measurements/, not a threshold here
    for sid, o in grading.outcomes.items():
        assert o.ncu is not None, o.ncu_reason
        n = o.profile_n
        assert n == 2048, n  # the rubric's profile size, which the criteria were calibrated at
        ffma = o.ncu["sm__sass_thread_inst_executed_op_ffma_pred_on.sum"]
        assert ffma == (n**3 if o.stage.inputs == "fp32" else 0), sid
        for it in [i for i in o.stage.items if i.kind == "ncu"]:
            r = judge_ncu(it, o)
            assert r.status == Status.PASSED, f"{sid}.{it.id}: {r.message}"
        d = diagnose(o.ncu, sid)
        assert d.verdict and d.next_step and not d.missing, (sid, d.missing)


def test_shifted_submission_fails_exactly_the_transition_criteria(shifted_profiled):
    outcomes, run = shifted_profiled
    assert not isinstance(run, str), run
    assert run.reason == "", run.reason + "\n" + run.proc.stderr[-2000:]
    first = next(iter(outcomes))
    for sid, o in outcomes.items():
        for it in [i for i in o.stage.items if i.kind == "ncu"]:
            r = judge_ncu(it, o)
            integrity = it.params.op == "==" or bool(it.params.integrity)
            expected = Status.PASSED if integrity or sid == first else Status.FAILED
            assert r.status == expected, f"{sid}.{it.id}: {r.message}"
