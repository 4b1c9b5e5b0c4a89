"""Which machine instructions each kernel contains, from ``cuobjdump -sass``.

The parser is pure (text in, opcode counts out). SASS is the evidence that a
stage runs on the units it claims: an FP32 CUDA-core stage must contain no
Tensor Core instruction (HMMA and friends: TF32 or FP16 mma smuggled into an
FP32 stage would still pass the FP32 tolerance), and the WMMA stage must
contain HMMA.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from grader.run import sandbox

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
# "/*0040*/   @!P0 FFMA R4, R5, R6, R4 ;" -> FFMA ; predicates are @P0, @!PT, @UP1 ...
_INSTR = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


def parse_sass(text: str) -> dict[str, Counter]:
    """``{function name: Counter(base opcode -> count)}``; ``HMMA.16816.F32`` counts as ``HMMA``."""
    functions: dict[str, Counter] = {}
    current: Counter | None = None
    for line in text.splitlines():
        m = _FUNCTION.match(line)
        if m:
            current = functions.setdefault(m.group(1), Counter())
            continue
        if current is None:
            continue
        m = _INSTR.match(line)
        if m:
            current[m.group(1)] += 1
    return functions


@dataclass
class SassResult:
    opcodes: dict[str, Counter] = field(default_factory=dict)
    reason: str = ""  # why there are no opcodes (tool missing, tool failed)

    @property
    def available(self) -> bool:
        return not self.reason


def dump_sass(cubin: str, cuobjdump, timeout_s: float = 60.0) -> SassResult:
    if cuobjdump is None or getattr(cuobjdump, "path", None) is None:
        return SassResult(reason="cuobjdump not found")
    proc = sandbox.run([cuobjdump.path, "-sass", cubin], timeout_s=timeout_s, output_limit=8_000_000)
    if not proc.ok:
        return SassResult(reason=f"cuobjdump failed ({proc.brief()}): {proc.stderr.strip()[:300]}")
    return SassResult(opcodes=parse_sass(proc.stdout))
