"""A stand-in for CuPy so CPU-only tests can run grader.children.occupancy end to end.

Only what gpu_child uses. Put ``tests/fake_cupy`` first on PYTHONPATH. Behaviour comes
from the JSON in ``$FAKE_CUPY`` (all keys optional):

- ``no_device``: getDeviceProperties raises, as on a machine without a GPU;
- ``fail_launch`` / ``hang``: a kernel name whose launch raises CUDA_ERROR_LAUNCH_FAILED /
  never returns;
- ``heavy_registers``: registers of ``heavy`` (default: min(cap, 168); cap from the
  cubin's name ``..._r<cap>.cubin``);
- ``launch_s`` / ``launch_log``: every launch takes that long / appends its kernel's name and
  its start and end (``time.monotonic()``) as a line to that file (when the GPU was in use).

A kernel exists when its name is in the cubin's bytes. Occupancy comes from the
grader's calculator (an H200); times from a made-up model where 16 KiB and block 256
are the fastest sweep points and the uncapped heavy the fastest cap.
"""
from __future__ import annotations

import numpy as _np

from . import cuda  # noqa: F401

__version__ = "0.0-fake"
float32 = _np.float32


def full(n, value, dtype=None):
    return _np.full(n, value, dtype=dtype)


def zeros(n, dtype=None):
    return _np.zeros(n, dtype=dtype)


class RawModule:
    def __init__(self, path=None, code=None, options=()):
        self.path = path

    def get_function(self, name):
        return cuda._Kernel(self.path, name)
