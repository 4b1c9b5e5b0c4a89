"""Compile one stage's file to a cubin and read what the compiler says about it.

Returns a :class:`CompileResult`; a compile error, a missing file or a wrong
kernel name is data in that record, never an exception. The build itself is
:mod:`grader.compile.student`'s guarded compile (a copy of the stage's folder,
the ``#include`` checks, nvcc as the student user).
"""
from __future__ import annotations

import struct
import time
from pathlib import Path

from grader.children.tma import check_boxes
from grader.compile.cubin import CubinFormatError, kernel_param_sizes, read_int_array, static_global_bytes
from grader.compile.locate import Problem, locate
from grader.compile.ptxas import name_hint
from grader.compile.resources import cubin_kernels
from grader.compile.student import (
    CompileRecord,
    CompileStatus,
    Deadline,
    Fence,
    Scratch,
    compile_student,
    prepare_scratch,
)
from grader.evidence.compile import CompileResult, Launch
from grader.evidence.rubric import Stage
from grader.evidence.tools import Tool
from grader.model import Cause
from grader.rubric.load import Rubric
from grader.untrusted.quote import quote_code

# The kernel's parameters, in bytes, by the stage's operands (grader/rubric/types.py: OPERANDS).
CONTRACT_PARAM_SIZES = {
    "pointers": [8, 8, 8, 4],  # (const T* A, const T* B, float* C, int N)
    "tensor_maps": [128, 128, 8, 8, 8, 4],  # two CUtensorMap by value, then (A, Bt, C, N)
}
SIGNATURES = {
    "pointers": "(const {t}* A, const {t}* B, float* C, int N)",
    "tensor_maps": ("(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, "
                    "const {t}* A, const {t}* Bt, float* C, int N)"),
}
ELEMENT_TYPES = {"fp32": "float", "fp16": "half", "bf16": "__nv_bfloat16"}
MAX_THREADS_PER_BLOCK = 1024
MAX_DYNAMIC_SMEM = 227 * 1024  # Hopper's per-block opt-in limit


def check_launch(values: list[int] | None, stage: Stage, sizes: list[int]) -> tuple[Launch | None, str]:
    """Validate a ``<kernel>_launch`` array; None values mean "use the rubric's default"."""
    if values is None:
        return stage.launch, ""
    sym = stage.launch_symbol
    if len(values) != 5:
        return None, f"{sym} has {len(values)} values; expected 5: {{blockDim.x, blockDim.y, BM, BN, smem bytes}}"
    bx, by, bm, bn, smem = values
    if bx <= 0 or by <= 0 or bx * by > MAX_THREADS_PER_BLOCK:
        return None, f"{sym}: block {bx} x {by} is not a valid block (1 to {MAX_THREADS_PER_BLOCK} threads)"
    if bm <= 0 or bn <= 0:
        return None, f"{sym}: tile {bm} x {bn} must be positive"
    if not 0 <= smem <= MAX_DYNAMIC_SMEM:
        return None, f"{sym}: {smem} bytes of dynamic shared memory (allowed 0 to {MAX_DYNAMIC_SMEM})"
    for n in sizes:
        if n % bm or n % bn:
            return None, (f"{sym}: tile BM={bm}, BN={bn} does not divide N={n}; the grader tests "
                          f"N in {sizes}, so choose tiles that divide all of them")
    return Launch((bx, by), (bm, bn), smem), ""


