"""Which machine instructions each kernel contains, from ``cuobjdump -sass``.

The parser is pure (text in, opcode counts out). SASS is the evidence that a
stage runs on the units it claims: an FP32 CUDA-core stage must contain no
Tensor Core instruction (HMMA and friends: TF32 or FP16 mma smuggled into an
FP32 stage would still pass the FP32 tolerance), and the WMMA stage must
contain HMMA.
"""
from __future__ import annotations

import re
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field

from grader.sandbox import guard as sandbox
from grader.untrusted.quote import quote_code

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


# The dumps run while the grading's children start and the other stages compile, when every CPU is busy
# (an H200 host's 16 were 13-16 busy for the first 3.5 s of a grading); only scoring reads them, long
# after. So they take the CPUs only when nothing else wants them: nvdisasm used 3.4 CPU-s of that
# window (docs/measurements/2026-12-01-h200-speed-round3.md).
SASS_NICE = 19


def dump_sass(cubin: str, cuobjdump, timeout_s: float = 60.0) -> SassResult:
    if cuobjdump is None or getattr(cuobjdump, "path", None) is None:
        return SassResult(reason="cuobjdump not found")
    proc = sandbox.run([cuobjdump.path, "-sass", cubin], timeout_s=timeout_s, output_limit=8_000_000, nice=SASS_NICE)
    if not proc.ok:
        return SassResult(reason=f"cuobjdump failed ({proc.brief()}): {quote_code(proc.stderr.strip(), 300)}")
    return SassResult(opcodes=parse_sass(proc.stdout))


class SassDumps:
    """The SASS of each compiled stage, read in the background (grader/pipeline.py): the scored
    items are the only readers, so the compile step hands the cubins over and goes on, and the
    dumps (0.5-0.7 s each on an H200 host, seven per grading) run while the GPU steps do.
    :meth:`collect` waits for them; :meth:`close` ends the pool whatever happened."""

    def __init__(self, cuobjdump, workers: int):
        from concurrent.futures import ThreadPoolExecutor

        self.cuobjdump = cuobjdump
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="sass")
        self._pending: dict[str, Future] = {}

    def start(self, stage: str, cubin: str) -> None:
        self._pending[stage] = self._pool.submit(_timed_dump, cubin, self.cuobjdump)

    def collect(self) -> dict[str, tuple[SassResult, float]]:
        """Each started stage's SASS and the seconds its dump took, in the order they were started."""
        done = {stage: future.result() for stage, future in self._pending.items()}
        self._pending.clear()
        return done

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _timed_dump(cubin: str, cuobjdump) -> tuple[SassResult, float]:
    t0 = time.monotonic()
    result = dump_sass(cubin, cuobjdump)
    return result, time.monotonic() - t0
