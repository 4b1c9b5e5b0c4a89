"""A small ctypes binding to the CUDA driver API (``libcuda.so.1``), for the sanitizer's launcher.

compute-sanitizer intercepts every CUDA module a process loads; a child that imports CuPy loads
cuBLAS, cuRAND and NVRTC and builds its inputs with CuPy kernels, and under racecheck that is
where most of its time goes. The launcher child (:mod:`grader.children.sanitize`) needs only
what is here: the driver, one context, one cubin, a few buffers and one launch. ctypes rather
than CuPy or cuda-python: no extra dependency, and nothing is loaded but the driver itself.

Stdlib only, and importing this module loads nothing: :class:`Driver` opens the library when it
is made, so a machine without an NVIDIA driver fails there, with a :class:`DriverError` saying so.
Every failing call raises :class:`DriverError` carrying the CUresult's name (``CUDA_ERROR_...``).

Kernel arguments are :class:`KernelArg` values, each its bytes and its alignment, so any
parameter can be passed: 8-byte device pointers, 4-byte ints, or an opaque blob such as a
128-byte, 64-byte-aligned ``CUtensorMap``. :func:`pack_params` lays them out for
``cuLaunchKernel``'s ``kernelParams`` (an array of ``void*``, one per argument).
"""
from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass

LIBRARY = "libcuda.so.1"
LIBRARY_VAR = "GRADER_LIBCUDA"  # another driver library to load instead (a path or a name)
NOT_LOADED = "LIBCUDA_NOT_LOADED"  # DriverError.name when the library itself could not be opened

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
DEFAULT_DYNAMIC_SMEM = 48 * 1024  # a launch above this must raise the kernel's limit first

# Errors after which the context is unusable: every later call in this process fails too.
STICKY = frozenset({
    "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ASSERT", "CUDA_ERROR_LAUNCH_TIMEOUT",
    "CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_CONTEXT_IS_DESTROYED", "CUDA_ERROR_TENSOR_MEMORY_LEAK",
})

_TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap)
_L2_PROMOTION_256B = 3  # CU_TENSOR_MAP_L2_PROMOTION_L2_256B: fetch whole 256-byte lines into L2
_P = ctypes.c_void_p  # CUcontext, CUmodule, CUfunction, CUstream, host pointers
_DPTR = ctypes.c_ulonglong  # CUdeviceptr (64-bit)
_U = ctypes.c_uint
# name -> argument types (every function returns a CUresult, a C int). The names are the ones
# cuda.h maps the plain names to (cuMemAlloc -> cuMemAlloc_v2, ...); they exist since CUDA 4.0.
_SIGNATURES: dict[str, list[type]] = {
    "cuInit": [_U],
    "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_P), ctypes.c_int],
    "cuCtxSetCurrent": [_P],
    "cuCtxSynchronize": [],
    "cuModuleLoad": [ctypes.POINTER(_P), ctypes.c_char_p],
    "cuModuleGetFunction": [ctypes.POINTER(_P), _P, ctypes.c_char_p],
    "cuFuncSetAttribute": [_P, ctypes.c_int, ctypes.c_int],
    "cuMemAlloc_v2": [ctypes.POINTER(_DPTR), ctypes.c_size_t],
    "cuMemFree_v2": [_DPTR],
    "cuMemcpyHtoD_v2": [_DPTR, _P, ctypes.c_size_t],
    "cuMemcpyDtoH_v2": [_P, _DPTR, ctypes.c_size_t],
    "cuMemsetD32_v2": [_DPTR, _U, ctypes.c_size_t],
    "cuLaunchKernel": [_P, _U, _U, _U, _U, _U, _U, _U, _P, ctypes.POINTER(_P), ctypes.POINTER(_P)],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}


class DriverError(RuntimeError):
    """A driver call failed. ``name``: the CUresult's name (``CUDA_ERROR_...``), or
    :data:`NOT_LOADED` when the library could not be opened; ``code``: the CUresult (None then)."""

    def __init__(self, call: str, name: str, description: str, code: int | None = None) -> None:
        super().__init__(f"{call}: {name} ({description})")
        self.call, self.name, self.description, self.code = call, name, description, code

    @property
    def context_lost(self) -> bool:
        """The context is unusable after this error: later launches would fail the same way."""
        return self.name in STICKY


