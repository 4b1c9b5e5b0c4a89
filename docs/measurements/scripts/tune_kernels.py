#!/usr/bin/env python3
"""Compile, check and time variants of the GEMM-ladder solution kernels on one GPU.

Run on the GPU machine from the repository root:

    python docs/measurements/scripts/tune_kernels.py                 # everything, table on stdout
    OUT=/some/dir python docs/measurements/scripts/tune_kernels.py   # ... and the full record in $OUT/tune.json
    python docs/measurements/scripts/tune_kernels.py --compile-only  # no GPU: ptxas registers/spills of every variant
    python docs/measurements/scripts/tune_kernels.py --only 2d       # variants whose name starts with "2d"

Each variant is a solution file from solutions/gemm/ compiled with a set of -D
macros (the TUNE_* knobs those files expose). The grader compiles with no -D, so
the variants marked "default" are the ones it grades.

Every variant runs in its own child process (``--one NAME``): a kernel that
faults kills its CUDA context, and a hang is cut off by the child's time limit,
so one bad variant cannot take the others down. The child

* loads the cubin with cupy.RawModule and reads the ``<kernel>_launch`` array
  (5 int32: blockDim.x, blockDim.y, BM, BN, dynamic smem bytes);
* checks correctness at N = 1024 against a float64 product of the same inputs
  (uniform in [-1, 1], no zeros; C poisoned with NaN bytes before the launch):
  pass iff |c - r| <= rtol * (|r| + rms(r)) everywhere, rtol 1e-3 for fp32 and
  2e-2 for the fp16 kernel (NaN fails);
* times N = 4096 with CUDA events, interleaved with the cuBLAS baseline
  (SGEMM through cupy.matmul with CUPY_TF32=0 for fp32; cublasGemmEx FP16 in,
  FP32 out, compute 32F for the fp16 kernel), with L2 flushed (256 MB memset)
  before every timed launch; medians are reported;
* also compares the N = 4096 output with the baseline's (same tolerance), so a
  timing is never reported for a kernel that is wrong at the timed size.

Needs numpy and cupy (CUDA 13 build) and nvcc on PATH (or --nvcc).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

# Must be set before cupy is imported anywhere in this process.
os.environ["CUPY_TF32"] = "0"

ROOT = Path(__file__).resolve().parents[3]
SOLUTIONS = ROOT / "solutions" / "gemm"
ARCH = ["-gencode=arch=compute_90a,code=sm_90a"]

# stage id -> (file, kernel, input kind)
STAGES = {
    "naive": ("naive.cu", "mmNaive", "fp32"),
    "coalesced": ("coalesced.cu", "mmCoalesced", "fp32"),
    "tiled": ("tiled.cu", "mmTiled", "fp32"),
    "blocktiling_1d": ("blocktiling_1d.cu", "mm1DBlocktiling", "fp32"),
    "blocktiling_2d": ("blocktiling_2d.cu", "mm2DBlocktiling", "fp32"),
    "wmma": ("wmma.cu", "mmWMMA", "fp16"),
}


def _v(name: str, stage: str, why: str, default: bool = False, **defines: int) -> dict:
    return {"name": name, "stage": stage, "defines": {f"TUNE_{k}": v for k, v in defines.items()},
            "default": default, "why": why}


# Defaults of the solution files are marked default=True (compiled with no -D at all).
VARIANTS = [
    _v("naive", "naive", "stage 1 as graded", default=True),
    _v("coalesced", "coalesced", "stage 2 as graded", default=True),
    _v("tiled", "tiled", "stage 3 as graded", default=True),
    # ---- 1D: must beat tiled by >= 2.3x and stay clearly below 2D
    _v("1d-default", "blocktiling_1d", "file default: 128x64 tile, BK 16, TM 16, 512 threads", default=True),
    _v("1d-64x64x8-tm8", "blocktiling_1d", "handout shape (512 threads) with float4 loads + transposed A",
       BM=64, BN=64, BK=8, TM=8),
    _v("1d-128x64x32-tm16", "blocktiling_1d", "deeper k-step: half the barriers of the default", BM=128, BN=64,
       BK=32, TM=16),
    # ---- 2D: target >= 90% of cuBLAS SGEMM
    _v("2d-default", "blocktiling_2d", "file default: 128x128x8, warp 32x64 (lanes 4x8), 2 blocks/SM", default=True),
    _v("2d-lanes8x4", "blocktiling_2d", "warp tile 64x32 instead of 32x64 (other As/Bs read mix)", LANES_M=8),
    _v("2d-bk16-minb1", "blocktiling_2d", "BK 16: half the barriers; ~155 regs so 1 block/SM", BK=16, MINB=1),
    _v("2d-128x128-minb1", "blocktiling_2d", "no register cap (~130 regs): 1 block/SM, does the cap cost?", MINB=1),
    _v("2d-128x64-minb4", "blocktiling_2d", "128 threads/block, 4 blocks/SM: more, smaller blocks", BN=64, MINB=4),
    _v("2d-64x128-minb4", "blocktiling_2d", "as above, tile transposed", BM=64, MINB=4),
    _v("2d-128x256-minb1", "blocktiling_2d", "512 threads/block: more reuse per global load", BN=256, MINB=1),
    # ---- WMMA: target >= 300 TFLOP/s
    _v("wmma-default", "wmma", "file default: 128x128x32, 4 warps of 64x64, 4 stages, 2 blocks/SM", default=True),
    _v("wmma-128x256-8w", "wmma", "previous default: 128x256, 8 warps of 64x64, 1 block/SM", BN=256, MINB=1),
    _v("wmma-128x256-bk64-s3", "wmma", "BK 64: half the barriers per FLOP, 156 KB smem", BN=256, BK=64, STAGES=3,
       MINB=1),
    _v("wmma-s3", "wmma", "default with 3 slots (57 KB smem)", STAGES=3),
    _v("wmma-s5", "wmma", "default with 5 slots (95 KB smem, still 2 blocks/SM)", STAGES=5),
    _v("wmma-bk64-s3", "wmma", "default with BK 64, 3 slots (104 KB, 2 blocks/SM)", BK=64, STAGES=3),
    _v("wmma-bk64-s4", "wmma", "default with BK 64, 4 slots (139 KB, 1 block/SM)", BK=64, STAGES=4, MINB=1),
    _v("wmma-bk64-s2", "wmma", "default with BK 64, 2 slots (70 KB, 2 blocks/SM)", BK=64, STAGES=2),
    _v("wmma-128x128-w64x32", "wmma", "8 warps of 64x32 (128 regs), 2 blocks/SM", WN=32),
]
BY_NAME = {v["name"]: v for v in VARIANTS}

# Timing repetitions per stage (naive at N = 4096 takes ~0.3 s per launch).
REPS = {"naive": 3, "coalesced": 5}
WARMUP = {"naive": 1, "coalesced": 2}
DEFAULT_REPS = 15
DEFAULT_WARMUP = 3


# ----------------------------------------------------------------------------- compile


def parse_ptxas(text: str, kernel: str) -> dict:
    """Registers, spills, stack and static smem of ``kernel`` from a ``ptxas -v`` report."""
    out: dict = {"regs": None, "spill_stores": None, "spill_loads": None, "stack": None, "smem_static": 0}
    start = text.find(f"Compiling entry function '{kernel}'")
    if start < 0:
        return out
    nxt = text.find("Compiling entry function", start + 1)
    block = text[start: nxt if nxt > 0 else len(text)]
    m = re.search(r"(\d+) bytes stack frame,\s*(\d+) bytes spill stores,\s*(\d+) bytes spill loads", block)
    if m:
        out["stack"], out["spill_stores"], out["spill_loads"] = (int(g) for g in m.groups())
    m = re.search(r"Used (\d+) registers(.*)", block)
    if m:
        out["regs"] = int(m.group(1))
        s = re.search(r"(\d+) bytes smem", m.group(2))
        if s:
            out["smem_static"] = int(s.group(1))
    return out


def cubin_path(build: Path, name: str) -> Path:
    return build / f"{name}.cubin"


def compile_variant(v: dict, build: Path, nvcc: str) -> dict:
    file, kernel, _ = STAGES[v["stage"]]
    cmd = [nvcc, "-cubin", *ARCH, "-O3", "-Xptxas", "-v", "-lineinfo"]
    cmd += [f"-D{k}={val}" for k, val in v["defines"].items()]
    cmd += [str(SOLUTIONS / file), "-o", str(cubin_path(build, v["name"]))]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        text = p.stdout + p.stderr
        rc = p.returncode
    except subprocess.TimeoutExpired:
        text, rc = "nvcc timed out", -1
    rec = {"cmd": " ".join(cmd), "rc": rc, "seconds": round(time.time() - t0, 1)}
    rec.update(parse_ptxas(text, kernel))
    if rc != 0:
        rec["error"] = text[-3000:]
    return rec


# ----------------------------------------------------------------------------- one variant (child)


def _inputs(np, n: int, kind: str, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        x = rng.uniform(-1.0, 1.0, size=(n, n)).astype(np.float16 if kind == "fp16" else np.float32)
        x[x == 0] = 0.5  # never exact zeros (after rounding to the input type)
        out.append(x)
    return out


def _compare(np, c, r, rtol: float) -> dict:
    """Elementwise |c - r| <= rtol * (|r| + rms(r)); NaN fails."""
    c = np.asarray(c, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    rms = float(np.sqrt(np.mean(r * r)))
    err = np.abs(c - r)
    scale = rtol * (np.abs(r) + rms)
    ok = err <= scale  # False for NaN
    bad = int(ok.size - np.count_nonzero(ok))
    finite = np.isfinite(err)
    rec = {"passed": bad == 0, "bad": bad, "nan": int(np.count_nonzero(~np.isfinite(c))),
           "max_abs_err": float(err[finite].max()) if finite.any() else None,
           "max_rel_to_tol": float((err[finite] / scale[finite]).max() * rtol) if finite.any() else None}
    if bad:
        idx = np.argwhere(~ok)[0]
        rec["first_bad"] = [int(idx[0]), int(idx[1]), float(c[tuple(idx)]), float(r[tuple(idx)])]
    return rec


def run_one(name: str, build: Path) -> dict:
    import cupy as cp
    import numpy as np

    try:
        from cupy_backends.cuda.libs import cublas
    except ImportError:  # older layouts
        from cupy.cuda import cublas  # type: ignore

    v = BY_NAME[name]
    file, kernel, kind = STAGES[v["stage"]]
    rtol = 2e-2 if kind == "fp16" else 1e-3
    res: dict = {"name": name}

    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    res["device"] = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    res["sm_count"] = props["multiProcessorCount"]

    mod = cp.RawModule(path=str(cubin_path(build, name)))
    ker = mod.get_function(kernel)
    launch = cp.ndarray((5,), dtype=cp.int32, memptr=mod.get_global(f"{kernel}_launch")).get().tolist()
    res["launch"] = launch
    bx, by, bm, bn, smem = launch
    if smem > 48 * 1024:
        ker.max_dynamic_shared_size_bytes = smem
    try:
        attrs = ker.attributes
        res["num_regs"] = attrs.get("num_regs")
        res["local_size_bytes"] = attrs.get("local_size_bytes")
        res["shared_size_bytes"] = attrs.get("shared_size_bytes")
    except Exception as e:  # noqa: BLE001
        res["attributes_error"] = repr(e)
    try:
        res["blocks_per_sm"] = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            ker.kernel.ptr, bx * by, smem)
    except Exception as e:  # noqa: BLE001
        res["occupancy_error"] = repr(e)

    stream = cp.cuda.get_current_stream()
    handle = cp.cuda.device.get_cublas_handle()
    alpha = np.array(1.0, dtype=np.float32)
    beta = np.array(0.0, dtype=np.float32)
    CUDA_R_16F = getattr(cp.cuda.runtime, "CUDA_R_16F", 2)
    CUDA_R_32F = getattr(cp.cuda.runtime, "CUDA_R_32F", 0)
    COMPUTE_32F = getattr(cublas, "CUBLAS_COMPUTE_32F", 68)
    GEMM_DEFAULT_TENSOR_OP = getattr(cublas, "CUBLAS_GEMM_DEFAULT_TENSOR_OP", 99)

    def launch_kernel(a, b, c, n):
        ker((n // bn, n // bm, 1), (bx, by, 1), (a, b, c, np.int32(n)), shared_mem=smem)

    def baseline(a, b, c, n):
        if kind == "fp32":
            cp.matmul(a, b, out=c)
        else:
            # Row-major C = A B is column-major C^T = B^T A^T: pass B as cuBLAS's "A".
            cublas.gemmEx(handle, 0, 0, n, n, n, alpha.ctypes.data, b.data.ptr, CUDA_R_16F, n,
                          a.data.ptr, CUDA_R_16F, n, beta.ctypes.data, c.data.ptr, CUDA_R_32F, n,
                          COMPUTE_32F, GEMM_DEFAULT_TENSOR_OP)

    def poison(c):
        cp.cuda.runtime.memsetAsync(c.data.ptr, 0xFF, c.nbytes, stream.ptr)  # 0xFFFFFFFF is a NaN

    # ---- correctness at N = 1024
    n = 1024
    ha, hb = _inputs(np, n, kind, seed=1234)
    a, b = cp.asarray(ha), cp.asarray(hb)
    c = cp.empty((n, n), dtype=cp.float32)
    # float64 reference of the very same (rounded) inputs; converted on the host
    # so that no cupy elementwise kernel (and no NVRTC compile) is needed.
    ref = cp.matmul(cp.asarray(ha.astype(np.float64)), cp.asarray(hb.astype(np.float64))).get()
    poison(c)
    launch_kernel(a, b, c, n)
    stream.synchronize()
    res["check_1024"] = _compare(np, c.get(), ref, rtol)
    poison(c)
    baseline(a, b, c, n)
    stream.synchronize()
    res["baseline_check_1024"] = _compare(np, c.get(), ref, rtol)
    del a, b, c

    # ---- timing at N = 4096
    n = 4096
    ha, hb = _inputs(np, n, kind, seed=5678)
    a, b = cp.asarray(ha), cp.asarray(hb)
    c = cp.empty((n, n), dtype=cp.float32)
    cb = cp.empty((n, n), dtype=cp.float32)
    flush = cp.empty(256 * 1024 * 1024, dtype=cp.uint8)

    def flush_l2():
        cp.cuda.runtime.memsetAsync(flush.data.ptr, 0, flush.nbytes, stream.ptr)

    stage = v["stage"]
    for _ in range(WARMUP.get(stage, DEFAULT_WARMUP)):
        launch_kernel(a, b, c, n)
        baseline(a, b, cb, n)
    stream.synchronize()

    reps = REPS.get(stage, DEFAULT_REPS)
    events = []
    for _ in range(reps):
        e = [cp.cuda.Event() for _ in range(4)]
        flush_l2()
        e[0].record(stream)
        launch_kernel(a, b, c, n)
        e[1].record(stream)
        flush_l2()
        e[2].record(stream)
        baseline(a, b, cb, n)
        e[3].record(stream)
        events.append(e)
    stream.synchronize()
    k_ms = [cp.cuda.get_elapsed_time(e[0], e[1]) for e in events]
    b_ms = [cp.cuda.get_elapsed_time(e[2], e[3]) for e in events]
    # The timed output must be right too (compared with the baseline's output).
    poison(c)
    launch_kernel(a, b, c, n)
    stream.synchronize()
    res["check_4096_vs_baseline"] = _compare(np, c.get(), cb.get(), rtol)

    flop = 2.0 * n ** 3
    res["reps"] = reps
    res["ms"] = statistics.median(k_ms)
    res["ms_min"] = min(k_ms)
    res["ms_all"] = [round(x, 4) for x in k_ms]
    res["baseline_ms"] = statistics.median(b_ms)
    res["baseline_ms_all"] = [round(x, 4) for x in b_ms]
    res["tflops"] = flop / (res["ms"] * 1e-3) / 1e12
    res["baseline_tflops"] = flop / (res["baseline_ms"] * 1e-3) / 1e12
    res["pct_of_baseline"] = 100.0 * res["baseline_ms"] / res["ms"]
    res["passed"] = res["check_1024"]["passed"] and res["check_4096_vs_baseline"]["passed"]
    return res


# ----------------------------------------------------------------------------- parent


def child(name: str, build: Path, timeout: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", name, "--build", str(build)]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, start_new_session=True)
    except subprocess.TimeoutExpired as e:
        tail = (e.stdout or b"")[-2000:] if isinstance(e.stdout, bytes) else (e.stdout or "")[-2000:]
        return {"name": name, "error": f"timed out after {timeout:.0f} s", "output_tail": str(tail)}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            rec = json.loads(line[len("RESULT "):])
            rec["child_seconds"] = round(time.time() - t0, 1)
            return rec
    return {"name": name, "error": f"child exited {p.returncode} without a result",
            "output_tail": (p.stdout + p.stderr)[-3000:]}


def fmt(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(rows: list[dict]) -> None:
    head = (f"{'variant':<22} {'regs':>4} {'spill':>5} {'smem':>6} {'launch':<22} {'occ':>3} {'ok':>4} "
            f"{'ms':>9} {'TFLOP/s':>8} {'base ms':>8} {'% base':>7}")
    print(head)
    print("-" * len(head))
    for r in rows:
        c = r.get("compile", {})
        spill = None if c.get("spill_stores") is None else c["spill_stores"] + c["spill_loads"]
        launch = ",".join(str(x) for x in r["launch"]) if r.get("launch") else "-"
        ok = "-" if "passed" not in r else ("yes" if r["passed"] else "NO")
        if r.get("error"):
            ok = "ERR"
        mark = "*" if BY_NAME[r["name"]]["default"] else " "
        print(f"{mark}{r['name']:<21} {fmt(c.get('regs'), 'd'):>4} {fmt(spill, 'd'):>5} "
              f"{fmt(c.get('smem_static'), 'd'):>6} {launch:<22} {fmt(r.get('blocks_per_sm'), 'd'):>3} {ok:>4} "
              f"{fmt(r.get('ms'), '.3f'):>9} {fmt(r.get('tflops'), '.2f'):>8} {fmt(r.get('baseline_ms'), '.3f'):>8} "
              f"{fmt(r.get('pct_of_baseline'), '.1f'):>7}")
    print("(* = the file's default, what the grader compiles; smem = static bytes; launch = "
          "bx,by,BM,BN,dynamic smem; occ = resident blocks per SM; % base = baseline ms / kernel ms)")
    for r in rows:
        if r.get("error"):
            print(f"\n[{r['name']}] {r['error']}\n{r.get('output_tail', '')}")
        elif r.get("compile", {}).get("error"):
            print(f"\n[{r['name']}] compile error\n{r['compile']['error']}")
        elif "passed" in r and not r["passed"]:
            print(f"\n[{r['name']}] WRONG: 1024: {r['check_1024']}  4096: {r['check_4096_vs_baseline']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--build", default="/tmp/tune_kernels_build", help="folder for the cubins")
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    ap.add_argument("--only", action="append", help="run variants whose name starts with this (repeatable)")
    ap.add_argument("--compile-only", action="store_true", help="compile and print ptxas numbers; no GPU")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per variant child")
    args = ap.parse_args()
    build = Path(args.build)

    if args.one:
        try:
            rec = run_one(args.one, build)
        except Exception as e:  # noqa: BLE001 -- a CUDA error is data here
            rec = {"name": args.one, "error": f"{type(e).__name__}: {e}"}
        print("RESULT " + json.dumps(rec), flush=True)
        return 0 if not rec.get("error") else 1

    t_start = time.time()
    variants = [v for v in VARIANTS if not args.only or any(v["name"].startswith(p) for p in args.only)]
    build.mkdir(parents=True, exist_ok=True)
    print(f"nvcc: {args.nvcc}", flush=True)
    ver = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    nvcc_version = ver[-1] if ver else "?"
    print(f"      {nvcc_version}", flush=True)

    with cf.ThreadPoolExecutor(max_workers=max(1, min(len(variants), os.cpu_count() or 4))) as pool:
        compiled = dict(zip([v["name"] for v in variants],
                            pool.map(lambda v: compile_variant(v, build, args.nvcc), variants)))
    print(f"compiled {len(variants)} variants in {time.time() - t_start:.1f} s", flush=True)

    rows = []
    for v in variants:
        comp = compiled[v["name"]]
        if args.compile_only or comp["rc"] != 0:
            row = {"name": v["name"]}
        else:
            row = child(v["name"], build, args.timeout)
            status = "ERR" if row.get("error") else f"{row.get('ms', 0):.3f} ms"
            print(f"  {v['name']:<24} {status}", flush=True)
        row["compile"] = comp
        row["stage"] = v["stage"]
        row["defines"] = v["defines"]
        row["default"] = v["default"]
        row["why"] = v["why"]
        rows.append(row)

    print()
    print_table(rows)
    total = time.time() - t_start
    print(f"\ntotal {total:.1f} s")

    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        doc = {"nvcc": nvcc_version, "arch": ARCH, "seconds": round(total, 1), "variants": rows}
        (Path(out) / "tune.json").write_text(json.dumps(doc, indent=1))
        print(f"wrote {Path(out) / 'tune.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
