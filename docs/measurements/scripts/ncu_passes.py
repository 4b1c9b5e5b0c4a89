"""How many replay passes Nsight Compute needs for groups of the grader's metrics (a GPU probe for #15).

    python3 docs/measurements/scripts/ncu_passes.py [OUT]

ncu replays a kernel once per pass; a grading's ncu run costs about its passes times its kernels,
and each pass slows more than the rest of a grading while the other GPU of the host starts CUDA
processes (docs/measurements/2026-11-30-h200-speed-run15-20.md). This collects each group below,
once, over one small kernel of a throw-away CuPy program (the kernel does not change the count),
with the grader's ncu and clock control, and reads the passes from ncu's own line
(``... - 14 passes``). The groups come from the grader's lists (grader/profile/ncu.py:
``metrics_needed``, grader/profile/diagnosis.py), never written out here:

- ``all``: what a grading collects; ``rubric``: what the rubric's ncu items read;
- ``all-stalls``, ``all-breakdowns``, ``all-stalls-breakdowns``: ``all`` without the stall reasons,
  without the four Speed-of-Light throughputs (SM, memory, L1, L2: each the largest of many
  counters), or without both; ``stalls``, ``breakdowns`` and each throughput alone.

Prints one line per group and writes OUT/ncu_passes.json (OUT: ``$OUT``, else /tmp).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from grader.compile.toolchain import find_ncu  # noqa: E402
from grader.profile import diagnosis as D  # noqa: E402
from grader.profile.ncu import metrics_needed, rubric_metrics  # noqa: E402
from grader.rubric.load import load_rubric  # noqa: E402

PROGRAM = """\
import cupy as cp
k = cp.RawKernel(r'''extern "C" __global__ void f(float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] = a[i] * 2.f + 1.f; }''', "f")
n = 1 << 22
a = cp.ones(n, cp.float32)
k((n // 256,), (256,), (a, cp.int32(n)))
cp.cuda.Device().synchronize()
"""
PASSES = re.compile(r'^==PROF== Profiling "[^"]*":.* - (\d+) pass(?:es)?\s*$', re.M)


def passes(text: str) -> int | None:
    """The replay passes on ncu's first ``==PROF== Profiling "k": ... - N passes`` line, or None."""
    match = PASSES.search(text)
    return int(match.group(1)) if match else None


def groups(rubric) -> dict[str, list[str]]:
    every = metrics_needed(rubric)
    stalls = list(D.STALLS.values())
    sol = [D.SM, D.MEM, D.L1, D.L2]
    return {
        "all": every,
        "rubric": rubric_metrics(rubric),
        "all-stalls": [m for m in every if m not in stalls],
        "all-breakdowns": [m for m in every if m not in sol],
        "all-stalls-breakdowns": [m for m in every if m not in stalls + sol],
        "stalls": stalls,
        "breakdowns": sol,
        **{name: [metric] for name, metric in (("SM", D.SM), ("memory", D.MEM), ("L1", D.L1), ("L2", D.L2),
                                               ("DRAM", D.DRAM))},
    }


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp"))
    rubric = load_rubric(ROOT / "rubric.yaml")
    ncu = find_ncu().path
    if ncu is None:
        print("ncu_passes: no ncu found", file=sys.stderr)
        return 2
    clock = rubric.profile.clock_control
    found: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "one_kernel.py"
        program.write_text(PROGRAM)
        for name, metrics in groups(rubric).items():
            t0 = time.monotonic()
            proc = subprocess.run([str(ncu), "--clock-control", clock, "--metrics", ",".join(metrics), "-k", "f",
                                   "-c", "1", sys.executable, str(program)],
                                  capture_output=True, text=True, timeout=300)
            text = proc.stdout + proc.stderr
            count = passes(text)
            found[name] = {"metrics": len(metrics), "passes": count,
                           "seconds": round(time.monotonic() - t0, 2), "returncode": proc.returncode,
                           **({} if count else {"tail": text[-600:]})}
            print(f"{name:24s} {len(metrics):3d} metrics  {found[name]['passes']} passes", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ncu_passes.json").write_text(json.dumps({"ncu": str(ncu), "groups": found}, indent=1))
    return 0 if all(g["passes"] for g in found.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