@dataclass(frozen=True)
class KernelArg:
    """One kernel parameter: its bytes, exactly as the kernel reads them, and their alignment."""

    data: bytes
    align: int

    def __post_init__(self) -> None:
        if not self.data:
            raise ValueError("a kernel argument has at least one byte")
        if self.align < 1 or self.align & (self.align - 1):
            raise ValueError(f"alignment {self.align} is not a power of two")

    @classmethod
    def pointer(cls, address: int) -> KernelArg:
        """A device pointer (``const float*``, ``float*``, ...): 8 bytes."""
        return cls(struct.pack("=Q", address), 8)

    @classmethod
    def int32(cls, value: int) -> KernelArg:
        """An ``int``: 4 bytes."""
        return cls(struct.pack("=i", value), 4)

    @classmethod
    def blob(cls, data: bytes, align: int) -> KernelArg:
        """Opaque bytes passed by value, e.g. a ``CUtensorMap`` (128 bytes, 64-byte aligned)."""
        return cls(bytes(data), align)


@dataclass
class Params:
    """``kernelParams`` for cuLaunchKernel: ``array[i]`` points at argument i's bytes, each copy
    aligned as its :class:`KernelArg` asks; ``keep`` holds the copies alive until the launch."""

    array: ctypes.Array[ctypes.c_void_p]
    keep: list[ctypes.Array[ctypes.c_char]]


