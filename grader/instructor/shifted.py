"""Build the "one stage shifted" submission (pure text transforms plus file copies).

In it, the file of every stage k > 1 holds the reference kernel of stage k-1, renamed to
stage k's kernel name (the ``<kernel>_launch`` array is renamed too, so it keeps its own
launch shape). Grading it shows which criteria tell a stage from its predecessor: every
transition criterion of stage k must fail on it, every integrity criterion must still
pass. The calibration command (grader/instructor/calibrate.py) and the tests use it.

Stage 1 has no predecessor: its file is copied unchanged.

A predecessor with other input types (the 2D FP32 kernel before the FP16 WMMA stage)
cannot be renamed into place: its kernel reads ``float`` where the WMMA stage is
passed ``half`` arrays. For that case (``mismatched="port"``, the default) the file is
:data:`FP16_FFMA_PORT`: stage 4b's algorithm (128 x 128 block tile, 8 x 8 outputs per
thread, every multiply-add an FFMA on the FP32 CUDA cores) with each FP16 input
converted to float as it is staged in shared memory. It is correct under the FP16
tolerance, fast for a CUDA-core kernel, and has no Tensor Core instruction: exactly
what the WMMA stage's criteria must reject. ``mismatched="reference"`` keeps the
stage's own reference file instead (the stage then has no predecessor in the set).

The Hopper stage (BF16, tensor maps) after the FP16 WMMA stage is the same case: its stand-in is
:data:`BF16_WMMA_PORT`, the WMMA reference's algorithm (HMMA, cp.async) in stage 6's contract,
which the Hopper stage's SASS, speed and tensor-pipe criteria must reject.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

FP16_FFMA_PORT = r"""// Shifted-submission stand-in for the FP16 stage (written by grader/instructor/shifted.py).
// Stage 4b's algorithm on the FP32 CUDA cores, for the FP16-input signature:
// a 128 x 128 tile of C per block, 8 x 8 outputs per thread, FP16 inputs
// converted to float when staged in shared memory, every multiply-add an FFMA.
// No Tensor Core instruction: the Tensor Core stage's criteria must reject it.
#include <cuda_fp16.h>

constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
constexpr int NT = (BM / TM) * (BN / TN);  // 256 threads

extern "C" __constant__ int @KERNEL@_launch[5] = {NT, 1, BM, BN, 0};

extern "C" __global__ void
@KERNEL@(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C, int N)
{
    __shared__ float As[BK][BM + 4];  // transposed: As[k][m]
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int row0 = (tid / (BN / TN)) * TM;
    const int col0 = (tid % (BN / TN)) * TN;
    const half* Ablk = A + (size_t)blockIdx.y * BM * N;
    const half* Bblk = B + (size_t)blockIdx.x * BN;
    float acc[TM][TN] = {};
    float a[TM], b[TN];
    for (int k0 = 0; k0 < N; k0 += BK) {
        for (int i = tid; i < BM * BK; i += NT) {
            const int r = i / BK, c = i % BK;
            As[c][r] = __half2float(Ablk[(size_t)r * N + k0 + c]);
        }
        for (int i = tid; i < BK * BN; i += NT) {
            const int r = i / BN, c = i % BN;
            Bs[r][c] = __half2float(Bblk[(size_t)(k0 + r) * N + c]);
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k][row0 + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][col0 + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    float* Cblk = C + ((size_t)blockIdx.y * BM + row0) * N + (size_t)blockIdx.x * BN + col0;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) Cblk[(size_t)i * N + j] = acc[i][j];
}
"""


# The WMMA stage's reference algorithm in the Hopper stage's contract (BF16, K-major, tensor maps
# accepted and unused): correct, on Tensor Cores through HMMA, with no WGMMA and no TMA.
BF16_WMMA_PORT = Path(__file__).with_name("bf16_wmma_port.cu")


def rename_kernel(source: str, old: str, new: str) -> str:
    """Rename kernel ``old`` (and its ``old_launch`` array) to ``new`` as whole identifiers."""
    source = re.sub(rf"\b{re.escape(old)}_launch\b", f"{new}_launch", source)
    return re.sub(rf"\b{re.escape(old)}\b", new, source)


def shifted_source(prev_source: str, prev_stage, stage, mismatched: str = "port") -> str | None:
    """The text of ``stage``'s file in the shifted submission; None means "keep the reference"."""
    if prev_stage.inputs != stage.inputs:
        if mismatched == "port" and stage.inputs == "fp16" and prev_stage.inputs == "fp32":
            return FP16_FFMA_PORT.replace("@KERNEL@", stage.kernel)
        if mismatched == "port" and stage.inputs == "bf16" and prev_stage.inputs == "fp16":
            return BF16_WMMA_PORT.read_text(encoding="utf-8").replace("@KERNEL@", stage.kernel)
        return None
    header = (f"// Shifted submission (grader/instructor/shifted.py): stage {prev_stage.number}'s reference kernel "
              f"{prev_stage.kernel}, renamed {stage.kernel}.\n")
    return header + rename_kernel(prev_source, prev_stage.kernel, stage.kernel)


def shift_notes(rubric, mismatched: str = "port") -> dict[str, str]:
    """{stage id: what its file holds in the shifted submission}, from the rubric alone (what
    :func:`write_shifted` returns): the calibration's analysis of stored gradings reads which stages have
    a predecessor from it."""
    what: dict[str, str] = {}
    stages = list(rubric.stages)
    for k, stage in enumerate(stages):
        prev = stages[k - 1] if k else None
        if prev is None:
            what[stage.id] = f"its own reference kernel {stage.kernel} (no predecessor)"
        elif prev.inputs == stage.inputs:
            what[stage.id] = f"stage {prev.number}'s kernel {prev.kernel}, renamed {stage.kernel}"
        elif mismatched == "port" and (prev.inputs, stage.inputs) in (("fp32", "fp16"), ("fp16", "bf16")):
            engine = "WMMA (HMMA), no WGMMA or TMA" if stage.inputs == "bf16" else "FP32 CUDA cores"
            what[stage.id] = f"stage {prev.number}'s algorithm ported to {stage.inputs} inputs, on {engine}"
        else:
            what[stage.id] = f"its own reference kernel {stage.kernel} (the predecessor has other input types)"
    return what


def write_shifted(solutions_dir: Path, rubric, dest_dir: Path, mismatched: str = "port") -> dict[str, str]:
    """Copy ``solutions_dir`` to ``dest_dir`` and shift every stage's kernel by one.

    Returns {stage id: what its file holds}, also written to ``dest_dir/SHIFTED.md``.
    """
    solutions_dir, dest_dir = Path(solutions_dir), Path(dest_dir)
    if dest_dir.exists():
        shutil.rmtree(dest_dir)
    shutil.copytree(solutions_dir, dest_dir, symlinks=False)
    what = shift_notes(rubric, mismatched)
    stages = list(rubric.stages)
    for k, stage in enumerate(stages[1:], start=1):
        prev = stages[k - 1]
        text = shifted_source((solutions_dir / prev.file).read_text(encoding="utf-8"), prev, stage, mismatched)
        if text is not None:
            (dest_dir / stage.file).write_text(text, encoding="utf-8")
    lines = ["# Shifted submission", "", "Written by grader/instructor/shifted.py from "
             f"`{solutions_dir}`. Each stage's file holds:", ""]
    lines += [f"- `{s.file}` ({s.id}): {what[s.id]}" for s in stages]
    (dest_dir / "SHIFTED.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return what
