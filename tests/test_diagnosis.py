"""grader/profile/diagnosis.py on the six reference kernels' captured H200 profile, and edge cases."""
from pathlib import Path

import pytest

from grader.profile import diagnosis as dg
from grader.profile.ncu import parse_raw_csv

ROOT = Path(__file__).resolve().parent.parent
TABLE = parse_raw_csv((ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_solutions_h200_n2048.csv").read_text())


def diag(kernel: str, **extra) -> dg.Diagnosis:
    return dg.diagnose(dict(TABLE[kernel], **extra), kernel)


def evidence(d: dg.Diagnosis) -> dict[str, float]:
    return {e.label: e.value for e in d.evidence}


def test_cells_of_the_speed_of_light_matrix():
    assert dg.cell(80, 20) == "compute-bound"
    assert dg.cell(20, 80) == "memory-bound"
    assert dg.cell(20, 20) == "latency-bound"
    assert dg.cell(80, 80) == "near the roofline"
    assert dg.cell(None, 80) == "unknown"


def test_naive_is_uncoalesced():
    d = diag("mmNaive")
    assert d.cell == "memory-bound" and "not coalesced" in d.verdict
    assert evidence(d) == pytest.approx({"sectors per global-load request": 16.5,
                                         "global-load requests per warp FFMA": 2.0})
    assert "threadIdx.x" in d.next_step and "(stage 2)" in d.next_step


def test_coalesced_loads_every_operand_from_global_memory():
    d = diag("mmCoalesced")
    # SM and memory are both ~75%: the matrix says "near the roofline", the FMA pipe says otherwise.
    assert d.cell == "near the roofline"
    assert d.verdict.startswith("memory-bound: every multiply-add loads its operands")
    assert any("no math pipe is" in line for line in d.details)
    assert evidence(d)["global-load requests per warp FFMA"] == pytest.approx(2.0)
    assert "shared memory" in d.next_step and "(stage 3)" in d.next_step


def test_tiled_is_bound_by_shared_loads_with_mio_throttle():
    d = diag("mmTiled")
    assert "shared-memory loads" in d.verdict
    assert evidence(d) == pytest.approx({"shared loads per warp FFMA": 1.25, "mio throttle stall": 54.16})
    assert "register" in d.next_step and "(stage 4a)" in d.next_step


def test_tiled_with_the_l1_throughput_of_the_sections_capture():
    d = diag("mmTiled", **{dg.L1: 93.0, dg.L2: 9.05})
    assert any(line.startswith("busiest memory level: L1/shared at 93.0%") for line in d.details)


def test_1d_still_shared_limited_with_an_idle_fma_pipe():
    d = diag("mm1DBlocktiling")
    assert d.cell == "memory-bound" and d.verdict.startswith("still limited by shared-memory traffic")
    assert evidence(d) == pytest.approx({"shared loads per warp FFMA": 0.3125, "FMA pipe active": 34.34})
    assert "(stage 4b)" in d.next_step


def test_2d_saturates_the_fma_pipe_next_tensor_cores():
    d = diag("mm2DBlocktiling")
    assert d.verdict == "compute-bound on the FP32 FMA pipe"
    assert evidence(d) == pytest.approx({"FMA pipe active": 73.01, "shared loads per warp FFMA": 0.0625})
    assert "Tensor Cores (stage 5)" in d.next_step


def test_wmma_is_latency_bound_on_few_warps():
    d = diag("mmWMMA")
    assert d.cell == "latency-bound" and d.verdict.startswith("latency-bound: the Tensor Cores")
    assert evidence(d) == pytest.approx({"tensor pipe active": 42.17, "long scoreboard stall": 20.79})
    assert any("warps active: 12.4%" in line and "0.97 waves" in line for line in d.details)


def test_each_reference_kernel_gets_a_different_next_step():
    steps = [diag(k).next_step for k in TABLE]
    assert len(set(steps)) == 6


def test_markdown_lists_verdict_cell_evidence_and_next_step():
    text = diag("mmTiled").markdown()
    assert text.startswith("**bound by shared-memory loads")
    assert "Speed-of-Light cell: near the roofline" in text
    assert "- evidence: shared loads per warp FFMA = 1.25" in text and "- next step: register" in text


def test_dram_bound_fp32_kernel():
    m = {dg.SM: 20.0, dg.MEM: 90.0, dg.DRAM: 88.0, dg.FMA: 5.0, dg.TENSOR: 0.0, dg.FFMA: 1e9}
    d = dg.diagnose(m)
    assert d.verdict == "memory-bound on DRAM (HBM)" and evidence(d) == {"DRAM throughput": 88.0}


def test_tensor_kernel_near_its_roof():
    d = dg.diagnose({dg.SM: 85.0, dg.MEM: 70.0, dg.FMA: 1.0, dg.TENSOR: 80.0, dg.FFMA: 0.0})
    assert d.cell == "near the roofline" and d.verdict == "compute-bound on the Tensor Cores"


def test_latency_bound_fp32_kernel_falls_back_to_the_matrix():
    m = {dg.SM: 10.0, dg.MEM: 10.0, dg.FMA: 5.0, dg.TENSOR: 0.0, dg.FFMA: 1e9, dg.SHARED_LD: 0.0,
         dg.GLOBAL_LD_REQ: 1e6, dg.STALLS["barrier"]: 40.0, dg.STALLS["long_scoreboard"]: 10.0}
    d = dg.diagnose(m)
    assert d.verdict.startswith("latency-bound") and evidence(d) == {"barrier stall": 40.0}


def test_missing_metrics_are_listed_not_fatal():
    d = dg.diagnose({})
    assert d.cell == "unknown" and d.verdict == "not enough metrics to diagnose"
    assert dg.SM in d.missing and dg.FFMA in d.missing


def test_diagnose_all_skips_stages_without_metrics():
    out = dg.diagnose_all({"tiled": dict(TABLE["mmTiled"]), "wmma": None})
    assert list(out) == ["tiled"] and out["tiled"].stage == "tiled"


def test_every_metric_read_is_requested():
    assert {dg.SM, dg.MEM, dg.L1, dg.L2, dg.DRAM, *dg.STALLS.values(), dg.L2_BYTES, dg.DURATION} <= set(dg.METRICS)
    assert all(name.count("__") == 1 for name in dg.METRICS)
