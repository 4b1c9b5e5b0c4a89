"""What compiling one stage found: the compile step's result, ptxas' resources, the SASS opcodes, the launch shape.

Built by grader/compile (stage.py, ptxas.py, resources.py, sass.py) and by the rubric (a stage's default launch).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from grader.evidence.protocol import Boxes
from grader.model import Cause, ProcRecord


@dataclass
class CompileResult:
    stage: str
    ok: bool  # the cubin exists, holds the kernel, and its launch shape is usable
    problem: str = ""  # why not, in words for the student
    cause: Cause = Cause.STUDENT  # GRADER when the grader could not compile (no nvcc): not evaluated
    proc: ProcRecord | None = None
    cubin: str | None = None
    kernel: KernelResources | None = None
    found_kernels: list[str] = field(default_factory=list)
    launch: Launch | None = None
    launch_source: str = ""  # "declared in <file>" or "rubric default"
    boxes: Boxes | None = None  # a tensor-map stage's declared TMA boxes (<kernel>_tma)
    notes: list[str] = field(default_factory=list)
    # Where the compile step's time went: "scratch" (copy, #include checks), "deps" (nvcc -M; only
    # outside bwrap: grader.compile.student), "nvcc" (the compile, bwrap's start included), "cubin"
    # (reading the cubin and ptxas' report).
    seconds: Mapping[str, float] = field(default_factory=dict)


@dataclass
class SassResult:
    opcodes: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    reason: str = ""  # why there are no opcodes (tool missing, tool failed, listing too large)
    # function -> (bytes of local-memory stores, loads): STL/LDL widths summed, what ptxas -v calls spills
    local_bytes: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def available(self) -> bool:
        return not self.reason


@dataclass
class KernelResources:
    """What ptxas reports for one entry function."""

    name: str
    arch: str
    registers: int | None = None
    stack_frame: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    shared_bytes: int = 0  # static shared memory only; dynamic is chosen at launch
    const_bytes: int = 0  # sum of cmem banks, where the compiler prints them
    barriers: int | None = None
    # The spill bytes are known: read from the SASS's local-memory instructions, or 0 because the
    # kernel has no stack frame (grader/compile/resources.py). False: not read yet.
    spills_read: bool = True
    # Where these values were read (what the no_spills item's message names): the cubin for every grading
    # now; "ptxas -v" in gradings stored before the cubin was read, and for parse_ptxas's own records.
    source: str = "ptxas -v"

    @property
    def spills(self) -> bool:
        return bool(self.spill_stores or self.spill_loads)


@dataclass(frozen=True)
class Launch:
    block: tuple[int, int]
    tile: tuple[int, int]  # (BM rows, BN cols) of C per block
    smem: int = 0
