"""Real compute-sanitizer on a real GPU, through the launcher child (marked `gpu`; skipped without one).

racecheck runs ``grader.children sanitize`` (the CUDA driver through ctypes, no CuPy) on the tiled
kernel missing its second __syncthreads() (tests/submissions/race_missing_sync) and on the correct
tiled solution: the race must be found, the solution must come out clean, and each run must take
a few seconds at most (the issue: racecheck under the CuPy child was the GPU step's long pole).
The binding is also checked against NumPy on the solution's product, in a child process of its
own (the test process creates no CUDA context).
"""
from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.compile import toolchain
from grader.evidence.protocol import Kernel
from grader.gpu.sanitize import run_tool
from grader.records import from_jsonable

ROOT = Path(__file__).resolve().parent.parent
RACY = ROOT / "tests" / "submissions" / "race_missing_sync" / "gemm" / "tiled.cu"
CLEAN = ROOT / "solutions" / "gemm" / "tiled.cu"
N = 256  # the rubric's sanitizer size
RUN_LIMIT_S = 30.0  # the rubric's sanitizer.timeout_s: the run ends on its own (it holds the suite's GPU lock, gpu_alone,
# so the suite's background gradings do not share the GPU with it)

pytestmark = pytest.mark.gpu


def _cubin(source: Path, out: Path) -> str:
    nvcc = toolchain.find_nvcc()
    if nvcc.path is None:
        pytest.skip(f"no nvcc: {nvcc.reason}")
    cmd = [nvcc.path, "-cubin", "-arch=native", "-O3", "-lineinfo", str(source), "-o", str(out)]  # -lineinfo: source lines
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    return str(out)


def _spec(cubin: str) -> Kernel:
    # both files declare mmTiled_launch = {32, 32, 32, 32, 0}
    return from_jsonable(Kernel, {"id": "tiled", "cubin": cubin, "kernel": "mmTiled", "inputs": "fp32",
                                  "launch": {"block": [32, 32], "tile": [32, 32], "smem": 0}})


@pytest.fixture(scope="module")
def sanitizer():
    tool = toolchain.find_compute_sanitizer()
    if tool.path is None:
        pytest.skip(f"no compute-sanitizer: {tool.reason}")
    return tool


@pytest.fixture(scope="module")
def cubins(tmp_path_factory) -> dict[str, str]:
    """The racy and the clean tiled kernels, compiled side by side before the test takes the GPU lock."""
    out = tmp_path_factory.mktemp("cubins")
    with ThreadPoolExecutor(max_workers=2) as pool:
        built = pool.map(lambda name, src: _cubin(src, out / f"{name}.cubin"), ("racy", "clean"), (RACY, CLEAN))
        return dict(zip(("racy", "clean"), built))


def test_racecheck_through_the_launcher_child_finds_the_race_and_passes_the_solution(tmp_path, sanitizer, cubins,
                                                                                     gpu_alone):
    # The two runs side by side, as a grading runs its racecheck children.
    with ThreadPoolExecutor(max_workers=2) as pool:
        found, passed = pool.map(lambda name: run_tool("racecheck", sanitizer, _spec(cubins[name]), N, tmp_path / name,
                                                       60), ("racy", "clean"))
    for run in (found, passed):
        text = (run.proc.stdout + run.proc.stderr)[-3000:]
        assert run.reason == "", run.reason + "\n" + text
        assert not run.proc.timed_out, f"racecheck ran past its {RUN_LIMIT_S} s limit"
    assert found.findings and found.findings[0].summary.split()[0] in ("Error:", "Warning:", "Race"), found.findings
    assert any(fl.endswith("tiled.cu") for f in found.findings for _fn, fl, _ln in f.locations), found.findings
    assert passed.findings == [], [f.summary for f in passed.findings]
    walls = {name: round(r.proc.wall_s, 2) for name, r in (("racy", found), ("clean", passed))}
    print(f"racecheck wall time through the launcher child: {walls}")


CHECK = """
import json, sys
import numpy as np
from grader.children.driver import Driver
from grader.children.sanitize import NAN_BITS, gemm_args
from grader.children.inputs import make_inputs
cubin, n = sys.argv[1], int(sys.argv[2])
cuda = Driver()
cuda.start()
f = cuda.load_function(cubin, "mmTiled")
a, b = make_inputs(n, 3, "fp32")
pa, pb, pc = cuda.alloc(a.nbytes), cuda.alloc(b.nbytes), cuda.alloc(a.nbytes)
cuda.upload(pa, a)
cuda.upload(pb, b)
cuda.fill32(pc, NAN_BITS, n * n)
cuda.launch(f, (n // 32, n // 32, 1), (32, 32, 1), 0, gemm_args(pa, pb, pc, n))
cuda.synchronize()
c = np.frombuffer(cuda.download(pc, a.nbytes), dtype=np.float32).reshape(n, n)
ref = a.astype(np.float64) @ b.astype(np.float64)
print(json.dumps({"max_err": float(np.abs(c - ref).max()), "nan": int(np.isnan(c).sum())}))
"""


def test_the_driver_binding_computes_the_solutions_product(cubins, gpu_alone):
    clean = cubins["clean"]
    got = subprocess.run([sys.executable, "-c", CHECK, clean, str(N)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr
    result = json.loads(got.stdout.strip().splitlines()[-1])
    assert result["nan"] == 0 and result["max_err"] < 1e-3, result
