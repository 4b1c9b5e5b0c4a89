"""Trusted child: compile, once, every CuPy kernel the other children would compile for themselves.

``python -m grader.children warm SPEC.json RESULT.json``, unfenced, runs only the grader's code.
CuPy compiles each of its own elementwise and reduction kernels (the input draws, the NaN fills,
the checker's comparisons) with NVRTC the first time a process uses it, and keeps the cubin in
``$CUPY_CACHE_DIR``. This child makes the same calls as the others, at the same sizes and types,
so that folder ends up holding all of them:

* the stage child's own :class:`~grader.children.stage.Runner` (correctness sizes, then a
  one-repetition benchmark against the same baseline) for each kind of stage the rubric has,
  on a kernel of the grader's own instead of a student's cubin;
* the checker's :func:`~grader.children.check.check` on those outputs and fingerprints;
* the profile child's draws (inputs and a NaN-filled C) at the profile's size (the sanitizer's
  launcher, grader/children/sanitize.py, uses no CuPy).

The grading process (grader/gpu/warm.py) lists the folder's files with their hashes and starts
every other child's cache as a copy of them. The grader's kernel writes zeros: finite and wrong,
so every path of the checker runs (the largest error, the first bad element, the fingerprints).
RESULT.json: ``{"ok": true, "runs": [...], "times": {...}}``; any failure ends the child with a
traceback and no ``ok``, and the children then compile what they need themselves.
"""
from __future__ import annotations

import time
from pathlib import Path

from grader.children.check import check
from grader.children.inputs import make_inputs_xp
from grader.children.protocol import write_result
from grader.children.stage import Runner
from grader.evidence.protocol import (
    CheckCase,
    CheckRequest,
    CheckSpec,
    Fingerprints,
    StageResult,
    StageSpec,
    WarmResult,
    WarmRun,
    WarmSpec,
)

KERNEL_NAME = "warm_gemm"
# The stage contract's signature (A, B, C, N); the inputs are float or half, so they are untyped here.
_KERNEL = r"""
extern "C" __global__ void warm_gemm(const void* A, const void* B, float* C, int N) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < N && col < N) C[(long long)row * N + col] = 0.0f;
}
"""


class _GraderKernelRunner(Runner):
    """The stage child's runner, loading the grader's kernel (NVRTC) instead of a cubin file."""

    def load(self) -> None:
        self.module = self.cp.RawModule(code=_KERNEL)
        self.kernel = self.module.get_function(KERNEL_NAME)
        self.report.loaded = True
        self.save()


def _check_entry(run_id: str, spec: StageSpec, report: StageResult, rtol: float) -> CheckRequest:
    """What the grading process would ask the checker about this run (grader/gpu/stages.py: _check_request)."""
    cases = [CheckCase(n=c.n, seed=c.seed, file=c.file, kind="check") for c in report.correctness]
    bench = report.bench
    assert bench is not None and bench.file and bench.fingerprints and bench.last_seed is not None
    prints = Fingerprints.of(bench, bench.fingerprints)
    cases.append(CheckCase(n=bench.n, seed=bench.last_seed, file=bench.file, kind="bench", fingerprints=prints))
    return CheckRequest(id=run_id, inputs=spec.inputs, rtol=rtol, out_dir=spec.out_dir, cases=cases)



def run(spec: WarmSpec, result: Path) -> int:
    import cupy as cp

    times: dict[str, float] = {}  # the report's, filled as the steps end
    report = WarmResult(times=times)
    t0 = time.perf_counter()
    to_check = []
    for i, rs in enumerate(spec.runs):
        out = Path(rs.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        runner = _GraderKernelRunner(rs, out / "stage_result.json")
        # The grader's kernel first (NVRTC): a CuPy that cannot compile it fails the child before it draws
        # any input or makes any buffer.
        runner.load()
        runner.prepare()
        runner.correctness()
        runner.bench()
        to_check.append(_check_entry(f"run{i}", rs, runner.report, rs.rtol))
        report.runs.append(WarmRun(inputs=rs.inputs, baseline=rs.baseline, n=rs.bench.n if rs.bench else 0))
    times["stage"] = round(time.perf_counter() - t0, 3)
    t1 = time.perf_counter()
    verdicts = check(CheckSpec(stages=to_check))
    times["check"] = round(time.perf_counter() - t1, 3)
    t2 = time.perf_counter()
    for draw in spec.draws:  # grader/children/profile.py's calls, at its sizes
        n = draw.n
        make_inputs_xp(cp, n, 7, draw.inputs)
        cp.full((n, n), cp.nan, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    times["draws"] = round(time.perf_counter() - t2, 3)
    report.checked = sorted(verdicts)
    report.ok = True
    write_result(result, report)
    return 0
