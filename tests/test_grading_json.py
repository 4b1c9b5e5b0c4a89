"""grading.json is the Grading: written by Grading.to_json, read back by load_grading into equal
objects, and every output built from the loaded Grading is the same as from the fresh one."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from grader.compile import toolchain
from grader.evidence.compile import CompileResult, KernelResources, SassResult
from grader.evidence.limits import Peaks
from grader.evidence.protocol import BenchRun, Boxes, CaseVerdict, ProbeResult
from grader.evidence.tools import Tool
from grader.grading import Environment, Grading, GradingFormatError, ProfileRun, StageOutcome, load_grading
from grader.model import Cause, Gap, ItemResult, Measured, ProcRecord, Status, Verdict
from grader.outputs.leaderboard import leaderboard_entries
from grader.outputs.write import write_outputs
from grader.profile.ncu import parse_raw_csv
from grader.profile.timing import summarize
from grader.rubric.load import load_rubric
from grader.score.stages import score

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
TABLE = parse_raw_csv((ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_solutions_h200_n2048.csv").read_text())
PEAKS = Peaks(66.9, 989.0, "rubric override for 'H200'")
MS = {"naive": 275.7, "coalesced": 21.8, "tiled": 15.34, "blocktiling_1d": 6.17, "blocktiling_2d": 2.855,
      "wmma": 0.505, "hopper": 0.195}
BASE_MS = {"cublas_sgemm": 2.68, "cublas_gemmex_fp16": 0.187, "cublas_gemmex_bf16": 0.185}
# What happened to each stage: every verdict the pipeline can record, and both kinds of profile gap.
VERDICTS = {"naive": Verdict.CORRECT, "coalesced": Verdict.TIMED_OUT, "tiled": Verdict.RACE,
            "blocktiling_1d": Verdict.WRONG, "blocktiling_2d": Verdict.CORRECT, "wmma": Verdict.CORRECT,
            "hopper": Verdict.CORRECT}
OUTPUT_FILES = ("results.json", "summary.md", "grading.json", "profile.md", "profile.html")


def _compiled(st) -> tuple[CompileResult, SassResult]:
    proc = ProcRecord(["nvcc", "-cubin", f"{st.id}.cu"], 0, wall_s=1.5, stderr="ptxas info: Used 64 registers",
                      stderr_bytes=30, timeout_s=120.0)
    k = KernelResources(st.kernel, "sm_90a", registers=64, shared_bytes=8192 if st.id != "naive" else 0,
                        barriers=1)
    c = CompileResult(st.id, True, proc=proc, cubin=f"/w/{st.id}/k.cubin", kernel=k, found_kernels=[st.kernel],
                      launch=st.launch, launch_source="rubric default", notes=["a note"],
                      boxes=Boxes(64, 128, 256, 128) if st.operands == "tensor_maps" else None)
    ops = {"wmma": Counter({"HMMA": 64, "LDS": 10}), "hopper": Counter({"HGMMA": 12, "UTMALDG": 10})}.get(
        st.id, Counter({"FFMA": 4096, "LDG": 12}))
    return c, SassResult(opcodes={st.kernel: ops})


def synthetic_grading() -> Grading:
    """A GPU grading with every record type filled in (no GPU or nvcc needed)."""
    outcomes = {}
    for st in RUBRIC.stages:
        c, sass = _compiled(st)
        o = StageOutcome(stage=st, compile=c, sass=sass, verdict=VERDICTS[st.id], profile_n=2048,
                         correctness_message=f"{st.id}: {VERDICTS[st.id].value}", run_output="printed\n")
        o.bench = BenchRun(n=4096, seed=1, student_ms=[MS[st.id]] * 5, baseline_ms=[BASE_MS[st.baseline]] * 5)
        if o.verdict is Verdict.CORRECT:
            o.cases = [CaseVerdict(n=512, kind="check", passed=True, max_scaled_err=1.5e-7)]
            o.timing = summarize(4096, [MS[st.id]] * 5, [BASE_MS[st.baseline]] * 5, PEAKS.get(st.peak))
        if o.verdict is Verdict.CORRECT and st.kernel in TABLE:  # the fixture predates the Hopper stage
            o.ncu = dict(TABLE[st.kernel])
        elif st.id in ("coalesced", "hopper"):
            o.ncu_gap = Gap(Cause.GRADER, f"not evaluated: ncu reported no metrics for {st.kernel}")
        else:
            o.ncu_gap = Gap(Cause.STUDENT, "not profiled: the kernel is not correct")
        outcomes[st.id] = o
    nvcc = Tool("nvcc", "/usr/local/bin/nvcc", "13.0", "system", how="PATH", env={"X": "1"},
                host_compiler="/usr/bin/g++", host_compiler_version="13.2")
    env = Environment(ProbeResult(ok=True, name="NVIDIA H200", cc=[9, 0], sms=132, l2_bytes=62914560),
                      "", nvcc, Tool("cuobjdump", None, reason="not found"), ["-arch=sm_90a"], PEAKS)
    items = score(outcomes, PEAKS) + [
        ItemResult("occupancy", "ex2.explanation", "Exercise 2", Status.MANUAL, 0.0, 2.0, number="O.2",
                   values=Measured(registers=120, times_ms={"512": 1.5}, gated_by=["3.ffma"],
                                   answers={"ex2.explanation": "because", "ex3.explanation": None})),
        ItemResult("report", "table.times", "Times", Status.NOT_EVALUATED, 0.0, 3.0, "not evaluated: no GPU",
                   visibility="after_due_date", number="R.1", needs_gpu=True),
    ]
    profile = ProfileRun(["ncu", "--csv"], "", 12.5, ["ncu note"], ["dram__bytes_write.sum"])
    return Grading("solutions", env, outcomes, items, 321.5, ["files were found one folder down"], profile)


def test_grading_round_trips_to_equal_objects():
    g = synthetic_grading()
    text = json.dumps(g.to_json())
    back = Grading.from_json(json.loads(text))
    assert back == g
    assert back.outcomes["tiled"].verdict is Verdict.RACE and back.outcomes["tiled"].correct is False
    assert back.outcomes["naive"].ncu_gap is None
    assert back.outcomes["blocktiling_1d"].ncu_gap == Gap(Cause.STUDENT, "not profiled: the kernel is not correct")
    assert isinstance(back.items[0].status, Status)
    assert back.items[-1].needs_gpu is True and not back.items[0].needs_gpu
    assert back.outcomes["wmma"].sass.opcodes["mmWMMA"] == Counter({"HMMA": 64, "LDS": 10})
    assert back.outcomes["wmma"].stage == RUBRIC.stage("wmma")  # the rubric's record, tuples and all
    assert json.dumps(back.to_json()) == text


def test_grading_json_keeps_the_keys_people_and_tools_read():
    data = synthetic_grading().to_json()
    assert data["device"]["name"] == "NVIDIA H200" and data["device_reason"] == ""
    assert data["compiler"]["path"] == "/usr/local/bin/nvcc"
    tiled = data["stages"]["tiled"]  # assignment/README.md: stages.<id>.ncu at stages.<id>.profile_n
    assert tiled["correct"] is False and tiled["verdict"] == "race" and tiled["ncu"] is None
    assert data["stages"]["naive"]["ncu"]["gpu__time_duration.sum"] > 0
    assert data["stages"]["naive"]["profile_n"] == 2048 and data["stages"]["naive"]["timing"]["median_ms"] > 0
    assert data["items"][0]["status"] in ("passed", "failed", "not_evaluated", "manual")


def test_outputs_from_the_loaded_grading_are_identical(tmp_path):
    g = synthetic_grading()
    fresh, loaded = tmp_path / "fresh", tmp_path / "loaded"
    results = write_outputs(g, fresh)
    back = load_grading(fresh / "grading.json")
    assert write_outputs(back, loaded) == results
    for name in OUTPUT_FILES:
        assert (loaded / name).read_bytes() == (fresh / name).read_bytes(), name
    assert leaderboard_entries(back) == leaderboard_entries(g) == results.leaderboard
    assert [e.name for e in results.leaderboard or []] == [
        f"{RUBRIC.stage('blocktiling_2d').title}: TFLOP/s", f"{RUBRIC.stage('blocktiling_2d').title}: % of cuBLAS",
        f"{RUBRIC.stage('wmma').title}: TFLOP/s", f"{RUBRIC.stage('wmma').title}: % of cuBLAS",
        f"{RUBRIC.stage('hopper').title}: TFLOP/s", f"{RUBRIC.stage('hopper').title}: % of cuBLAS"]


@pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")
def test_a_pipeline_grading_round_trips(tmp_path):
    from grader.pipeline import grade

    g = grade(ROOT / "solutions", RUBRIC, tmp_path / "a", stages=["tiled"], use_gpu=False)
    write_outputs(g, tmp_path / "a")
    back = load_grading(tmp_path / "a" / "grading.json")
    assert back == g and back.outcomes["tiled"].verdict is Verdict.NOT_EVALUATED
    write_outputs(back, tmp_path / "b")
    for name in ("results.json", "summary.md", "grading.json"):
        assert (tmp_path / "b" / name).read_bytes() == (tmp_path / "a" / name).read_bytes(), name


def test_files_that_are_not_this_graders_grading_json_are_refused_with_a_reason(tmp_path):
    path = tmp_path / "grading.json"
    with pytest.raises(GradingFormatError, match="cannot read"):
        load_grading(path)
    path.write_text("{not json")
    with pytest.raises(GradingFormatError, match="not JSON"):
        load_grading(path)
    path.write_text(json.dumps({"stages": {}, "items": []}))  # the old untyped dump has no format
    with pytest.raises(GradingFormatError, match="format None, expected 2"):
        load_grading(path)
    data = synthetic_grading().to_json()
    data["items"][0]["status"] = "skipped"
    path.write_text(json.dumps(data))
    with pytest.raises(GradingFormatError, match="'skipped' is not a valid Status"):
        load_grading(path)
    data = synthetic_grading().to_json()
    data["stages"]["naive"]["timing"]["median_ms"] = "fast"
    path.write_text(json.dumps(data))
    with pytest.raises(GradingFormatError, match="median_ms"):
        load_grading(path)


def test_a_grading_json_whose_device_predates_the_probes_reason_still_loads(tmp_path):
    """grading.json written before the probe's record had ``reason`` (a present GPU's is "") reads back typed."""
    text = (ROOT / "tests" / "fixtures" / "gradings" / "starter" / "grading.json").read_text(encoding="utf-8")
    before = text.replace(' "device": {\n  "ok": true,\n  "reason": "",\n', ' "device": {\n  "ok": true,\n', 1)
    assert before != text  # the device's reason is gone
    old = tmp_path / "grading.json"
    old.write_text(before, encoding="utf-8")
    device = load_grading(old).env.device
    assert device is not None and device.ok and device.reason == "" and device.name == "NVIDIA H200"
    assert load_grading(old).env.device == fixture_device()


def fixture_device():
    return load_grading(ROOT / "tests" / "fixtures" / "gradings" / "starter" / "grading.json").env.device
