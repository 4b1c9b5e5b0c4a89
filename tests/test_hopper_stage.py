"""The Hopper bonus stage without a GPU: the TMA contract, the arch gate, bonus counting, BF16 inputs.

What needs the GPU (correct, speed, ncu) is in tests/test_gpu_grading.py and the hostile suite
(tests/submissions/wmma_claims_wgmma); here every check reads the compiled cubin, the rubric or
records, so it runs on CI with nvcc alone.
"""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from grader import REPO_ROOT as ROOT
from grader.children.check import check
from grader.children.inputs import bf16_values, make_inputs, product_operands, to_bf16
from grader.children.tma import check_boxes
from grader.compile import toolchain
from grader.compile.stage import compile_stage
from grader.evidence.limits import Peaks
from grader.evidence.protocol import Boxes, CheckSpec
from grader.grading import StageOutcome
from grader.instructor.shifted import write_shifted
from grader.model import Bonus, ItemResult, Status
from grader.outputs.leaderboard import leaderboard_entries
from grader.outputs.results import build_results
from grader.records import from_jsonable
from grader.rubric.load import load_rubric
from grader.score.stages import score
from grader.writeup.run import grade as grade_report

RUBRIC = load_rubric(ROOT / "rubric.yaml")
HOPPER = RUBRIC.stage("hopper")
SIZES = [*RUBRIC.correctness_sizes, HOPPER.bench.n]
needs_nvcc = pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")


def _compile(tmp_path: Path, source: str | Path, name: str = "hopper"):
    sub = tmp_path / name / "submission"
    (sub / "gemm").mkdir(parents=True)
    text = Path(source).read_text() if isinstance(source, Path) else source
    (sub / "gemm" / "hopper.cu").write_text(text)
    return compile_stage(HOPPER, sub, tmp_path / name / "work", toolchain.find_nvcc(), ["-arch=sm_90a"], RUBRIC, SIZES)


# -- the declared boxes ------------------------------------------------------------------------
def test_valid_boxes_are_read_into_a_record():
    assert check_boxes([64, 128, 256, 128], "mmHopper_tma", SIZES) == (Boxes(64, 128, 256, 128), "")
    assert check_boxes([8, 64, 64, 0], "mmHopper_tma", SIZES)[0] == Boxes(8, 64, 64, 0)


@pytest.mark.parametrize("values, needle", [
    (None, "mmHopper_tma is missing"),
    ([64, 128, 256], "has 3 values; expected 4"),
    ([64, 128, 256, 96], "swizzle 96 bytes"),
    ([64, 0, 256, 128], "A box rows 0"),
    ([64, 128, 512, 128], "B box rows 512"),
    ([4, 128, 128, 0], "multiple of 16 bytes"),
    ([128, 128, 128, 128], "wider than the 128-byte swizzle"),
    ([64, 192, 128, 128], "do not tile N=512"),
])
def test_invalid_boxes_say_which_rule_they_break(values, needle):
    boxes, problem = check_boxes(values, "mmHopper_tma", SIZES)
    assert boxes is None and needle in problem


# -- the compile contract (nvcc, no GPU) -------------------------------------------------------
@needs_nvcc
def test_the_reference_and_the_starter_meet_the_tensor_map_contract(tmp_path):
    ref = _compile(tmp_path, ROOT / "solutions" / "gemm" / "hopper.cu", "ref")
    assert ref.ok, ref.problem
    assert ref.boxes == Boxes(64, 128, 256, 128)
    assert (ref.launch.block, ref.launch.tile) == ((384, 1), (128, 256)) and ref.launch.smem > 48 * 1024
    assert ref.kernel.spill_stores == 0
    starter = _compile(tmp_path, ROOT / "starter" / "gemm" / "hopper.cu", "starter")
    assert starter.ok and starter.boxes == Boxes(64, 64, 64, 128)


