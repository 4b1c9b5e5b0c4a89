"""Child process that launches each stage's kernel once, for Nsight Compute to profile.

``ncu ... python -m grader.children.profile SPEC.json``: one ncu run per submission
collects every metric the rubric names, for every stage kernel, from exactly one
launch each. Inputs are random (never zeros); nothing is judged here.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from grader.run.inputs import make_inputs_xp


def main(argv: list[str]) -> int:
    import cupy as cp

    spec = json.loads(Path(argv[1]).read_text())
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
    print(json.dumps({"failures": failures}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
