"""Child process that launches each stage's kernel once, for Nsight Compute to profile.

``ncu ... python -m grader.children profile SPEC.json RESULT.json``: one ncu run per
submission collects every metric the rubric names, for every stage kernel, from exactly one
launch each (compute-sanitizer runs it the same way). Inputs are random (never zeros);
nothing is judged here. RESULT.json: ``{"failures": {stage id: error}}``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from grader.children.protocol import write_result
from grader.run.inputs import make_inputs_xp


def run(spec: dict, result: Path) -> int:
    import cupy as cp

    n = spec["n"]
    failures = {}
    inputs = {}
    for st in spec["stages"]:
        try:
            if st["inputs"] not in inputs:
                inputs[st["inputs"]] = make_inputs_xp(cp, n, spec["seed"], st["inputs"])
            a, b = inputs[st["inputs"]]
            c = cp.full((n, n), cp.nan, dtype=cp.float32)
            kernel = cp.RawModule(path=st["cubin"]).get_function(st["kernel"])
            lp = st["launch"]
            if lp["smem"] > 48 * 1024:
                kernel.max_dynamic_shared_size_bytes = lp["smem"]
            kernel((n // lp["tile"][1], n // lp["tile"][0], 1), (lp["block"][0], lp["block"][1], 1),
                   (a, b, c, np.int32(n)), shared_mem=lp["smem"])
            cp.cuda.Device().synchronize()
        except Exception as exc:  # a broken kernel stops its own profile only
            failures[st["id"]] = f"{type(exc).__name__}: {exc}"
            if "CUDA_ERROR" in str(exc) or "cudaError" in str(exc):
                break  # the context is gone; later launches would fail too
    write_result(result, {"failures": failures})
    return 0
