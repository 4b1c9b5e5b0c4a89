#!/usr/bin/env python3
"""Compile, check and time variants of the Hopper (TMA + WGMMA) solution kernel on one GPU.

Run on an sm_90a GPU from the repository root:

    python docs/measurements/scripts/tune_hopper.py                  # every variant; table on stdout
    OUT=/dir python docs/measurements/scripts/tune_hopper.py         # ... and the record in $OUT/tune_hopper.json
    python docs/measurements/scripts/tune_hopper.py --only default   # variants whose name starts with "default"
    python docs/measurements/scripts/tune_hopper.py --only default,nonpersistent   # ... with either prefix

Each variant is solutions/gemm/hopper.cu compiled with a set of -D TUNE_* macros (the grader
compiles with none: the variant "default"). Each runs in its own child process (``--one``) so a
faulting or hanging variant cannot take the others down (a child still running after
CHILD_TIMEOUT_S is killed and its row says "timed out (hang?)"). The child loads the cubin with CuPy,
reads ``mmHopper_launch`` and ``mmHopper_tma`` from it, encodes the tensor maps with the
grader's own code (grader/children/tma.py), and

* checks the output at N = 1024 against a float64 product of the same BF16 inputs
  (|c - r| <= 1e-2 (|r| + rms(r)), C poisoned with NaN first), and at N = 4096 against
  cuBLAS's BF16 product;
* times N = 4096 with CUDA events, interleaved with cublasGemmEx (BF16 in, FP32 out, compute
  32F, the same K-major operands: op(B) = T), L2 flushed before every timed launch; medians.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
SOURCE = ROOT / "solutions" / "gemm" / "hopper.cu"
ARCH = ["-gencode=arch=compute_90a,code=sm_90a"]
KERNEL = "mmHopper"
_CUDA_R_32F, _CUDA_R_16BF, _COMPUTE_32F, _GEMM_DEFAULT = 0, 14, 68, -1

PORT = ROOT / "grader" / "instructor" / "bf16_wmma_port.cu"  # stage 5's algorithm in stage 6's contract
VARIANTS: dict[str, dict[str, int]] = {
    # The defaults: persistent blocks (the same grid; min(SMs, tiles) blocks loop over the tiles, the ring runs on).
    "default": {},
    "group0": {"TUNE_GROUP": 0},
    "inflight0": {"TUNE_INFLIGHT": 0},
    "stages3": {"TUNE_STAGES": 3},
    "wgn128": {"TUNE_WGN": 128},
    "bn128_s6": {"TUNE_BN": 128, "TUNE_WGN": 128, "TUNE_STAGES": 6},
    "group16": {"TUNE_GROUP": 16},
    "group4": {"TUNE_GROUP": 4},
    # 128 x 128 tiles: 1024 tiles at N = 4096, 7.76 rounds of 132 working blocks rather than 3.88 (less of the
    # last round idle), at the cost of each A tile feeding half as many columns. 7 slots fit (225 KiB).
    "bn128_s7": {"TUNE_BN": 128, "TUNE_WGN": 128, "TUNE_STAGES": 7},
    "wmma_port": {},
    # One tile per launched block: what the persistent default is measured against.
    "nonpersistent": {"TUNE_PERSISTENT": 0},
    # 132 working blocks whatever %nsmid says (the H200's SM count): a check of %nsmid's value.
    "persistent_w132": {"TUNE_WORKERS": 132},
    # Clusters of 2 blocks, tiles one above another, each loading half of their B tile for both.
    "cluster2": {"TUNE_CLUSTER": 2},
    "cluster2_g16": {"TUNE_CLUSTER": 2, "TUNE_GROUP": 16},
    "cluster2_g4": {"TUNE_CLUSTER": 2, "TUNE_GROUP": 4},
    # 64 working clusters rather than 66: in case the GPCs cannot hold 66 clusters of 2 at once.
    "cluster2_w128": {"TUNE_CLUSTER": 2, "TUNE_WORKERS": 128},
    # Ping-pong: each consumer warpgroup computes whole 128 x 128 tiles, the two in turn, so one's epilogue
    # overlaps the other's products. Last: the newest protocol, so a hang (killed after CHILD_TIMEOUT_S) delays
    # no other row.
    "pingpong": {"TUNE_PINGPONG": 1, "TUNE_BN": 128, "TUNE_WGN": 128, "TUNE_STAGES": 7},
    "pingpong_s6": {"TUNE_PINGPONG": 1, "TUNE_BN": 128, "TUNE_WGN": 128, "TUNE_STAGES": 6},
    "pingpong_g16": {"TUNE_PINGPONG": 1, "TUNE_BN": 128, "TUNE_WGN": 128, "TUNE_STAGES": 7, "TUNE_GROUP": 16},
    # Stream-K for the last, partial round (512 tiles = 3.88 rounds of 132 at N = 4096): its tiles' k-steps
    # shared out evenly, a tile begun in one block finished with the later blocks' partial tiles.
    "streamk": {"TUNE_STREAMK": 1},
    "streamk_g16": {"TUNE_STREAMK": 1, "TUNE_GROUP": 16},
    "nostreamk": {"TUNE_STREAMK": 0},
    # 128 working blocks: 512 tiles at N = 4096 are then 4 whole rounds, so the stream-K build takes no share
    # and runs its whole tiles only: whether its code alone is slower than the default's, at the same count.
    "streamk_w128": {"TUNE_STREAMK": 1, "TUNE_WORKERS": 128},
    "w128": {"TUNE_WORKERS": 128},
    # Every SM working (132 blocks: 3.88 rounds at N = 4096), as before balanced rounds were the default.
    "unbalanced": {"TUNE_BALANCE": 0},
    # cuBLAS's kernel at N = 4096 (ncu: nvjet_sm90_tss_256x128_64x4_1x2_h_bz_coopA_TNT): 256 x 128 tiles, clusters
    # of two side by side sharing the A tile. The shape alone, then with the A tile shared (multicast).
    "bm256": {"TUNE_BM": 256, "TUNE_BN": 128, "TUNE_WGN": 128},
    "bm256_share_a": {"TUNE_BM": 256, "TUNE_BN": 128, "TUNE_WGN": 128, "TUNE_CLUSTER": 2, "TUNE_SHARE_A": 1},
    "bm256_share_a_g16": {"TUNE_BM": 256, "TUNE_BN": 128, "TUNE_WGN": 128, "TUNE_CLUSTER": 2, "TUNE_SHARE_A": 1,
                          "TUNE_GROUP": 16},
    "bm256_share_a_g4": {"TUNE_BM": 256, "TUNE_BN": 128, "TUNE_WGN": 128, "TUNE_CLUSTER": 2, "TUNE_SHARE_A": 1,
                         "TUNE_GROUP": 4},
    # The epilogue through shared memory (header item 13): each warp's store covers two rows' 256 contiguous
    # bytes, against 8 rows' 32 bytes from the fragments. Alone, with GROUP 16, and on cuBLAS's shape.
    "staged": {"TUNE_STAGED_STORE": 1},
    # The epilogue from the fragments (float2 stores of 8 rows' 32 bytes each), the reference before item 13.
    "unstaged": {"TUNE_STAGED_STORE": 0},
    "staged_g16": {"TUNE_STAGED_STORE": 1, "TUNE_GROUP": 16},
    "staged_bm256_share_a": {"TUNE_STAGED_STORE": 1, "TUNE_BM": 256, "TUNE_BN": 128, "TUNE_WGN": 128,
                             "TUNE_CLUSTER": 2, "TUNE_SHARE_A": 1},
    "staged_cluster2": {"TUNE_STAGED_STORE": 1, "TUNE_CLUSTER": 2},
}
# Checked too, against cuBLAS: sizes whose tile counts leave a partial last round of 132 blocks (stream-K's
# shares: 3072 gives 156 shared tiles, 8192 68; 2304 fewer tiles than blocks).
CHECK_SIZES = (2304, 3072, 8192)
CHILD_TIMEOUT_S = 60  # one variant's checks and timing take seconds; longer is a kernel that hangs


def compile_variant(name: str, build: Path, nvcc: str) -> dict:
    cubin = build / f"{name}.cubin"
    flags = [f"-D{k}={v}" for k, v in VARIANTS[name].items()]
    source = SOURCE
    if name == "wmma_port":
        source = build / "wmma_port.cu"
        source.write_text(PORT.read_text().replace("@KERNEL@", KERNEL))
    cmd = [nvcc, "-cubin", *ARCH, "-O3", "-Xptxas", "-v", *flags, str(source), "-o", str(cubin)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return {"name": name, "defines": VARIANTS[name], "ok": proc.returncode == 0, "compile_s": time.monotonic() - t0,
            "ptxas": [ln.strip() for ln in proc.stderr.splitlines() if "registers" in ln or "spill" in ln
                      or "arning" in ln or "rror" in ln][:8]}


def sm_counts(cp) -> dict:
    """The device's SM count and what %nsmid (the persistent variants' count of working blocks) reads:
    the PTX ISA allows it to exceed the SM count, and a persistent kernel with more working blocks
    than SMs runs its last ones in a second wave."""
    probe = cp.RawKernel(r'''extern "C" __global__ void nsmid(unsigned* out)
    { unsigned v; asm("mov.u32 %0, %%nsmid;" : "=r"(v)); out[0] = v; }''', "nsmid")
    got = cp.zeros(1, cp.uint32)
    probe((1,), (1,), (got,))
    return {"nsmid": int(got[0]), "sm_count": int(cp.cuda.Device().attributes["MultiProcessorCount"])}


def run_one(cubin: Path, launch_n: int = 0, with_cublas: bool = False) -> dict:
    os.environ["CUPY_TF32"] = "0"
    import cupy as cp
    import numpy as np
    from cupy_backends.cuda.libs import cublas

    from grader.children import tma
    from grader.children.inputs import make_inputs_xp, product_operands
    from grader.children.numerics import compare
    from grader.compile.cubin import read_int_array
    from grader.evidence.protocol import Kernel, LaunchShape
    data = cubin.read_bytes()
    bx, by, bm, bn, smem = read_int_array(data, f"{KERNEL}_launch")
    boxes, problem = tma.check_boxes(read_int_array(data, f"{KERNEL}_tma"), f"{KERNEL}_tma", [1024, 4096])
    if boxes is None:
        return {"error": problem}
    kern = cp.RawModule(path=str(cubin)).get_function(KERNEL)
    kern.max_dynamic_shared_size_bytes = smem
    out: dict = {"launch": [bx, by, bm, bn, smem], "tma": [boxes.k, boxes.a_rows, boxes.b_rows, boxes.swizzle],
                 "regs": int(kern.attributes["num_regs"]), **sm_counts(cp)}
    # The grader's own launch path for a tensor-map stage (the stage and ncu children use it too).
    launcher = tma.MapLauncher(Kernel(cubin=str(cubin), kernel=KERNEL, inputs="bf16", operands="tensor_maps",
                                      boxes=out["tma"], launch=LaunchShape(block=[bx, by], tile=[bm, bn], smem=smem)))

    def student(a, b, c, n):
        launcher(kern, a, b, c, n)

    handle = cp.cuda.device.get_cublas_handle()
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)

    def cublas_bf16(a, b, c, n):
        # Row-major C = A B with B given transposed (n x n, K-major): column-major C^T = (Bt)^T A^T.
        cublas.gemmEx(handle, 1, 0, n, n, n, one.ctypes.data, b.data.ptr, _CUDA_R_16BF, n, a.data.ptr,
                      _CUDA_R_16BF, n, zero.ctypes.data, c.data.ptr, _CUDA_R_32F, n, _COMPUTE_32F, _GEMM_DEFAULT)

    if launch_n:  # one launch, for a profiler or sanitizer wrapped around this process
        a, b = make_inputs_xp(cp, launch_n, 3, "bf16")
        c = cp.full((launch_n, launch_n), cp.nan, cp.float32)
        if with_cublas:  # and one of cuBLAS's, the two alone between profiler start and stop (after a warm-up)
            ref = cp.empty_like(c)
            student(a, b, c, launch_n), cublas_bf16(a, b, ref, launch_n)
            cp.cuda.Device().synchronize()
            cp.cuda.profiler.start()
        student(a, b, c, launch_n)
        if with_cublas:
            cublas_bf16(a, b, ref, launch_n)
            cp.cuda.Device().synchronize()
            cp.cuda.profiler.stop()
        cp.cuda.Device().synchronize()
        a64, b64 = product_operands(cp, a, b, "bf16")
        return {**out, "check": compare(c, a64 @ b64, 1e-2, cp).describe()}
    a, b = make_inputs_xp(cp, 1024, 3, "bf16")
    c = cp.full((1024, 1024), cp.nan, cp.float32)
    student(a, b, c, 1024)
    cp.cuda.Device().synchronize()
    a64, b64 = product_operands(cp, a, b, "bf16")
    out["check_1024"] = compare(c, a64 @ b64, 1e-2, cp).describe()
    # Against cuBLAS's BF16 product; the last size's inputs and outputs are timed below.
    for n, seed in [*((m, 7) for m in CHECK_SIZES), (4096, 5)]:
        a, b = make_inputs_xp(cp, n, seed, "bf16")
        c, ref = cp.full((n, n), cp.nan, cp.float32), cp.empty((n, n), cp.float32)
        cublas_bf16(a, b, ref, n)
        student(a, b, c, n)
        cp.cuda.Device().synchronize()
        out[f"check_{n}"] = compare(c, ref.astype(cp.float64), 1e-2, cp).describe()
    if any("WRONG" in v for k, v in out.items() if k.startswith("check_")):
        return out  # no timing for a wrong kernel
    flush = cp.empty(256 << 20, cp.uint8)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()

    def timed(fn, cc) -> float:
        flush.fill(1)
        e0.record()
        fn(a, b, cc, n)
        e1.record()
        e1.synchronize()
        return float(cp.cuda.get_elapsed_time(e0, e1))

    for _ in range(3):
        timed(student, c), timed(cublas_bf16, ref)
    s_ms, b_ms = [], []
    for rep in range(30):
        pair = [(student, c, s_ms), (cublas_bf16, ref, b_ms)]
        for fn, cc, into in (pair if rep % 2 == 0 else pair[::-1]):
            into.append(timed(fn, cc))
    flop = 2 * n ** 3
    out.update(student_ms=statistics.median(s_ms), cublas_ms=statistics.median(b_ms),
               student_tflops=flop / statistics.median(s_ms) / 1e9, cublas_tflops=flop / statistics.median(b_ms) / 1e9,
               pct_of_cublas=100 * statistics.median(b_ms) / statistics.median(s_ms),
               student_ms_all=[round(x, 4) for x in s_ms], cublas_ms_all=[round(x, 4) for x in b_ms])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default="", help="comma-separated name prefixes (default: every variant)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--launch", type=int, default=0, help="with --one: a single launch at this N, no timing")
    ap.add_argument("--with-cublas", action="store_true",
                    help="with --launch: also one cuBLAS launch; both alone between cudaProfilerStart and Stop")
    ap.add_argument("--nvcc", default="nvcc")
    ap.add_argument("--build", default="/tmp/tune_hopper")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(Path(args.one), args.launch, args.with_cublas)))
        return 0
    build = Path(args.build)
    build.mkdir(parents=True, exist_ok=True)
    names = [v for v in VARIANTS if any(v.startswith(prefix) for prefix in args.only.split(","))]
    with cf.ThreadPoolExecutor(8) as pool:
        rows = list(pool.map(lambda v: compile_variant(v, build, args.nvcc), names))
    for row in rows:
        if not row["ok"]:
            continue
        try:
            proc = subprocess.run([sys.executable, __file__, "--one", str(build / f"{row['name']}.cubin")],
                                  capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # run() has killed the child: the next variant gets the GPU
            row["error"] = "timed out (hang?)"
            continue
        try:
            row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            row["error"] = (proc.stderr or proc.stdout)[-800:]
    print(f"{'variant':16} {'regs':>4} {'ms':>7} {'TFLOP/s':>8} {'cuBLAS':>8} {'%':>6}  check")
    for r in rows:
        print(f"{r['name']:16} {r.get('regs', '-'):>4} {r.get('student_ms', float('nan')):7.4f} "
              f"{r.get('student_tflops', float('nan')):8.1f} {r.get('cublas_tflops', float('nan')):8.1f} "
              f"{r.get('pct_of_cublas', float('nan')):6.1f}  {r.get('check_4096', r.get('error', ''))[:90]}"
              + "".join(f" | {k}: {v[:60]}" for k, v in r.items() if k.startswith("check_") and "WRONG" in v))
    counts = next((r for r in rows if "nsmid" in r), None)
    if counts:
        print(f"%nsmid {counts['nsmid']}, SMs {counts['sm_count']}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "tune_hopper.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
