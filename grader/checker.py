"""Trusted child process: computes float64 references and judges saved outputs.

``python -m grader.checker SPEC.json VERDICTS.json``. It runs no student code.
It regenerates each stage's inputs from the seeds the grading process chose,
multiplies them in float64 (cuBLAS through CuPy when a GPU is there, NumPy
otherwise) and compares every output the runner saved, using the one test in
:mod:`grader.numerics`.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np

from grader.inputs import make_inputs
from grader.numerics import compare


def _array_module():
    try:
        import cupy as cp

        cp.cuda.runtime.getDeviceCount()
        return cp
    except Exception:
        return np


def _load_output(path: Path, n: int, xp):
    """The saved output as an xp array, or a problem string."""
    if not path.is_file():
        return None, "no output was saved (the run stopped before this point)"
    try:
        c = np.load(path, allow_pickle=False)
    except Exception as exc:
        return None, f"output file unreadable ({exc})"
    if c.shape != (n, n) or c.dtype != np.float32:
        return None, f"output has shape {c.shape} and dtype {c.dtype}, expected ({n}, {n}) float32"
    return xp.asarray(c), None


def check(spec: dict) -> dict:
    xp = _array_module()
    refs: dict[tuple[int, int, str], object] = {}

    def reference(n: int, seed: int, inputs: str):
        key = (n, seed, inputs)
        if key not in refs:
            a, b = make_inputs(n, seed, inputs)
            a64 = xp.asarray(a).astype(xp.float64)
            b64 = xp.asarray(b).astype(xp.float64)
            refs.clear()  # one reference at a time keeps device memory small
            refs[key] = a64 @ b64
        return refs[key]

    verdicts: dict[str, dict] = {}
    for stage in spec["stages"]:
        out_dir = Path(stage["out_dir"])
        results = []
        for case in stage["cases"]:
            n = case["n"]
            c, problem = _load_output(out_dir / case["file"], n, xp)
            if problem:
                results.append({"n": n, "kind": case["kind"], "passed": False, "problem": problem})
                continue
            cmp = compare(c, reference(n, case["seed"], stage["inputs"]), stage["rtol"], xp)
            results.append({"n": n, "kind": case["kind"], "problem": None,
                            "description": cmp.describe(), **asdict(cmp)})
        verdicts[stage["id"]] = {"cases": results, "backend": xp.__name__}
    return verdicts


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    verdicts = check(spec)
    out = Path(argv[2])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(verdicts, default=float))
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
