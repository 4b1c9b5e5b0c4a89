"""Parse the resource report that ``ptxas -v`` prints, per kernel.

Pure: text in, records out. Tested on captured output of nvcc 13.0 and on the
NVRTC form (whose property lines start with ``ptxas .`` instead of
``ptxas info    :``). Each property is matched on its own, so a compiler that
adds or drops a field (nvcc 13 no longer prints ``cmem[0]``) still parses.
"""
from __future__ import annotations

import difflib
import re

from grader.evidence.compile import KernelResources
from grader.untrusted.quote import quote_code

# "ptxas info    : ", "ptxas . ", "ptxas         : " -- the prefix varies by tool.
_PREFIX = r"^\s*ptxas\s*(?:info|\.)?\s*:?\s*"
_ENTRY = re.compile(_PREFIX + r"Compiling entry function '([^']+)' for '([^']+)'", re.M)
_PROPS_FOR = re.compile(_PREFIX + r"Function properties for (\S+)", re.M)
_STACK = re.compile(
    r"(\d+) bytes stack frame,\s*(\d+) bytes spill stores,\s*(\d+) bytes spill loads"
)
_USED = re.compile(_PREFIX + r"Used (\d+) registers(.*)$", re.M)
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")
_BARRIERS = re.compile(r"used (\d+) barriers")


def parse_ptxas(text: str) -> dict[str, KernelResources]:
    """Return ``{kernel name: KernelResources}`` for every entry function in ``text``.

    Lines that belong to no entry function (gmem totals, compile times, the
    "Overriding maximum register limit" notes) are ignored. The report of one
    kernel runs from its "Compiling entry function" line to the next one.
    """
    kernels: dict[str, KernelResources] = {}
    entries = list(_ENTRY.finditer(text))
    for i, match in enumerate(entries):
        name, arch = match.group(1), match.group(2)
        end = entries[i + 1].start() if i + 1 < len(entries) else len(text)
        block = text[match.end() : end]
        res = KernelResources(name=name, arch=arch)
        stack = _STACK.search(block)
        if stack:
            res.stack_frame, res.spill_stores, res.spill_loads = (int(g) for g in stack.groups())
        used = _USED.search(block)
        if used:
            res.registers = int(used.group(1))
            rest = used.group(2)
            smem = _SMEM.search(rest)
            if smem:
                res.shared_bytes = int(smem.group(1))
            res.const_bytes = sum(int(m.group(1)) for m in _CMEM.finditer(rest))
            barriers = _BARRIERS.search(rest)
            if barriers:
                res.barriers = int(barriers.group(1))
        kernels[name] = res
    return kernels


def entry_names(text: str) -> list[str]:
    """Entry functions ptxas compiled, in report order (for "found: ..." messages)."""
    return [m.group(1) for m in _ENTRY.finditer(text)]


def name_hint(expected: str, found: list[str]) -> str:
    """What to change when the kernel ``expected`` is not among ``found`` ("" when nothing found is near):
    a C++-mangled name (``_Z7mmNaive...``) needs ``extern "C"``; a name that is only near (``mmTiledKernel``
    for ``mmTiled``) needs renaming, and says which to which."""
    for name in found:
        if name.startswith("_Z") and f"{len(expected)}{expected}" in name:
            return f' ({quote_code(name)} is `{expected}` with a C++-mangled name: declare it extern "C" __global__)'
    near = [n for n in found if not n.startswith("_Z") and (expected.lower() in n.lower() or n.lower() in
                                                            expected.lower())]
    near = near or difflib.get_close_matches(expected, [n for n in found if not n.startswith("_Z")], n=1, cutoff=0.7)
    if near:
        return f" (rename {quote_code(near[0])} to `{expected}`: the grader loads the kernel by that exact name)"
    return ""
