"""Items -> points, on synthetic outcomes (no GPU)."""
from collections import Counter
from pathlib import Path

import pytest

from grader.evidence.compile import CompileResult, KernelResources, SassResult
from grader.evidence.limits import Peaks
from grader.grading import StageOutcome
from grader.model import Status, Verdict
from grader.profile.timing import summarize
from grader.rubric.load import load_rubric
from grader.score.stages import score

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
PEAKS = Peaks(66.9, 989.0, "test")


def _compiled(stage, regs=64, spills=0, ops=None):
    k = KernelResources(stage.kernel, "sm_90a", registers=regs, spill_stores=spills)
    c = CompileResult(stage.id, True, kernel=k, launch=stage.launch, launch_source="rubric default")
    sass = SassResult(opcodes={stage.kernel: Counter(ops or {"FFMA": 100, "STG": 4})})
    return c, sass


# Nsight Compute readings that pass every stage's technique items (speed points wait on those).
N_PROFILE = 2048
TECHNIQUE_METRICS = {
    "l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_ld.ratio": 2.5,
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": float(N_PROFILE) ** 3,
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": float(N_PROFILE) ** 3 / 512,
    "smsp__inst_executed_op_shared_ld.sum": 0.1 * float(N_PROFILE) ** 3 / 32,
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": 50.0,
}


def _outcome(stage_id, correct=True, student_ms=None, base_ms=2.73, technique=True, **kw):
    st = RUBRIC.stage(stage_id)
    c, sass = _compiled(st, **kw)
    o = StageOutcome(stage=st, compile=c, sass=sass, verdict=Verdict.CORRECT if correct else Verdict.WRONG,
                     correctness_message="msg")
    if correct and student_ms:
        o.timing = summarize(4096, [student_ms] * 5, [base_ms] * 5, PEAKS.get(st.peak))
    if correct and technique:
        o.ncu, o.profile_n = dict(TECHNIQUE_METRICS), N_PROFILE
    return o


def _items(outcomes):
    return {(i.stage, i.item): i for i in score({o.stage.id: o for o in outcomes}, PEAKS)}


