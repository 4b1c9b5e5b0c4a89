"""A stand-in for CuPy so CPU-only tests can run grader.children.occupancy and grader.children.stage
end to end.

Only what those children use. Put ``tests/fake_cupy`` first on PYTHONPATH. Behaviour comes
from the JSON in ``$FAKE_CUPY`` (all keys optional):

- ``no_device``: getDeviceProperties raises, as on a machine without a GPU;
- ``device``: the card it stands for (cupy/cuda/runtime.py: a student's T4, A100, ...; default an H200);
- ``fail_launch`` / ``hang``: a kernel name whose launch raises CUDA_ERROR_LAUNCH_FAILED /
  never returns;
- ``heavy_registers``: registers of ``heavy`` (default: min(cap, 168); cap from the
  cubin's name ``..._r<cap>.cubin``);
- ``launch_s`` / ``launch_log``: every launch takes that long / appends its kernel's name and
  its start and end (``time.monotonic()``) as a line to that file (when the GPU was in use);
- ``gemm``: a kernel launched with (A, B, C, n), as a stage's, computes C = A @ B; with
  ``{"replay_from": k}`` its launches from the k-th (0-based) on write launch k-1's result again;
- ``device_log``: every device array is kept (device memory keeps what was written to it until it
  is written again) and each such launch appends one JSON line to that file: the sha256 of the
  bytes of every device array of ``n`` or ``n * n`` elements, as they are while the kernel runs.

Device arrays are NumPy arrays of a subclass (:class:`ndarray`); ``asnumpy`` gives a plain copy.
A kernel exists when its name is in the cubin's bytes. Occupancy comes from the
grader's calculator (an H200); times from a made-up model where 16 KiB and block 256
are the fastest sweep points and the uncapped heavy the fastest cap.
"""
from __future__ import annotations

import numpy as _np

from . import cuda  # noqa: F401

__version__ = "0.0-fake"
float16, float32, float64 = _np.float16, _np.float32, _np.float64
uint8, uint16, uint32, uint64 = _np.uint8, _np.uint16, _np.uint32, _np.uint64
nan = _np.nan
_KEPT: list = []  # every device array, with device_log (see the module docstring)
_KEEP = bool(cuda.config().get("device_log"))


class ndarray(_np.ndarray):  # noqa: N801 - CuPy's name
    """A device array: a NumPy array that asnumpy copies out."""

    def __array_finalize__(self, obj) -> None:
        if _KEEP:
            _KEPT.append(self)


def device_arrays() -> list:
    return _KEPT


def _device(x):
    return _np.asarray(x).view(ndarray)


def full(shape, value, dtype=None):
    return _device(_np.full(shape, value, dtype=dtype))


def zeros(shape, dtype=None):
    return _device(_np.zeros(shape, dtype=dtype))


def ones(shape, dtype=None):
    return _device(_np.ones(shape, dtype=dtype))


def empty(shape, dtype=None):
    return _device(_np.empty(shape, dtype=dtype))


def arange(*args, dtype=None):
    return _device(_np.arange(*args, dtype=dtype))


def asarray(x, dtype=None):
    return _device(_np.array(x, dtype=dtype))  # a copy: host to device


def ascontiguousarray(x):
    return _device(_np.ascontiguousarray(x))


def asnumpy(x):
    return _np.array(x).view(_np.ndarray)


def matmul(a, b, out=None):
    return _np.matmul(a, b, out=out)


class _Pool:
    def free_all_blocks(self) -> None:
        pass


def get_default_memory_pool() -> _Pool:
    return _Pool()


class RawModule:
    """A cubin's module. One from source (``code=``: the warm child's kernel) cannot be compiled here (no
    NVRTC): its get_function raises, as CuPy's does where NVRTC fails."""

    def __init__(self, path=None, code=None, options=()):
        self.path = path

    def get_function(self, name):
        if self.path is None:
            raise cuda.CUDADriverError("the stand-in CuPy compiles no source (no NVRTC)")
        return cuda._Kernel(self.path, name)
