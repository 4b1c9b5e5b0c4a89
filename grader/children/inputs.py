"""Deterministic test inputs, drawn from a seed: the grading process chooses those of the correctness
sizes, the stage child draws each benchmark launch's from the OS (:func:`fresh_input_seed`).

The student's runner and the trusted checker both build inputs from the same seed,
so the reference never travels through a process that runs student code. Values are
an integer hash of (seed, element index) mapped to multiples of 2^-23 in [-1, 1):
bit-identical on NumPy and CuPy, on any machine, and fast enough on the GPU to draw
fresh inputs before every timed launch. They are never all zeros (zeros hide unwritten
outputs and can run faster than real data).
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

_M = 0xFFFFFFFF


def hashed_uniform(xp: Any, shape: tuple[int, ...], seed: int):
    """float32 array of ``shape`` with values k * 2^-23 - 1, k a 24-bit hash of (seed, index)."""
    count = 1
    for s in shape:
        count *= s
    u = xp.uint32
    h = xp.arange(count, dtype=xp.uint32) * u(0x9E3779B1) + u(seed & _M)
    h ^= h >> u(16)
    h *= u(0x85EBCA6B)
    h ^= h >> u(13)
    h *= u(0xC2B2AE35)
    h ^= h >> u(16)
    x = (h >> u(8)).astype(xp.float32) * xp.float32(2.0**-23) - xp.float32(1.0)
    return x.reshape(shape)


def to_bf16(xp: Any, x):
    """BF16 bit patterns (uint16) of float32 ``x``, rounded to nearest even (NumPy and CuPy have no
    bfloat16 type; the kernels read these bits, the checker widens them with :func:`bf16_values`)."""
    u = xp.uint32
    bits = x.view(xp.uint32)
    return ((bits + u(0x7FFF) + ((bits >> u(16)) & u(1))) >> u(16)).astype(xp.uint16)


def bf16_values(xp: Any, bits):
    """float32 values of BF16 bit patterns (exact: BF16 is float32's upper half)."""
    return (bits.astype(xp.uint32) << xp.uint32(16)).view(xp.float32)


def make_inputs_xp(xp: Any, n: int, seed: int, inputs: str):
    """A and B as the stage's kernel receives them, as ``xp`` arrays: row-major n x n float32, or
    float16 for the fp16 stage; for bf16 (the Hopper stage) A and B *transposed*, both K-major
    (row-major n x n BF16 bits), the layout Hopper's tensor cores read without a transpose."""
    a = hashed_uniform(xp, (n, n), seed * 2 + 1)
    b = hashed_uniform(xp, (n, n), seed * 2 + 2)
    if inputs == "fp16":
        return a.astype(xp.float16), b.astype(xp.float16)
    if inputs == "bf16":
        return to_bf16(xp, a), to_bf16(xp, xp.ascontiguousarray(b.T))
    return a, b


def product_operands(xp: Any, a, b, inputs: str):
    """float64 A and B with C = A @ B, from what :func:`make_inputs_xp` gave the kernel."""
    if inputs == "bf16":
        return bf16_values(xp, a).astype(xp.float64), bf16_values(xp, b).astype(xp.float64).T
    return a.astype(xp.float64), b.astype(xp.float64)


def make_inputs(n: int, seed: int, inputs: str) -> tuple[np.ndarray, np.ndarray]:
    """Host (NumPy) A and B of a stage, as its kernel receives them (:func:`make_inputs_xp`)."""
    return make_inputs_xp(np, n, seed, inputs)


def fresh_input_seed() -> int:
    """The seed of one warm-up or timed launch's inputs, drawn from the OS by the stage child once the
    launch before it has ended. :func:`hashed_uniform` is invertible, so a kernel can read the seed of
    the inputs it is given; nothing it sees tells it the next one. 31 bits: :func:`make_inputs_xp` uses
    ``seed * 2 + 1`` and ``seed * 2 + 2`` modulo 2^32, so larger seeds would alias. The child reports
    every seed with its launch's record (grader/evidence/protocol.py: BenchRun.input_seeds)."""
    return int.from_bytes(os.urandom(4), "little") >> 1


def integrity_vector(n: int, vector_seed: int) -> np.ndarray:
    """v_r of timed launch r's fingerprint C_r @ v_r (float32, uniform in [-1, 1), on the host): the
    stage child multiplies the launch's output by it, the checker A_r (B_r v_r) by the same v_r."""
    return np.random.default_rng(vector_seed).random(n, dtype=np.float32) * 2 - 1


def fresh_vector_seed() -> int:
    """The seed of one timed launch's fingerprint vector, drawn from the OS by the stage child once
    that launch has ended: nothing that existed while the kernel ran (the spec, the inputs' seeds,
    device memory, the child's own memory) tells it. The child reports it with the fingerprints."""
    return int.from_bytes(os.urandom(8), "little") >> 1  # 63 bits: exact in JSON and in NumPy's seeding
