"""Each kernel's resources from the cubin itself, never from what the compiler printed.

ptxas -v writes its report to the compiler's stderr, where a ``#pragma message`` can print lines
identical to it (and push the real ones out of what is kept). So registers, stack frame, shared
memory and barriers come from the cubin's own records (grader/compile/cubin.py), and spill bytes
from its SASS (grader/compile/sass.py: the STL/LDL widths ptxas sums into "bytes spill stores").
A kernel with no stack frame has no local memory, so it spills nothing without any SASS read.
"""
from __future__ import annotations

from collections.abc import Mapping

from grader.compile.cubin import kernel_resources
from grader.evidence.compile import KernelResources

FROM_CUBIN = "read from the cubin and its SASS"  # KernelResources.source


def cubin_kernels(data: bytes, arch: str = "") -> dict[str, KernelResources]:
    """``{kernel: KernelResources}`` from a cubin's bytes; spill bytes are read later
    (:func:`add_spills`) where the kernel has a stack frame. Raises CubinFormatError."""
    out = {}
    for name, r in kernel_resources(data).items():
        out[name] = KernelResources(name=name, arch=arch, registers=r.registers, stack_frame=r.stack_frame,
                                    shared_bytes=r.shared_bytes, barriers=r.barriers,
                                    spills_read=r.stack_frame == 0, source=FROM_CUBIN)
    return out


def add_spills(kernel: KernelResources, local_bytes: Mapping[str, tuple[int, int]]) -> None:
    """Fill ``kernel``'s spill bytes from its SASS's local-memory stores and loads."""
    if kernel.spills_read or kernel.name not in local_bytes:
        return
    kernel.spill_stores, kernel.spill_loads = local_bytes[kernel.name]
    kernel.spills_read = True
