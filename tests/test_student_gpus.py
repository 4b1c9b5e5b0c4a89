"""Students' own GPUs: run_local.py and `check` on a T4, A100, RTX 3090, L4, RTX 4090 or H100 build
for that card's architecture, use its own peaks and say so, and show what cannot be graded there (the Hopper
bonus, a kernel written for a newer card) as "not evaluated on this GPU", never failed.

None of those cards is here: the device is the real probe child over tests/fake_cupy, told which card to be
(FAKE_CUPY's "device": name, compute capability, SMs, clock, L2). What is simulated and what is real is
recorded in docs/measurements/2026-12-06-student-gpus-simulated.md: the probe, the arch and peak choices,
the compiles (real nvcc) and the verdicts are real; the card's answers and its kernels' runs are not.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.compile import toolchain
from grader.deploy.kit.check import gpu_line, run_checks
from grader.deploy.kit.checks import Mark
from grader.gpu.device import probe_device
from grader.pipeline import detect_environment
from grader.rubric.load import load_rubric

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
FAKE_CUPY = ROOT / "tests" / "fake_cupy"
HOPPER = next(st for st in RUBRIC.stages if st.requires_arch)
needs_nvcc = pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")

# name, compute capability, SMs, clock (kHz), L2 bytes: the cards' datasheet figures.
CARDS = {
    "t4": ("Tesla T4", [7, 5], 40, 1_590_000, 4 << 20),
    "a100": ("NVIDIA A100-SXM4-40GB", [8, 0], 108, 1_410_000, 40 << 20),
    "rtx3090": ("NVIDIA GeForce RTX 3090", [8, 6], 82, 1_695_000, 6 << 20),
    "l4": ("NVIDIA L4", [8, 9], 58, 2_040_000, 48 << 20),
    "rtx4090": ("NVIDIA GeForce RTX 4090", [8, 9], 128, 2_520_000, 72 << 20),
    "h100": ("NVIDIA H100 80GB HBM3", [9, 0], 132, 1_980_000, 50 << 20),
}


def _fake(card: str) -> dict[str, str]:
    name, cc, sms, clock, l2 = CARDS[card]
    device = {"name": name, "cc": cc, "sms": sms, "clock_khz": clock, "l2_bytes": l2}
    return {"PYTHONPATH": str(FAKE_CUPY), "FAKE_CUPY": json.dumps({"gemm": {}, "device": device})}


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> dict[str, dict]:
    """Each card as the grader's own probe child describes it (over the stand-in CuPy)."""
    out = {}
    for card in CARDS:
        device, reason = probe_device(60, tmp_path_factory.mktemp(card), extra_env=_fake(card))
        assert device is not None and not reason, (card, reason)
        out[card] = device
    return out


@pytest.mark.parametrize("card", CARDS)
def test_the_probe_describes_the_card(probed, card):
    name, cc, sms, clock, l2 = CARDS[card]
    d = probed[card]
    assert (d.name, d.cc, d.sms, d.clock_khz, d.l2_bytes) == (name, cc, sms, clock, l2)


@pytest.mark.parametrize("card", CARDS)
def test_a_grading_builds_for_the_cards_arch_and_uses_its_own_peaks(probed, card):
    env = detect_environment(RUBRIC, device=probed[card])
    major, minor = CARDS[card][1]
    arch = f"sm_{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")
    assert env.arch_flags == [f"-arch={arch}"]
    override = next((o for o in RUBRIC.peak_overrides if o.match.lower() in CARDS[card][0].lower()), None)
    if override is not None:  # the course's GPUs: the datasheet's figures, named
        assert (env.peaks.fp32, env.peaks.fp16_tensor) == (override.fp32, override.fp16_tensor)
        assert env.peaks.source == f"rubric override for '{override.match}'"
    else:  # a student's card: its own peaks, derived from its SMs and clock, and said to be its own
        rates = RUBRIC.peak_per_sm_clock[f"{major}.{minor}"]
        hz_sms = CARDS[card][3] * 1e3 * CARDS[card][2]
        assert env.peaks.fp32 == pytest.approx(rates["fp32"] * hz_sms / 1e12)
        assert env.peaks.fp16_tensor == pytest.approx(rates["fp16_tensor"] * hz_sms / 1e12)
        assert env.peaks.source.startswith("this GPU's own peaks, derived:") and f"CC {major}.{minor}" in env.peaks.source


