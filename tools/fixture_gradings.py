"""Make the stand-in GPU gradings of tests/fixtures/gradings/ (until real H200 gradings replace them).

    python tools/fixture_gradings.py [--out tests/fixtures/gradings] [--rubric rubric.yaml]

Each submission is graded for real without a GPU (``pipeline.grade(..., use_gpu=False)``: the compiles, ptxas,
SASS and the occupancy answers of a real submission folder); then what the GPU would have measured is laid over
its outcomes: an H200 device, each stage's verdict, its timing against cuBLAS (TimingSummary from the medians
below) and its Nsight Compute metrics (the H200 reference kernels' rows of
tests/fixtures/ncu/ncu2025.3.1_raw_grader_solutions_with_hopper_h200_n2048.csv, with the overrides below); the
stage items are scored by the pipeline's scoring and the report is graded against those outcomes, as
``pipeline.grade`` would. Only grading.json is written, one folder per submission:

    reference  solutions/                            every stage correct at the reference's H200 speeds
    textbook   solutions/ with the course text's numbers (issue 28's table): 1D 33.2 %, 2D 35.3 % with the FMA
               pipe at 32.6 %, WMMA 28 TFLOP/s
    shifted    the one-stage-shifted submission (grader/instructor/shifted.py): each stage measures as the
               stage before it
    starter    starter/                              compiles, writes nothing: every run wrong, nothing timed
    broken     solutions/ with coalesced.cu not compiling and hopper.cu missing; tiled races, 1D crashes, 2D
               times out, WMMA is wrong
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.grading import Environment, Grading, StageOutcome  # noqa: E402
from grader.model import Cause, Gap, Verdict  # noqa: E402
from grader.spec.types import Rubric  # noqa: E402

NCU_CSV = ROOT / "tests/fixtures/ncu/ncu2025.3.1_raw_grader_solutions_with_hopper_h200_n2048.csv"
DEVICE = {"ok": True, "name": "NVIDIA H200", "cc": [9, 0], "sms": 132, "l2_bytes": 62914560,
          "runtime_version": 13000, "cupy_version": "13.6.0", "driver_version": 13000}
BENCH_N = 4096
# The reference kernels' medians at N = 4096 on the H200 (ms), and the baselines'.
REFERENCE_MS = {"naive": 275.7, "coalesced": 21.8, "tiled": 15.34, "blocktiling_1d": 6.17, "blocktiling_2d": 2.855,
                "wmma": 0.505, "hopper": 0.195}
BASELINE_MS = {"cublas_sgemm": 2.68, "cublas_gemmex_fp16": 0.187, "cublas_gemmex_bf16": 0.185}
FLOPS = 2 * BENCH_N**3


def _ms_at_tflops(tflops: float) -> float:
    return FLOPS / (tflops * 1e12) * 1e3


TEXTBOOK_MS = {**REFERENCE_MS, "blocktiling_1d": 2.68 / 0.332, "blocktiling_2d": 2.68 / 0.353,
               "wmma": _ms_at_tflops(28.0), "hopper": _ms_at_tflops(300.0)}
TEXTBOOK_NCU = {"blocktiling_2d": {"sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": 32.6},
                "wmma": {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": 6.1}}
BROKEN_VERDICTS = {"tiled": Verdict.RACE, "blocktiling_1d": Verdict.CRASHED, "blocktiling_2d": Verdict.TIMED_OUT,
                   "wmma": Verdict.WRONG}


def _table() -> dict[str, dict]:
    from grader.profile.ncu import parse_raw_csv

    return dict(parse_raw_csv(NCU_CSV.read_text(encoding="utf-8")))


def _measure(o: StageOutcome, verdict: Verdict, ms: float | None, ncu: dict | None, peaks) -> None:
    """Lay the GPU's measurements over one statically graded outcome."""
    from grader.run.timing import summarize

    st = o.stage
    o.gpu_reason = ""
    o.verdict = verdict if o.compile is not None and o.compile.ok else Verdict.NOT_COMPILED
    o.profile_n = 2048
    o.correctness_message = {Verdict.CORRECT: "correct at every size", Verdict.WRONG: "wrong at N=256",
                             Verdict.RACE: "racecheck: shared-memory hazards", Verdict.CRASHED: "crashed",
                             Verdict.TIMED_OUT: "timed out"}.get(o.verdict, "")
    if o.verdict is Verdict.CORRECT and ms is not None:
        base = BASELINE_MS[st.baseline]
        o.cases = [{"n": n, "kind": "check", "passed": True, "max_scaled_err": 2e-7, "problem": None}
                   for n in (256, 512, 1024)]
        o.bench = {"n": BENCH_N, "student_ms": [ms] * 7, "baseline_ms": [base] * 7}
        o.timing = summarize(BENCH_N, [ms * f for f in (0.99, 1.0, 1.01, 1.0, 1.0, 0.995, 1.005)],
                             [base] * 7, peaks.get(st.peak))
        o.ncu, o.ncu_gap = dict(ncu) if ncu else None, None if ncu else Gap(Cause.GRADER, "not evaluated: no row")
    elif o.verdict is Verdict.NOT_COMPILED:
        o.ncu_gap = Gap(Cause.STUDENT, "not profiled: the stage did not compile")
    else:
        o.ncu_gap = Gap(Cause.STUDENT, "not profiled: the kernel is not correct")


