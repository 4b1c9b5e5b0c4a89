"""grader/gpu/ncu_run.py: which stages are profiled and what each is told (fake ncu, no GPU)."""
import dataclasses
import json
import stat
import sys
from pathlib import Path
from types import SimpleNamespace

from grader.evidence.compile import CompileResult
from grader.gpu.ncu_run import profile_stages
from grader.grading import StageOutcome
from grader.model import Cause, Gap, Status, Verdict
from grader.rubric.kinds import judge_ncu, stage_item
from grader.rubric.load import load_rubric
from grader.rubric.types import Profile

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "ncu" / "ncu2025.3.1_raw_solutions_h200_n2048.csv"
BASE = load_rubric(ROOT / "rubric.yaml")
RUBRIC = dataclasses.replace(BASE, profile=Profile(n=2048, timeout_s=30.0))  # a short ncu time limit
ITEM = stage_item({"id": "reuse", "kind": "ncu", "title": "reuse", "points": 2, "op": ">=", "value": 128,
              "expr": "sm__sass_thread_inst_executed_op_ffma_pred_on.sum / "
                      "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"}, "t")


def fake_ncu(tmp_path: Path) -> SimpleNamespace:
    path = tmp_path / "fake-ncu"
    path.write_text(f"#!{sys.executable}\nimport sys\n"
                    f"open({str(tmp_path / 'argv')!r}, 'w').write(repr(sys.argv))\n"
                    f"print(open({str(FIXTURE)!r}).read())\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return SimpleNamespace(path=str(path))


def outcomes(correct=None, compiled=None):
    out = {}
    for st in RUBRIC.stages:
        ok = (compiled or {}).get(st.id, True)
        c = CompileResult(st.id, ok, cubin=f"w/{st.id}.cubin", launch=st.launch)
        right = (correct or {}).get(st.id, True)
        out[st.id] = StageOutcome(stage=st, compile=c, verdict=Verdict.CORRECT if right else Verdict.WRONG)
    return out


def test_correct_stages_are_profiled_in_one_run(tmp_path):
    outs = outcomes(correct={"coalesced": False}, compiled={"naive": False})
    run = profile_stages(outs, RUBRIC, has_gpu=True, gpu_reason="",
                         work_dir=tmp_path / "ncu", seed=5, ncu_tool=fake_ncu(tmp_path))
    argv = eval((tmp_path / "argv").read_text())
    assert argv[argv.index("-k") + 1] == "regex:^(mmTiled|mm1DBlocktiling|mm2DBlocktiling|mmWMMA|mmHopper)$"
    assert run.reason == ""
    assert outs["naive"].ncu is None
    assert outs["naive"].ncu_gap == Gap(Cause.STUDENT, "not profiled: the stage did not compile")
    assert outs["coalesced"].ncu_gap == Gap(Cause.STUDENT, "not profiled: the kernel is not correct")
    assert outs["tiled"].ncu["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 16_777_216.0
    assert all(o.profile_n == 2048 for o in outs.values())
    spec = json.loads((tmp_path / "ncu" / "profile_spec.json").read_text())
    assert spec["n"] == 2048 and spec["seed"] == 5 and [s["id"] for s in spec["stages"]][0] == "tiled"
    assert all(Path(s["cubin"]).is_absolute() for s in spec["stages"])
    assert spec["stages"][0]["launch"] == {"block": [32, 32], "tile": [32, 32], "smem": 0}
    assert judge_ncu(ITEM, outs["tiled"]).status == Status.PASSED
    assert judge_ncu(ITEM, outs["coalesced"]).status == Status.FAILED


def test_without_a_gpu_nothing_runs_and_items_are_not_evaluated(tmp_path):
    outs = outcomes()
    for o in outs.values():
        o.verdict = Verdict.NOT_EVALUATED
    run = profile_stages(outs, RUBRIC, has_gpu=False, gpu_reason="no CUDA device",
                         work_dir=tmp_path, seed=1, ncu_tool=fake_ncu(tmp_path))
    assert run is None and not (tmp_path / "argv").exists()
    assert outs["tiled"].ncu_gap == Gap(Cause.NO_GPU, "not evaluated: no CUDA device")
    item = judge_ncu(ITEM, outs["tiled"])
    assert item.status == Status.NOT_EVALUATED and item.needs_gpu


def test_missing_ncu_is_not_evaluated_for_every_profiled_stage(tmp_path):
    outs = outcomes()
    profile_stages(outs, RUBRIC, has_gpu=True, gpu_reason="", work_dir=tmp_path, seed=1,
                   ncu_tool=SimpleNamespace(path=None))
    assert {o.ncu_gap for o in outs.values()} == {Gap(Cause.GRADER, "not evaluated: Nsight Compute (ncu) not found")}


def test_profiling_switched_off(tmp_path):
    off = dataclasses.replace(RUBRIC, profile=Profile(enabled=False))
    outs = outcomes()
    assert profile_stages(outs, off, has_gpu=True, gpu_reason="", work_dir=tmp_path, seed=1,
                          ncu_tool=fake_ncu(tmp_path)) is None
    assert all(o.ncu is None and "switched off" in o.ncu_reason for o in outs.values())


def test_a_tile_that_does_not_divide_the_profile_size(tmp_path):
    odd = dataclasses.replace(RUBRIC, profile=Profile(n=2048 + 32, timeout_s=30.0))
    outs = outcomes()
    profile_stages(outs, odd, has_gpu=True, gpu_reason="", work_dir=tmp_path,
                   seed=1, ncu_tool=fake_ncu(tmp_path))
    assert "does not divide the profile size N=2080" in outs["blocktiling_2d"].ncu_reason
    assert outs["naive"].ncu is not None  # 32 x 32 tiles divide 2080


def test_the_profile_childs_result_file_says_which_launch_failed(tmp_path):
    """The child writes its failures to RESULT.json (the last argument ncu passes on); the fixture's
    stdout says none failed, the file is what counts."""
    path = tmp_path / "fake-ncu"
    path.write_text(f"#!{sys.executable}\nimport json, sys\n"
                    "json.dump({'failures': {'tiled': 'CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS'}}, "
                    "open(sys.argv[-1], 'w'))\n"
                    f"print(open({str(FIXTURE)!r}).read())\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    outs = outcomes()
    run = profile_stages(outs, RUBRIC, has_gpu=True, gpu_reason="", work_dir=tmp_path / "ncu", seed=1,
                         ncu_tool=SimpleNamespace(path=str(path)))
    assert run.command[-4:-2] == ["grader.children", "profile"]
    assert run.command[-1] == str(tmp_path / "ncu" / "profile_result.json")
    assert outs["tiled"].ncu is None and outs["tiled"].ncu_gap.cause is Cause.STUDENT
    assert "ILLEGAL_ADDRESS" in outs["tiled"].ncu_gap.message
    assert outs["naive"].ncu is not None
