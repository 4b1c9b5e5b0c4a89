"""Deterministic test inputs, drawn from a seed the grading process chooses.

The student's runner and the trusted checker both call :func:`make_inputs` with
the same seed, so the reference never travels through a process that runs
student code. Values are uniform in [-1, 1): never zeros, which hide unwritten
outputs and run faster than real data.
"""
from __future__ import annotations

import numpy as np


def make_inputs(n: int, seed: int, inputs: str) -> tuple[np.ndarray, np.ndarray]:
    """Host arrays A and B (row-major n x n) for a stage whose inputs are fp32 or fp16."""
    rng = np.random.default_rng(seed)
    a = rng.random((n, n), dtype=np.float32) * 2 - 1
    b = rng.random((n, n), dtype=np.float32) * 2 - 1
    if inputs == "fp16":
        return a.astype(np.float16), b.astype(np.float16)
    return a, b