@pytest.mark.parametrize("card", CARDS)
def test_the_hopper_bonus_is_not_evaluated_on_any_other_card(probed, card):
    env = detect_environment(RUBRIC, device=probed[card])
    why = toolchain.unsupported_reason(HOPPER.requires_arch, env.arch_flags)
    if CARDS[card][1] == [9, 0]:
        assert why == ""
    else:
        assert why.startswith(f"not evaluated on this GPU (needs {HOPPER.requires_arch}")


CP_ASYNC = (ROOT / "tests/fixtures/nvcc13.0_sm75_solution_wmma_cp_async.txt").read_text()


def test_a_compile_that_fails_only_for_a_newer_cards_features_is_the_cards_not_the_students():
    """ptxas' own output (nvcc 13.0, solutions/gemm/wmma.cu for sm_75: cp.async is sm_80's)."""
    why = toolchain.newer_arch_needed(CP_ASYNC, ["-arch=sm_75"])
    assert why.startswith("not evaluated on this GPU (needs sm_80 or newer for cp.async, cp.async.commit_group, "
                          "cp.async.wait_group)") and "compiles for sm_75" in why
    assert toolchain.newer_arch_needed(CP_ASYNC, ["-arch=sm_80"]) == ""  # not what failed there
    mixed = CP_ASYNC + "wmma.cu(12): error: identifier \"tile\" is undefined\n"
    assert toolchain.newer_arch_needed(mixed, ["-arch=sm_75"]) == ""  # a mistake of the student's too
    assert toolchain.newer_arch_needed("", ["-arch=sm_75"]) == ""


def _grade(tmp_path: Path, card: str, stages: str) -> tuple[dict, str, dict]:
    out = tmp_path / "out"
    env = {**os.environ, **_fake(card)}
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(ROOT / "solutions"), "--out", str(out),
                           "--quiet", "--stages", stages], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tests = {t["number"]: t for t in json.loads((out / "results.json").read_text())["tests"]}
    return tests, (out / "summary.md").read_text(), json.loads((out / "grading.json").read_text())


@needs_nvcc
@pytest.mark.parametrize("card", ["t4", "rtx3090"])
def test_run_local_on_a_students_card(tmp_path, card):
    """A whole grading on the card: built for its arch, its own peaks in the summary, the Hopper stage (and on
    the T4 the WMMA kernel, whose cp.async needs sm_80) not evaluated on this GPU, none of it failed."""
    tests, summary, grading = _grade(tmp_path, card, "naive,wmma,hopper")
    major, minor = CARDS[card][1]
    assert grading["arch_flags"] == [f"-arch=sm_{major}{minor}"]
    assert f"-arch=sm_{major}{minor}" in grading["stages"]["naive"]["compile"]["proc"]["command"]  # nvcc's own
    assert "this GPU's own peaks" in summary and CARDS[card][0] in summary
    hopper = [t for n, t in tests.items() if n.startswith(HOPPER.number + ".")]
    assert hopper and all(t["extra_data"]["status"] == "not_evaluated" and t["score"] == 0 and
                          t["output"].startswith("not evaluated on this GPU (needs sm_90a") for t in hopper)
    wmma = [t for n, t in tests.items() if n.startswith(RUBRIC.stage("wmma").number + ".")]
    if card == "t4":
        assert all(t["extra_data"]["status"] == "not_evaluated" and "needs sm_80 or newer for cp.async" in t["output"]
                   for t in wmma)
    else:
        assert tests[RUBRIC.stage("wmma").number + ".compiles"]["extra_data"]["status"] == "passed"
    assert tests["1.compiles"]["extra_data"]["status"] == "passed"


@needs_nvcc
def test_check_on_a_students_card_builds_for_it_and_says_what_this_gpu_cannot_grade(probed):
    rows = {r.what: r for r in run_checks(ROOT / "solutions", RUBRIC, device=probed["t4"])}
    line = gpu_line(RUBRIC, probed["t4"])
    assert line.startswith("GPU: Tesla T4 (CC 7.5): kernels built for sm_75") and gpu_line(RUBRIC, None) == ""
    hop = rows[f"kernel {HOPPER.number} {HOPPER.id}"]
    assert hop.mark is Mark.OK and "(built for sm_90a)" in hop.detail and "not evaluated on this GPU" in hop.detail
    wmma = rows[f"kernel {RUBRIC.stage('wmma').number} wmma"]
    assert wmma.mark is Mark.SKIP and "needs sm_80 or newer for cp.async" in wmma.detail
    assert not [r for r in rows.values() if r.mark is Mark.FIX]
