"""Child process that launches each stage's kernel once, for compute-sanitizer (racecheck, memcheck).

``compute-sanitizer --tool T ... python -m grader.children sanitize SPEC.json RESULT.json``. It
does for the sanitizer what :mod:`grader.children.profile` does for ncu, one launch per stage,
but through the CUDA driver alone (:mod:`grader.children.driver`, ctypes): no CuPy, so no
cuBLAS, cuRAND or NVRTC for the tool to intercept, and no kernel but the student's. Inputs are
drawn on the host (:func:`grader.children.inputs.make_inputs`, never zeros) and copied over; C is
filled with NaN. Nothing is judged here: the sanitizer's own report is the answer.

SPEC.json: ``{"n": N, "seed": S, "blocks": [x, y] or null, "stages": [{"id", "cubin", "kernel", "inputs", "launch":
{"block": [x, y], "tile": [BM, BN], "smem": bytes}}, ...]}``. RESULT.json: ``{"failures":
{stage id: error}}``, a stage's entry naming the driver call and CUresult that failed (no driver
here included); a failure is data, never a traceback, and the exit status is 0 whenever the
result was written.

With ``"gate": NAME`` (the tool's name) the child is started before its stage has compiled
(grader/gpu/racecheck.py): it starts the driver (under the tool, the longest part of its life),
uploads the inputs of the kinds in ``"inputs"`` and waits at the gate NAME, whose go hands over
``{"stages": [...]}``; ``"ids"`` names the stages it may be given (for a failure before the gate).
A stop at the gate ends it with ``{"failures": {}, "stopped": why}``: nothing was launched.
"""
from __future__ import annotations

from pathlib import Path

from grader.children.driver import Driver, DriverError, KernelArg
from grader.children.inputs import make_inputs
from grader.children.protocol import GateClosed, launch_grid, wait_at_gate, write_result
from grader.children.tma import boxes_of, operand_args
from grader.evidence.protocol import LaunchResult, SanitizeSpec, StagesGo
from grader.records import from_jsonable

NAN_BITS = 0x7FC00000  # float32 quiet NaN: an element the kernel never writes stays NaN
C_ITEMSIZE = 4  # C is float32 in every stage (the fp16 stage accumulates and writes fp32)


def gemm_args(a: int, b: int, c: int, n: int) -> list[KernelArg]:
    """The arguments of the (A, B, C, N) contract: ``kernel(const T* A, const T* B, float* C, int N)``.
    The tensor-map contract's packing is :func:`grader.children.tma.operand_args`."""
    return [KernelArg.pointer(a), KernelArg.pointer(b), KernelArg.pointer(c), KernelArg.int32(n)]


def run(spec: SanitizeSpec, result: Path) -> int:
    n, seed, stages, blocks = spec.n, spec.seed, spec.stages, spec.blocks
    ids = [st.id for st in stages] or list(spec.ids)
    try:
        cuda = Driver()
        cuda.start()
    except DriverError as exc:  # no driver, no device: no stage can be launched
        write_result(result, LaunchResult({sid: f"the CUDA driver did not start: {exc}" for sid in ids}))
        return 0
    failures: dict[str, str] = {}
    inputs: dict[str, tuple[int, int]] = {}  # inputs kind -> device A, B
    lost = ""  # why the context is unusable, once it is
    if gate := spec.gate:
        try:
            for kind in spec.inputs:
                inputs[kind] = _upload_inputs(cuda, n, seed, kind)
        except DriverError as exc:
            write_result(result, LaunchResult({sid: f"the inputs could not be uploaded: {exc}" for sid in ids}))
            return 0
        try:
            stages = from_jsonable(StagesGo, wait_at_gate(result, gate)).stages
        except GateClosed as why:
            write_result(result, LaunchResult(stopped=str(why)))
            return 0
    for st in stages:
        if lost:
            failures[st.id] = f"not launched: {lost}"
            continue
        lp = st.launch
        try:
            function = cuda.load_function(st.cubin, st.kernel, lp.smem)
            if st.inputs not in inputs:
                inputs[st.inputs] = _upload_inputs(cuda, n, seed, st.inputs)
            a, b = inputs[st.inputs]
            c = cuda.alloc(n * n * C_ITEMSIZE)
            cuda.fill32(c, NAN_BITS, n * n)
            if st.operands == "tensor_maps":  # the Hopper contract (grader/children/tma.py)
                args = operand_args(cuda, boxes_of(st), a, b, c, n)
            else:
                args = gemm_args(a, b, c, n)
            cuda.launch(function, launch_grid(n, lp.tile, blocks), (lp.block[0], lp.block[1], 1), lp.smem, args)
            cuda.synchronize()
            cuda.free(c)
        except DriverError as exc:  # a broken kernel or cubin stops its own launch only
            failures[st.id] = str(exc)
            if exc.context_lost:  # later launches would fail the same way
                lost = f"the CUDA context was lost at stage {st.id} ({exc.name})"
    write_result(result, LaunchResult(failures))
    return 0


def _upload_inputs(cuda: Driver, n: int, seed: int, kind: str) -> tuple[int, int]:
    pointers = []
    for host in make_inputs(n, seed, kind):
        ptr = cuda.alloc(host.nbytes)
        cuda.upload(ptr, host)
        pointers.append(ptr)
    return pointers[0], pointers[1]