def _graded(src: Path, rubric: Rubric, work: Path) -> Grading:
    from grader.pipeline import grade

    return grade(src, rubric, work, use_gpu=False)


def make(name: str, src: Path, rubric: Rubric, work: Path, plan: dict) -> Grading:
    """One fixture grading: ``src`` graded statically, then ``plan``'s measurements, then scored."""
    from grader.score.stages import score
    from grader.spec.peaks import device_peaks
    from grader.writeup.run import grade_report_submission

    g = _graded(src, rubric, work / name)
    env = Environment(DEVICE, "", g.env.nvcc, g.env.cuobjdump, g.env.arch_flags, device_peaks(rubric, DEVICE),
                      sandbox=g.env.sandbox)
    for sid, o in g.outcomes.items():
        verdict, ms, ncu = plan[sid]
        _measure(o, verdict, ms, ncu, env.peaks)
    occupancy = [i for i in g.items if i.stage == "occupancy"]
    report = grade_report_submission(src, rubric, g.outcomes) if rubric.report is not None else []
    items = score(g.outcomes, env.peaks) + occupancy + report
    return replace(g, submission=name, env=env, items=items, seconds=180.0, phases=[], timeline=[], cpu_s=None,
                   cpu_self_s=None)


def plans(rubric: Rubric) -> dict[str, dict]:
    table = _table()
    stages = list(rubric.stages)
    row = {st.id: table.get(st.kernel) for st in stages}
    correct = Verdict.CORRECT
    reference = {st.id: (correct, REFERENCE_MS[st.id], row[st.id]) for st in stages}
    textbook = {st.id: (correct, TEXTBOOK_MS[st.id], {**(row[st.id] or {}), **TEXTBOOK_NCU.get(st.id, {})})
                for st in stages}
    # Each stage holds the stage before it: it measures as that kernel (the naive stage holds the naive kernel).
    shifted = {st.id: (correct, REFERENCE_MS[stages[max(k - 1, 0)].id],
                       row[stages[max(k - 1, 0)].id]) for k, st in enumerate(stages)}
    starter = {st.id: (Verdict.WRONG, None, None) for st in stages}
    broken = {st.id: (BROKEN_VERDICTS.get(st.id, correct), REFERENCE_MS[st.id], row[st.id]) for st in stages}
    return {"reference": reference, "textbook": textbook, "shifted": shifted, "starter": starter, "broken": broken}


def sources(tmp: Path, rubric: Rubric) -> dict[str, Path]:
    from grader.instructor.shifted import write_shifted

    shifted = tmp / "src-shifted"
    shutil.copytree(ROOT / "solutions", shifted)
    write_shifted(ROOT / "solutions", rubric, shifted)
    broken = tmp / "src-broken"
    shutil.copytree(ROOT / "solutions", broken)
    (broken / "gemm" / "coalesced.cu").write_text('extern "C" __global__ void mmCoalesced(const float* A, '
                                                  "const float* B, float* C, int N) { this is not CUDA }\n")
    (broken / "gemm" / "hopper.cu").unlink()
    return {"reference": ROOT / "solutions", "textbook": ROOT / "solutions", "shifted": shifted,
            "starter": ROOT / "starter", "broken": broken}


def main(argv: list[str] | None = None) -> int:
    from grader.spec.rubric import load_rubric

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "tests" / "fixtures" / "gradings"))
    p.add_argument("--rubric", default=str(ROOT / "rubric.yaml"))
    args = p.parse_args(argv)
    rubric = load_rubric(args.rubric)
    out = Path(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        srcs = sources(Path(tmp), rubric)
        for name, plan in plans(rubric).items():
            g = make(name, srcs[name], rubric, Path(tmp) / "work", plan)
            (out / name).mkdir(parents=True, exist_ok=True)
            g.write(out / name / "grading.json")
            print(f"{name}: {g.score:g} of {g.max_score:g} (+{g.bonus[0]:g} bonus)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