def compile_stage(stage: Stage, submission: Path, work: Path, nvcc: Tool | None, arch_flags: list[str],
                  rubric: Rubric, sizes: list[int], user: str | None = None,
                  fence: Fence | None = None, deadline: Deadline | None = None) -> CompileResult:
    """Compile one stage. ``user``: as root, run nvcc as this unprivileged account (it then
    cannot read the grader, the rubric or the solutions, whatever the source includes)."""
    seconds: dict[str, float] = {}  # the record's CompileResult.seconds, filled as the steps end
    result = CompileResult(stage=stage.id, ok=False, seconds=seconds)
    found = locate(submission, stage.file)
    if found.path is None:
        result.problem = (f"file missing: expected {stage.file} in the submission"
                          if found.problem is Problem.MISSING else found.message)
        return result
    if nvcc is None or nvcc.path is None:
        result.problem = "not evaluated: no CUDA compiler found (" + (getattr(nvcc, "reason", "") or "nvcc") + ")"
        result.cause = Cause.GRADER
        return result
    t0 = time.monotonic()
    scratch, problem = prepare_scratch(found.path, work / "build", stage.file, user)
    seconds["scratch"] = round(time.monotonic() - t0, 3)
    if scratch is None:
        result.problem = problem
        return result
    # -Xptxas -v: nothing is read from its report (the cubin is), but a compile that fails in ptxas shows
    # the student each kernel's resources beside the error (its shared memory, its registers).
    flags = ["-cubin", *arch_flags, "-O3", "-Xptxas", "-v", "-lineinfo"]
    built = compile_student(nvcc, scratch, f"{stage.id}.cubin", flags, timeout_s=rubric.timeouts.compile_s,
                            output_limit=rubric.output_limit_bytes, fence=fence, deadline=deadline)
    result.proc = built.proc
    seconds.update(built.seconds)
    t0 = time.monotonic()
    try:
        return _read_build(result, built, stage, sizes, scratch, rubric.max_static_device_bytes)
    finally:
        seconds["cubin"] = round(time.monotonic() - t0, 3)


def _read_build(result: CompileResult, built: CompileRecord, stage: Stage, sizes: list[int],
                scratch: Scratch, max_static_device_bytes: int) -> CompileResult:
    """The compiled cubin: kernel, resources, signature, launch shape, TMA boxes. Everything is read
    from the cubin (grader/compile/resources.py), nothing from what the compiler printed."""
    result.notes += [f"not copied for compiling: {s}" for s in scratch.skipped] + scratch.unread
    if built.status is not CompileStatus.OK or built.output is None:
        result.problem = built.problem
        return result
    cubin = built.output
    data = cubin.read_bytes()
    try:
        kernels = cubin_kernels(data)
        gmem = static_global_bytes(data)
    except (CubinFormatError, IndexError, struct.error) as exc:
        result.problem = f"the compiled cubin of {stage.file} could not be read ({exc})"
        return result
    result.found_kernels = list(kernels)
    result.cubin = str(cubin)
    if stage.kernel not in kernels:
        names = ", ".join(quote_code(n) for n in result.found_kernels[:10]) or "no kernels"
        hint = name_hint(stage.kernel, result.found_kernels)
        result.problem = f"expected `{stage.kernel}` in {stage.file}; found: {names}{hint}"
        return result
    if gmem > max_static_device_bytes:
        result.problem = (f"{stage.file} declares {gmem:,} bytes of static __device__ memory (read from the cubin); "
                          f"a GEMM kernel needs none, and the limit is {max_static_device_bytes:,} bytes")
        return result
    result.kernel = kernels[stage.kernel]
    try:
        sizes_found = kernel_param_sizes(data, stage.kernel)
    except CubinFormatError as exc:
        sizes_found = None
        result.notes.append(f"could not read the parameters of {stage.kernel} ({exc})")
    expected = CONTRACT_PARAM_SIZES[stage.operands]
    if sizes_found is not None and sizes_found != expected:
        signature = SIGNATURES[stage.operands].format(t=ELEMENT_TYPES[stage.inputs])
        result.problem = (f"`{stage.kernel}` has the wrong signature: its parameters take "
                          f"{sizes_found} bytes; expected {signature}, i.e. {expected}")
        return result
    try:
        values = read_int_array(data, stage.launch_symbol)
    except CubinFormatError as exc:
        values = None
        result.notes.append(f"could not read {stage.launch_symbol} from the cubin ({exc}); using the default")
    launch, problem = check_launch(values, stage, sizes)
    if launch is None:
        result.problem = problem
        return result
    if stage.operands == "tensor_maps":
        try:
            declared = read_int_array(data, stage.tma_symbol)
        except CubinFormatError as exc:
            declared = None
            result.notes.append(f"could not read {stage.tma_symbol} from the cubin ({exc})")
        result.boxes, problem = check_boxes(declared, stage.tma_symbol, sizes)
        if result.boxes is None:
            result.problem = problem
            return result
    result.launch = launch
    result.launch_source = f"declared in {stage.file}" if values is not None else "rubric default (no launch array)"
    result.ok = True
    return result
