"""Child process that launches each stage's kernel once, for Nsight Compute to profile.

``ncu ... python -m grader.children profile SPEC.json RESULT.json``: one ncu run per
submission collects every metric the rubric names, for every stage kernel, from exactly one
launch each (compute-sanitizer runs grader/children/sanitize.py instead, without CuPy).
Inputs are random (never zeros); nothing is judged here. RESULT.json: ``{"failures": {stage id: error}}``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from grader.children.inputs import make_inputs_xp
from grader.children.protocol import GateClosed, launch_grid, wait_at_gate, write_result
from grader.evidence.protocol import LaunchResult, ProfileSpec, StagesGo
from grader.records import from_jsonable


def _context_lost(exc: BaseException) -> bool:
    return "CUDA_ERROR" in str(exc) or "cudaError" in str(exc)


def release_cached_blocks(cp: Any) -> None:
    """Give CuPy's cached free blocks (the inputs' temporaries) back to the driver. ncu saves and
    restores every allocation a kernel could reach around each of its replay passes, so fewer blocks
    mean less to save per kernel, with the rubric's metrics unchanged
    (docs/measurements/2026-11-30-h200-speed-run15-20.md). Whether it also shortens the run is not shown."""
    cp.get_default_memory_pool().free_all_blocks()


def run(spec: ProfileSpec, result: Path) -> int:
    """With ``"gate": true`` the child starts before the stages have compiled: its CUDA context and
    the inputs of every kind in the spec's ``inputs`` are made before the gate ``launch``, whose go
    hands over the kernels to launch (``{"stages": [{id, cubin, kernel, inputs, launch, ...}]}``, in
    order); without a gate they are the spec's ``stages``."""
    import cupy as cp

    n = spec.n
    inputs: dict[str, tuple] = {}

    def operands(kind: str) -> tuple:
        if kind not in inputs:
            inputs[kind] = make_inputs_xp(cp, n, spec.seed, kind)
        return inputs[kind]

    for kind in spec.inputs:
        operands(kind)
    release_cached_blocks(cp)
    stages = spec.stages
    if spec.gate:
        cp.cuda.Device().synchronize()
        try:
            stages = from_jsonable(StagesGo, wait_at_gate(result, "launch")).stages
        except GateClosed:
            write_result(result, LaunchResult(stopped=True))
            return 0
    failures: dict[str, str] = {}
    kernels: dict[str, Any] = {}
    launchers: dict[str, Any] = {}  # the Hopper contract: tensor maps through the driver (children/tma.py)
    for st in stages:  # every module loaded before the first launch
        try:
            if st.inputs not in inputs:
                operands(st.inputs)
                release_cached_blocks(cp)
            kernel = cp.RawModule(path=st.cubin).get_function(st.kernel)
            if st.launch.smem > 48 * 1024:
                kernel.max_dynamic_shared_size_bytes = st.launch.smem
            if st.operands == "tensor_maps":
                from grader.children.tma import MapLauncher

                launchers[st.id] = MapLauncher(st)
            kernels[st.id] = kernel
        except Exception as exc:  # a cubin that does not load fails its own profile only
            failures[st.id] = f"{type(exc).__name__}: {exc}"
    for st in [st for st in stages if st.id in kernels]:
        try:
            a, b = inputs[st.inputs]
            c = cp.full((n, n), cp.nan, dtype=cp.float32)
            lp = st.launch
            if st.id in launchers:
                launchers[st.id](kernels[st.id], a, b, c, n)
            else:
                kernels[st.id](launch_grid(n, lp.tile), (lp.block[0], lp.block[1], 1),
                               (a, b, c, np.int32(n)), shared_mem=lp.smem)
            cp.cuda.Device().synchronize()
        except Exception as exc:  # a broken kernel stops its own profile only
            failures[st.id] = f"{type(exc).__name__}: {exc}"
            if _context_lost(exc):
                break  # the context is gone; later launches would fail too
    write_result(result, LaunchResult(failures))
    return 0
