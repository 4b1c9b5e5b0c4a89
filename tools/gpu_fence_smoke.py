#!/usr/bin/env python3
"""Does the bwrap fence let each untrusted GPU step work, and stop what it must? (run on a GPU box)

Prints one line per check: the sandbox mode, CuPy on the GPU inside the fence (plain and under the
memory limit), nvcc inside the fence, compute-sanitizer and ncu on a fenced kernel, a setsid'd
daemon gone after its step, the repository invisible. Used once per GPU session before grading.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from grader import REPO_ROOT  # noqa: E402
from grader.compile import toolchain  # noqa: E402
from grader.sandbox import guard as sandbox  # noqa: E402
from grader.sandbox.fence import Fence  # noqa: E402

KERNEL = r'''
import cupy as cp
k = cp.RawKernel(r"""extern "C" __global__ void twice(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }""", "twice")
x = cp.arange(1 << 20, dtype=cp.float32)
k(((1 << 20) // 256,), (256,), (x, cp.int32(1 << 20)))
a = cp.random.rand(2048, 2048, dtype=cp.float32)
print("ok", float(x[3]), float((a @ a).sum()) > 0)
'''
MARKER = "fence-smoke-daemon-7f3a"
DAEMON = r'''
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", "MARKER"])
    os._exit(0)
time.sleep(0.5)
'''.replace("MARKER", MARKER)


def alive_with_marker() -> int:
    """Processes on this machine whose command line holds MARKER (the daemon escaped if any)."""
    n = 0
    for d in Path("/proc").iterdir():
        try:
            n += d.name.isdigit() and MARKER.encode() in (d / "cmdline").read_bytes()
        except OSError:
            pass
    return n


def line(name: str, rec, extra: str = "") -> None:
    out = (rec.stdout + rec.stderr).strip().replace("\n", " | ")
    print(f"{name:28} rc={rec.returncode} {rec.wall_s:6.2f} s limit={getattr(rec, 'limit', None)} "
          f"{extra} :: {out[-400:]}", flush=True)


def main() -> int:
    print("mode:", sandbox.mode().describe(), flush=True)
    env = dict(os.environ, CUPY_CACHE_DIR="/tmp/cupy", PYTHONUNBUFFERED="1")
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="fence-smoke-") as tmp:
        work = Path(tmp)
        (work / "k.py").write_text(KERNEL)
        fence = Fence(scratch=work, gpu=True)
        t0 = time.monotonic()
        unfenced = sandbox.run([py, "k.py"], timeout_s=120, cwd=work, env=env)
        line("cupy unfenced", unfenced)
        line("cupy fenced", sandbox.run([py, "k.py"], timeout_s=120, env=env, fence=fence))
        small = Fence(scratch=work, gpu=True, memory_bytes=2 << 30)
        line("cupy fenced 2 GiB", sandbox.run([py, "k.py"], timeout_s=120, env=env, fence=small))
        hog = "import numpy as np; a = np.ones((6 << 30) // 8); print(a.sum())"
        line("host hog 6 GiB vs 2 GiB", sandbox.run([py, "-c", hog], timeout_s=60, env=env, fence=small))
        nvcc = toolchain.find_nvcc().path
        (work / "t.cu").write_text('extern "C" __global__ void f(float* x) { x[threadIdx.x] = 1.0f; }\n')
        if nvcc:
            line("nvcc fenced", sandbox.run([nvcc, "-cubin", "-arch=sm_90a", "-Xptxas", "-v", "t.cu", "-o", "t.cubin"],
                                            timeout_s=120, env=env, fence=Fence(scratch=work)))
        san = toolchain.find_compute_sanitizer().path
        if san:
            line("memcheck fenced", sandbox.run([san, "--tool", "memcheck", py, "k.py"], timeout_s=180, env=env,
                                               fence=fence))
            line("racecheck fenced", sandbox.run([san, "--tool", "racecheck", py, "k.py"], timeout_s=180, env=env,
                                                fence=fence))
        ncu = toolchain.find_ncu().path
        if ncu:
            line("ncu fenced", sandbox.run([ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum",
                                            "--csv", py, "k.py"], timeout_s=240, env=env, fence=fence))
        (work / "d.py").write_text(DAEMON)
        rec = sandbox.run([py, "d.py"], timeout_s=30, env=env, fence=fence)
        line("setsid daemon fenced", rec, f"alive_after={alive_with_marker()}")
        rec = sandbox.run([py, "d.py"], timeout_s=30, cwd=work, env=env)
        line("setsid daemon unfenced", rec, f"alive_after={alive_with_marker()} (expected >0: the weak fence)")
        os.system(f"pkill -f {MARKER}")
        probe = f"import os; print([os.path.exists(p) for p in ({str(REPO_ROOT / 'rubric.yaml')!r}, '/etc/shadow')])"
        line("repo and shadow visible?", sandbox.run([py, "-c", probe], timeout_s=30, env=env, fence=fence))
        print(f"total {time.monotonic() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