def test_fast_correct_2d_gets_everything():
    from grader.profile.ncu import parse_raw_csv

    table = parse_raw_csv((ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_solutions_h200_n2048.csv").read_text())
    o = _outcome("blocktiling_2d", student_ms=2.73 / 0.92)
    o.ncu, o.profile_n = dict(table["mm2DBlocktiling"]), 2048  # the reference kernel's real profile
    items = _items([o])
    assert all(i.status == Status.PASSED for i in items.values())
    assert sum(i.score for i in items.values()) == RUBRIC.stage("blocktiling_2d").max_points
    assert "92.0% of cuBLAS SGEMM" in items[("blocktiling_2d", "speed")].message


def test_slow_2d_fails_speed_but_keeps_correctness():
    items = _items([_outcome("blocktiling_2d", student_ms=2.73 / 0.12)])  # below the curve's first knee
    assert items[("blocktiling_2d", "speed")].status == Status.FAILED
    assert items[("blocktiling_2d", "speed")].score == 0
    assert items[("blocktiling_2d", "correct")].status == Status.PASSED


def test_wrong_kernel_is_never_timed():
    o = _outcome("blocktiling_2d", correct=False)
    o.timing = summarize(4096, [1.0], [2.7], 66.9)  # even if a timing leaked in, it must not count
    o.timing = None
    items = _items([o])
    speed = items[("blocktiling_2d", "speed")]
    assert speed.status == Status.FAILED and "never reported for a wrong result" in speed.message
    assert "TFLOP" not in speed.message


def test_spills_and_tensor_ops_fail_their_items():
    items = _items([_outcome("blocktiling_2d", spills=64, student_ms=3.0, ops={"FFMA": 10, "HMMA": 4})])
    assert items[("blocktiling_2d", "no_spills")].status == Status.FAILED
    assert "HMMA x4" in items[("blocktiling_2d", "fp32_only")].message


def test_wmma_needs_hmma_and_beats_fp32_peak():
    slow = _items([_outcome("wmma", student_ms=4.95, base_ms=0.203, ops={"HMMA": 64, "STG": 64})])  # 27.8 TFLOP/s
    assert slow[("wmma", "beats_fp32")].status == Status.FAILED
    assert slow[("wmma", "tensor_cores")].status == Status.PASSED
    fast = _items([_outcome("wmma", student_ms=0.40, base_ms=0.203, ops={"HMMA": 64, "STG": 64})])  # 344 TFLOP/s
    assert fast[("wmma", "beats_fp32")].status == Status.PASSED
    no_tc = _items([_outcome("wmma", student_ms=0.40, ops={"FFMA": 64})])
    assert no_tc[("wmma", "tensor_cores")].status == Status.FAILED


def test_no_gpu_items_are_not_evaluated_with_zero_points():
    st = RUBRIC.stage("tiled")
    c, _ = _compiled(st)
    o = StageOutcome(stage=st, compile=c, sass=SassResult(reason="cuobjdump not found"),
                     verdict=Verdict.NOT_EVALUATED, gpu_reason="no CUDA device")
    items = _items([o])
    # Whether the kernel writes C is read from its SASS: without cuobjdump the compile item cannot tell.
    compiles = items[("tiled", "compiles")]
    assert compiles.status == Status.NOT_EVALUATED and "cuobjdump not found" in compiles.message
    for key in ("correct", "speed", "fp32_only"):
        assert items[("tiled", key)].status == Status.NOT_EVALUATED and items[("tiled", key)].score == 0
    assert "no CUDA device" in items[("tiled", "speed")].message


def test_only_items_missing_for_want_of_a_gpu_need_one():
    st = RUBRIC.stage("tiled")
    c, _ = _compiled(st)
    # The SASS reason names a GPU, but a missing cuobjdump is not helped by one.
    o = StageOutcome(stage=st, compile=c, sass=SassResult(reason="cuobjdump not found (no GPU tools)"),
                     verdict=Verdict.NOT_EVALUATED, gpu_reason="switched off")
    items = _items([o])
    assert items[("tiled", "correct")].needs_gpu and items[("tiled", "speed")].needs_gpu
    assert items[("tiled", "fp32_only")].status == Status.NOT_EVALUATED and not items[("tiled", "fp32_only")].needs_gpu
    assert not items[("tiled", "compiles")].needs_gpu
    # A stage that did not compile fails, whether or not there is a GPU.
    bad = StageOutcome(stage=st, compile=CompileResult(st.id, False, problem="not evaluated: no CUDA device"),
                       verdict=Verdict.NOT_COMPILED, gpu_reason="no CUDA device")
    assert all(i.status == Status.FAILED and not i.needs_gpu for i in _items([bad]).values())


def test_compile_failure_zeroes_the_stage_and_explains():
    st = RUBRIC.stage("tiled")
    o = StageOutcome(stage=st, compile=CompileResult(st.id, False, problem="nvcc failed: error"))
    items = _items([o])
    assert items[("tiled", "compiles")].status == Status.FAILED and "nvcc failed" in items[("tiled", "compiles")].message
    assert all(i.score == 0 for i in items.values())


def test_partial_credit_is_linear(tmp_path):
    import yaml

    from grader.rubric.load import parse_rubric
    raw = yaml.safe_load((ROOT / "rubric.yaml").read_text())
    speed = next(it for it in raw["stages"][4]["items"] if it["id"] == "speed")
    speed.pop("curve", None)
    speed["partial_from"] = 0.6
    rub = parse_rubric(raw)
    st = rub.stage("blocktiling_2d")
    c, sass = _compiled(st)
    o = StageOutcome(stage=st, compile=c, sass=sass, verdict=Verdict.CORRECT)
    o.timing = summarize(4096, [2.73 / 0.7] * 3, [2.73] * 3, 66.9)
    o.ncu, o.profile_n = dict(TECHNIQUE_METRICS), N_PROFILE
    speed = [i for i in score({st.id: o}, PEAKS) if i.item == "speed"][0]
    assert speed.status == Status.FAILED and speed.score == pytest.approx(8 * 0.5, rel=1e-3)


def test_speedup_over_own_stage():
    import yaml

    from grader.rubric.load import parse_rubric
    raw = yaml.safe_load((ROOT / "rubric.yaml").read_text())
    raw["stages"][3]["items"].append({"id": "vs_tiled", "kind": "speedup_over_stage", "stage": "tiled",
                                      "min": 2.0, "title": "2x tiled", "points": 1})
    rub = parse_rubric(raw)
    outs = {}
    for sid, ms in (("tiled", 15.4), ("blocktiling_1d", 7.0)):
        st = rub.stage(sid)
        c, sass = _compiled(st)
        o = StageOutcome(stage=st, compile=c, sass=sass, verdict=Verdict.CORRECT)
        o.timing = summarize(4096, [ms] * 3, [2.73] * 3, 66.9)
        o.ncu, o.profile_n = dict(TECHNIQUE_METRICS), N_PROFILE
        outs[sid] = o
    item = [i for i in score(outs, PEAKS) if i.item == "vs_tiled"][0]
    assert item.status == Status.PASSED and "2.20x" in item.message
    outs["tiled"].verdict, outs["tiled"].timing = Verdict.WRONG, None
    item = [i for i in score(outs, PEAKS) if i.item == "vs_tiled"][0]
    assert item.status == Status.FAILED and "needs a timed `tiled`" in item.message


def test_empty_kernel_earns_no_resource_or_sass_points():
    # The starter's do-nothing kernel: no FFMA in its SASS, wrong on the GPU.
    items = _items([_outcome("blocktiling_2d", correct=False, ops={"EXIT": 1, "RET": 1})])
    assert items[("blocktiling_2d", "fp32_only")].status == Status.FAILED
    assert "no FFMA" in items[("blocktiling_2d", "fp32_only")].message
    assert items[("blocktiling_2d", "no_spills")].status == Status.FAILED


def test_implausibly_fast_kernel_is_flagged_not_rewarded():
    from grader.model import Status

    items = _items([_outcome("blocktiling_2d", student_ms=2.73 / 1.5)])  # 1.5x cuBLAS SGEMM on FP32 cores
    speed = items[("blocktiling_2d", "speed")]
    assert speed.status == Status.REVIEW and speed.score == 0 and "flagged for review" in speed.message