@needs_nvcc
def test_a_kernel_without_tensor_map_parameters_or_boxes_is_refused(tmp_path):
    pointers = ('#include <cuda_bf16.h>\nextern "C" __constant__ int mmHopper_tma[4] = {64, 128, 128, 128};\n'
                'extern "C" __global__ void mmHopper(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C,'
                ' int N) { C[0] = 0; }\n')
    got = _compile(tmp_path, pointers, "pointers")
    assert not got.ok and "wrong signature" in got.problem and "CUtensorMap tmA" in got.problem
    no_boxes = (ROOT / "starter" / "gemm" / "hopper.cu").read_text().replace(
        'extern "C" __constant__ int mmHopper_tma[4] = {BK, BM, BN, 128};', "")
    got = _compile(tmp_path, no_boxes, "no_boxes")
    assert not got.ok and "mmHopper_tma is missing" in got.problem
    too_wide = (ROOT / "starter" / "gemm" / "hopper.cu").read_text().replace("{BK, BM, BN, 128}", "{BK, BM, BN, 64}")
    got = _compile(tmp_path, too_wide, "too_wide")
    assert not got.ok and "wider than the 64-byte swizzle" in got.problem


# -- only on an sm_90a target -------------------------------------------------------------------
def test_another_architecture_is_not_evaluated_and_scores_zero():
    why = toolchain.unsupported_reason("sm_90a", ["-arch=sm_89"])
    assert why.startswith("not evaluated on this GPU (needs sm_90a, a Hopper GPU)") and "sm_89" in why
    assert toolchain.unsupported_reason("sm_90a", ["-arch=sm_90a"]) == ""
    assert toolchain.unsupported_reason("", ["-arch=sm_89"]) == ""
    items = score({"hopper": StageOutcome(stage=HOPPER, unsupported=why)}, Peaks(66.9, 989.0, "test"))
    assert [i.item for i in items] == [i.id for i in HOPPER.items]
    assert all(i.status is Status.NOT_EVALUATED and i.score == 0 and i.message == why for i in items)
    assert all(i.bonus is Bonus.EXTRA and i.counted_max == 0 for i in items)


# -- bonus points ---------------------------------------------------------------------------------
def _item(stage: str, points: float, earned: float, bonus: Bonus) -> ItemResult:
    return ItemResult(stage=stage, item="x", title=f"{stage} item", status=Status.PASSED if earned else Status.FAILED,
                      score=earned, max_score=points, bonus=bonus)


@pytest.mark.parametrize("mode, top_score", [(Bonus.EXTRA, 12.0), (Bonus.SEPARATE, 10.0)])
def test_bonus_points_are_outside_the_total_and_count_as_the_rubric_says(mode, top_score):
    items = [_item("naive", 10, 10, Bonus.NONE), _item("hopper", 3, 2, mode)]
    results = build_results(items, execution_time=1, output="").to_json()
    assert results["score"] == top_score
    bonus = results["tests"][1]
    assert bonus["max_score"] == 0 and bonus["name"].startswith("Bonus: ")
    assert bonus["extra_data"]["bonus_points"] == 2 and bonus["extra_data"]["bonus_max"] == 3
    assert sum(t["max_score"] for t in results["tests"]) == 10  # Gradescope's total is the assignment's own


def test_the_shipped_rubric_keeps_the_hopper_stage_and_its_report_paragraph_out_of_the_total():
    assert HOPPER.bonus is Bonus.EXTRA and RUBRIC.report is not None
    hop = next(t for t in RUBRIC.report.transitions if t.after == "hopper")
    assert hop.bonus is Bonus.EXTRA
    assert RUBRIC.bonus_points == HOPPER.max_points + sum(i.points for i in RUBRIC.report.items()
                                                          if i.id.startswith(hop.id + "."))
    items = grade_report(RUBRIC.report, None, "report.md is missing", RUBRIC, {})
    assert {i.item for i in items if i.bonus is Bonus.EXTRA} == {f"{hop.id}.cites", f"{hop.id}.values"}
    assert sum(i.counted_max for i in items if i.status is not Status.MANUAL) == \
        sum(i.points for i in RUBRIC.report.items() if i.kind != "reasoning" and not i.id.startswith(hop.id + "."))


def test_a_timed_hopper_kernel_is_on_the_leaderboard():
    from tests.test_leaderboard import _grading, _outcome

    g = _grading(hopper=_outcome("hopper", True, 0.195, 0.185))
    names = [e.name for e in leaderboard_entries(g)]
    assert names == [f"{HOPPER.title}: TFLOP/s", f"{HOPPER.title}: % of cuBLAS"]