def pack_params(args: Sequence[KernelArg]) -> Params:
    """Copy every argument into host memory of its own, aligned, and point at it (no driver used)."""
    keep: list[ctypes.Array[ctypes.c_char]] = []
    addresses: list[int] = []
    for arg in args:
        buf = ctypes.create_string_buffer(len(arg.data) + arg.align - 1)
        address = -(-ctypes.addressof(buf) // arg.align) * arg.align  # rounded up to the alignment
        ctypes.memmove(address, arg.data, len(arg.data))
        keep.append(buf)
        addresses.append(address)
    return Params((ctypes.c_void_p * len(addresses))(*addresses), keep)


def library_name() -> str:
    """The driver library to open: ``$GRADER_LIBCUDA``, else ``libcuda.so.1``."""
    return os.environ.get(LIBRARY_VAR) or LIBRARY


class Driver:
    """The driver library, opened when this is made (:class:`DriverError` :data:`NOT_LOADED`
    when it cannot be). Call :meth:`start` once before anything else."""

    def __init__(self, library: str | None = None) -> None:
        name = library or library_name()
        try:
            self._lib = ctypes.CDLL(name)
        except OSError as exc:
            raise DriverError("dlopen", NOT_LOADED, f"{name} could not be loaded; is the NVIDIA driver installed "
                              f"and visible here? {exc}") from None
        for fn, argtypes in _SIGNATURES.items():
            try:
                f = getattr(self._lib, fn)
            except AttributeError:
                raise DriverError("dlsym", NOT_LOADED, f"{name} has no {fn}: not a CUDA driver library") from None
            f.argtypes, f.restype = argtypes, ctypes.c_int
        self.context: int | None = None

    def _call(self, fn: str, *args: object) -> None:
        code = getattr(self._lib, fn)(*args)
        if code:
            raise DriverError(fn, *self._describe(code), code)

    def _describe(self, code: int) -> tuple[str, str]:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        self._lib.cuGetErrorName(code, ctypes.byref(name))
        self._lib.cuGetErrorString(code, ctypes.byref(text))
        return ((name.value or b"").decode(errors="replace") or f"CUresult {code}",
                (text.value or b"").decode(errors="replace") or "no description")

    def start(self, ordinal: int = 0) -> None:
        """cuInit, then device ``ordinal``'s primary context (the one the runtime API and CuPy use)
        made current on this thread."""
        self._call("cuInit", 0)
        device, context = ctypes.c_int(), ctypes.c_void_p()
        self._call("cuDeviceGet", ctypes.byref(device), ordinal)
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
        self._call("cuCtxSetCurrent", context)
        self.context = context.value

    def load_function(self, cubin: str | os.PathLike[str], kernel: str, dynamic_smem: int = 0) -> int:
        """The CUfunction ``kernel`` of the cubin file (cuModuleLoad: the driver reads the file),
        its dynamic shared-memory limit raised to ``dynamic_smem`` when that is above 48 KiB."""
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        self._call("cuModuleLoad", ctypes.byref(module), os.fsencode(cubin))
        self._call("cuModuleGetFunction", ctypes.byref(function), module, kernel.encode())
        if dynamic_smem > DEFAULT_DYNAMIC_SMEM:
            self._call("cuFuncSetAttribute", function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic_smem)
        assert function.value is not None  # set by a call that succeeded
        return function.value

    def alloc(self, nbytes: int) -> int:
        """``nbytes`` of device memory (uninitialised); the device pointer."""
        ptr = _DPTR()
        self._call("cuMemAlloc_v2", ctypes.byref(ptr), nbytes)
        return ptr.value

    def free(self, ptr: int) -> None:
        self._call("cuMemFree_v2", ptr)

    def upload(self, dst: int, data: object) -> None:
        """Copy a C-contiguous buffer (bytes, a NumPy array, ...) to device memory at ``dst``."""
        view = memoryview(data).cast("B")  # type: ignore[arg-type]  # anything with the buffer protocol
        host = (ctypes.c_char * view.nbytes).from_buffer_copy(view) if view.readonly \
            else (ctypes.c_char * view.nbytes).from_buffer(view)
        self._call("cuMemcpyHtoD_v2", dst, host, view.nbytes)

    def download(self, src: int, nbytes: int) -> bytearray:
        """``nbytes`` of device memory at ``src``, copied to the host."""
        out = bytearray(nbytes)
        self._call("cuMemcpyDtoH_v2", (ctypes.c_char * nbytes).from_buffer(out), src, nbytes)
        return out

    def fill32(self, dst: int, value: int, count: int) -> None:
        """Set ``count`` 32-bit words at ``dst`` to ``value`` (e.g. 0x7FC00000: float NaN)."""
        self._call("cuMemsetD32_v2", dst, value, count)

    def launch(self, function: int, grid: tuple[int, int, int], block: tuple[int, int, int], dynamic_smem: int,
               args: Sequence[KernelArg]) -> None:
        """Launch ``function`` on the default stream (asynchronous: :meth:`synchronize` waits)."""
        params = pack_params(args)
        self._call("cuLaunchKernel", function, *grid, *block, dynamic_smem, None,
                   params.array if args else None, None)

    def synchronize(self) -> None:
        """Wait for everything launched; a kernel's failure is raised here."""
        self._call("cuCtxSynchronize")

    def tensor_map_2d(self, address: int, rows: int, cols: int, box_cols: int, box_rows: int, swizzle: int,
                      element_bytes: int, data_type: int) -> bytes:
        """The 128-byte ``CUtensorMap`` (cuTensorMapEncodeTiled, CUDA 12+) of a row-major ``rows x cols``
        matrix at device ``address``, copied in ``box_rows x box_cols`` boxes; ``swizzle`` and
        ``data_type`` are the CUtensorMapSwizzle and CUtensorMapDataType values. Looked up here, not
        at load: a driver older than CUDA 12 still runs every other stage."""
        try:
            encode = self._lib.cuTensorMapEncodeTiled
        except AttributeError:
            raise DriverError("dlsym", NOT_LOADED, "this driver has no cuTensorMapEncodeTiled (CUDA 12 or "
                              "newer is needed for tensor maps)") from None
        encode.argtypes = [_P, ctypes.c_int, _U, _P, _P, _P, _P, _P, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                           ctypes.c_int]
        encode.restype = ctypes.c_int
        raw = ctypes.create_string_buffer(_TENSOR_MAP_BYTES + 63)  # a CUtensorMap is 64-byte aligned
        at = -(-ctypes.addressof(raw) // 64) * 64
        dims = (ctypes.c_uint64 * 2)(cols, rows)  # innermost dimension first
        strides = (ctypes.c_uint64 * 1)(cols * element_bytes)  # bytes from one row to the next
        box = (ctypes.c_uint32 * 2)(box_cols, box_rows)
        steps = (ctypes.c_uint32 * 2)(1, 1)
        code = encode(at, data_type, 2, address, dims, strides, box, steps, 0, swizzle, _L2_PROMOTION_256B, 0)
        if code:
            raise DriverError("cuTensorMapEncodeTiled", *self._describe(code), code)
        return ctypes.string_at(at, _TENSOR_MAP_BYTES)
