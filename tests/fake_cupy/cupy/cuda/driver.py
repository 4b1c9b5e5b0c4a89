"""Fake cupy.cuda.driver: the Occupancy API from the grader's calculator (H200)."""
from __future__ import annotations

from grader.occupancy.calculator import api_occupancy, limits_for, max_potential_block_size

_LIM = limits_for("9.0")


def _kernel(ptr):
    from . import _STATE
    return _STATE["kernels"][ptr]


def funcSetAttribute(ptr, attr, value):
    if attr == 8:
        if value > _LIM.smem_per_block_optin:
            raise RuntimeError("CUDA_ERROR_INVALID_VALUE")
        _kernel(ptr).max_dynamic = int(value)


def occupancyMaxActiveBlocksPerMultiprocessor(ptr, block, smem):
    k = _kernel(ptr)
    return api_occupancy(_LIM, block_size=block, registers=k.registers, dynamic_smem=smem,
                         max_dynamic_smem=max(k.max_dynamic, 48 * 1024)).blocks_per_sm


def occupancyMaxPotentialBlockSize(ptr, smem, limit):
    k = _kernel(ptr)
    return max_potential_block_size(_LIM, registers=k.registers, num_sms=132, dynamic_smem=smem)