# -- BF16 inputs and their reference --------------------------------------------------------------
def test_bf16_inputs_are_k_major_and_rounded_to_nearest_even():
    x = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -1 / 3], np.float32)
    assert bf16_values(np, to_bf16(np, x)).tolist() == [1.0, 1.0, 1 + 4 * 2**-8, np.float32(-0.333984375)]
    a, bt = make_inputs(64, 3, "bf16")
    fa, fb = make_inputs(64, 3, "fp32")
    assert a.dtype == bt.dtype == np.uint16
    a64, b64 = product_operands(np, a, bt, "bf16")
    assert np.abs(a64 - fa).max() <= 2**-8 and np.abs(b64 - fb).max() <= 2**-8  # B^T came back as B
    assert b64.shape == (64, 64) and np.array_equal(b64, bf16_values(np, bt).astype(np.float64).T)


def test_the_checker_judges_a_bf16_stage_against_the_same_rounded_operands(tmp_path):
    n, seed = 256, 11
    a64, b64 = product_operands(np, *make_inputs(n, seed, "bf16"), "bf16")
    np.save(tmp_path / "right.npy", (a64 @ b64).astype(np.float32))
    fa, fb = make_inputs(n, seed, "fp32")  # the unrounded product: off by far more than FP32 accumulation
    np.save(tmp_path / "wrong.npy", (fa.astype(np.float64) @ fb.astype(np.float64) * 1.05).astype(np.float32))
    cases = [{"n": n, "seed": seed, "kind": "check", "file": f} for f in ("right.npy", "wrong.npy")]
    spec = {"stages": [{"id": "hopper", "inputs": "bf16", "rtol": HOPPER.rtol, "out_dir": str(tmp_path),
                        "cases": cases}]}
    right, wrong = check(from_jsonable(CheckSpec, spec), xp=np)["hopper"].cases
    assert right.passed and right.max_scaled_err < 1e-6
    assert not wrong.passed


# -- the shifted-stage calibration ------------------------------------------------------------------
def test_the_shifted_submission_puts_the_wmma_algorithm_in_stage_6(tmp_path):
    what = write_shifted(ROOT / "solutions", RUBRIC, tmp_path / "shifted")
    text = (tmp_path / "shifted" / "gemm" / "hopper.cu").read_text()
    assert "@KERNEL@" not in text and "mmHopper(" in text and "wmma::mma_sync" in text and "wgmma" not in text
    assert "WMMA (HMMA), no WGMMA or TMA" in what["hopper"]
    assert json.dumps(what)  # a plain mapping, written to SHIFTED.md too
    assert "hopper" in (tmp_path / "shifted" / "SHIFTED.md").read_text()


@needs_nvcc
def test_the_wmma_port_compiles_in_the_hopper_contract(tmp_path):
    text = (ROOT / "grader" / "instructor" / "bf16_wmma_port.cu").read_text().replace("@KERNEL@", "mmHopper")
    got = _compile(tmp_path, text, "port")
    assert got.ok, got.problem
    assert dataclasses.asdict(got.boxes) == {"k": 64, "a_rows": 128, "b_rows": 128, "swizzle": 128}


def test_the_tensor_map_arguments_are_two_aligned_maps_then_the_pointers():
    from grader.children.tma import MAP_ALIGN, operand_args

    calls = []

    class Encoder:  # stands in for grader.children.driver.Driver: records what would be encoded
        def tensor_map_2d(self, address, rows, cols, box_cols, box_rows, swizzle, element_bytes, data_type):
            calls.append((address, rows, cols, box_cols, box_rows, swizzle, element_bytes, data_type))
            return bytes([len(calls)]) * 128

    args = operand_args(Encoder(), Boxes(64, 128, 256, 128), 0x1000, 0x2000, 0x3000, 4096)  # type: ignore[arg-type]
    assert calls == [(0x1000, 4096, 4096, 64, 128, 3, 2, 9), (0x2000, 4096, 4096, 64, 256, 3, 2, 9)]
    assert [(len(a.data), a.align) for a in args] == [(128, MAP_ALIGN), (128, MAP_ALIGN), (8, 8), (8, 8), (8, 8), (4, 4)]
    assert args[0].data == b"\x01" * 128 and args[1].data == b"\x02" * 128
    assert [int.from_bytes(a.data, "little") for a in args[2:]] == [0x1000, 0x2000, 0x3000, 4096]
