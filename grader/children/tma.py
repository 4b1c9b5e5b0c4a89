"""Tensor maps (TMA descriptors) for the Hopper stage, built by the grader's own host code.

A Hopper kernel that loads tiles with the tensor memory accelerator needs a ``CUtensorMap`` per
operand: 128 opaque bytes that only the driver's ``cuTensorMapEncodeTiled`` can make, from the
operand's address, shape and strides and the tile ("box") the kernel copies. That is host code,
and no stage runs a student's host code. So the student *declares* the boxes in an array
(``<kernel>_tma = {box k-width, A box rows, B box rows, swizzle bytes}``, read from the cubin
and checked by :func:`check_boxes` at compile time), and the stage, ncu and sanitizer children
encode the maps here and pass them by value (``const __grid_constant__`` parameters).

:func:`check_boxes` is pure; :func:`operand_args` encodes the maps through the driver binding
(:mod:`grader.children.driver`, ctypes: CuPy has no binding for ``cuTensorMapEncodeTiled``) and
gives the kernel's arguments for :meth:`Driver.launch`, which works beside CuPy in the same
process and context.
"""
from __future__ import annotations

from collections.abc import Sequence

from grader.children.driver import Driver, KernelArg
from grader.children.protocol import launch_grid
from grader.evidence.protocol import Boxes, Kernel

TMA_FIELDS = "{box k-width (elements), A box rows, B box rows, swizzle bytes}"
SWIZZLE_MODES = {0: 0, 32: 1, 64: 2, 128: 3}  # bytes -> CUtensorMapSwizzle
MAX_BOX = 256  # elements per box dimension
ELEMENT_BYTES = 2  # BF16
BFLOAT16 = 9  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
MAP_ALIGN = 64  # a CUtensorMap parameter's alignment


def check_boxes(values: Sequence[int] | None, symbol: str, sizes: Sequence[int]) -> tuple[Boxes | None, str]:
    """Validate a declared ``<kernel>_tma`` array (pure): the rules ``cuTensorMapEncodeTiled``
    enforces, said in the student's terms, plus boxes that tile every size the grader runs."""
    if values is None:
        return None, f"{symbol} is missing: declare extern \"C\" __constant__ int {symbol}[4] = {TMA_FIELDS}"
    if len(values) != 4:
        return None, f"{symbol} has {len(values)} values; expected 4: {TMA_FIELDS}"
    k, a_rows, b_rows, swizzle = (int(v) for v in values)
    if swizzle not in SWIZZLE_MODES:
        return None, f"{symbol}: swizzle {swizzle} bytes; expected 0, 32, 64 or 128"
    for name, v in (("box k-width", k), ("A box rows", a_rows), ("B box rows", b_rows)):
        if not 1 <= v <= MAX_BOX:
            return None, f"{symbol}: {name} {v}; a TMA box dimension holds 1 to {MAX_BOX} elements"
    if (k * ELEMENT_BYTES) % 16:
        return None, f"{symbol}: box k-width {k} BF16 = {k * ELEMENT_BYTES} bytes; TMA needs a multiple of 16 bytes"
    if swizzle and k * ELEMENT_BYTES > swizzle:
        return None, (f"{symbol}: box k-width {k} BF16 = {k * ELEMENT_BYTES} bytes is wider than the {swizzle}-byte "
                      "swizzle; with a swizzle the box's inner dimension may be at most the swizzle width")
    for n in sizes:
        if n % k or n % a_rows or n % b_rows:
            return None, f"{symbol}: boxes {k} x {a_rows} and {k} x {b_rows} do not tile N={n}"
    return Boxes(k, a_rows, b_rows, swizzle), ""


def operand_args(driver: Driver, boxes: Boxes, a_ptr: int, b_ptr: int, c_ptr: int, n: int) -> list[KernelArg]:
    """The tensor-map contract's kernel arguments: the maps of A (n x n, K-major) and of B stored
    transposed (n x n, K-major) for the declared boxes, then A, Bt, C and N."""
    swizzle = SWIZZLE_MODES[boxes.swizzle]
    map_a = driver.tensor_map_2d(a_ptr, n, n, boxes.k, boxes.a_rows, swizzle, ELEMENT_BYTES, BFLOAT16)
    map_b = driver.tensor_map_2d(b_ptr, n, n, boxes.k, boxes.b_rows, swizzle, ELEMENT_BYTES, BFLOAT16)
    return [KernelArg.blob(map_a, MAP_ALIGN), KernelArg.blob(map_b, MAP_ALIGN), KernelArg.pointer(a_ptr),
            KernelArg.pointer(b_ptr), KernelArg.pointer(c_ptr), KernelArg.int32(n)]


def boxes_of(spec: Kernel) -> Boxes:
    """The Boxes a child's spec carries (``"boxes": [k, a_rows, b_rows, swizzle]``, checked at compile time)."""
    k, a_rows, b_rows, swizzle = (int(v) for v in spec.boxes or ())
    return Boxes(k, a_rows, b_rows, swizzle)


class MapLauncher:
    """Launches a tensor-map stage's kernel, loaded by CuPy, through the driver (CuPy cannot pass a
    ``CUtensorMap`` by value): the stage and profile children's launch for such a stage. The
    arguments of each (A, B, C, n) are encoded once: the timed loop refills A and B in place."""

    def __init__(self, spec: Kernel) -> None:
        self.driver = Driver()
        self.driver.start()  # the device's primary context: the one CuPy uses
        self.boxes = boxes_of(spec)
        block, tile = spec.launch.block, spec.launch.tile
        self.block = (int(block[0]), int(block[1]), 1)
        self.tile = (int(tile[0]), int(tile[1]))
        self.smem = int(spec.launch.smem)
        self._args: dict[tuple[int, int, int, int], list[KernelArg]] = {}

    def __call__(self, kernel, a, b, c, n: int) -> None:
        key = (a.data.ptr, b.data.ptr, c.data.ptr, n)
        if key not in self._args:
            self._args[key] = operand_args(self.driver, self.boxes, *key)
        function = getattr(kernel, "kernel", kernel).ptr  # a CuPy RawKernel's CUfunction
        self.driver.launch(function, launch_grid(n, self.tile), self.block, self.smem,
                           self._args[key])
