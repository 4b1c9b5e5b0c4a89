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

from grader.compile import reuse
from grader.evidence.compile import SassResult
from grader.sandbox import guard as sandbox
from grader.untrusted.quote import quote_code

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
# "/*0040*/   @!P0 FFMA R4, R5, R6, R4 ;" -> FFMA ; predicates are @P0, @!PT, @UP1 ...
_INSTR = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)")


# A local-memory access and its width: "STL.64 [R1+0x8], R2 ;" stores 8 bytes. ptxas -v's "bytes spill
# stores/loads" are these widths summed over the kernel's STL/LDL (1,140 B = 283 x 4 + 8 for occ.cu's
# heavy at -maxrregcount=32, nvcc 13.0); a kernel's local arrays use the same instructions.
_LOCAL = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:@!?U?P[T0-9]+\s+)?(STL|LDL)((?:\.[A-Z0-9]+)*)\s")
_WIDTH = {"64": 8, "128": 16, "U8": 1, "S8": 1, "U16": 2, "S16": 2}
# A listing larger than this is not judged at all (its counts would be incomplete): a GEMM kernel's
# listing is a few hundred KB (the hopper solution's, the largest, 1.1 MB with nvcc 13.0).
MAX_LISTING_BYTES = 256 * 1024 * 1024
MAX_FUNCTIONS = 10_000
_MAX_LINE = 64 * 1024  # bytes of one line; a longer one ends the count (never held whole)


class SassCounter:
    """Opcode counts per function over a whole ``cuobjdump -sass`` listing, fed in chunks as it is
    written: memory stays bounded (one partial line, the counts) whatever the listing's size, and
    nothing of it is dropped. Past :data:`MAX_LISTING_BYTES` or :data:`MAX_FUNCTIONS` it stops
    counting and says so (:attr:`too_large`): an incomplete count is never a verdict."""

    def __init__(self, max_bytes: int | None = None, max_functions: int | None = None):
        self.max_bytes = MAX_LISTING_BYTES if max_bytes is None else max_bytes
        self.max_functions = MAX_FUNCTIONS if max_functions is None else max_functions
        self.functions: dict[str, Counter] = {}
        self.local_bytes: dict[str, list[int]] = {}  # function -> [STL bytes, LDL bytes]
        self.total = 0
        self.too_large = ""
        self._partial = b""
        self._current: Counter | None = None
        self._local: list[int] | None = None

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if self.too_large:
            return
        if self.total > self.max_bytes:
            self.too_large = f"the SASS listing is over {self.max_bytes:,} bytes"
            return
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > _MAX_LINE or any(len(line) > _MAX_LINE for line in lines):
            # no instruction is that long; a function name that long could hide which function the
            # instructions after it belong to, so the listing is not judged
            self.too_large = f"a line of the SASS listing is over {_MAX_LINE:,} bytes"
            return
        for line in lines:
            self._line(line.decode("utf-8", "replace"))

    def close(self) -> dict[str, Counter]:
        if self._partial and not self.too_large:
            self._line(self._partial.decode("utf-8", "replace"))
        self._partial = b""
        return self.functions

    def _line(self, line: str) -> None:
        m = _FUNCTION.match(line)
        if m:
            if m.group(1) not in self.functions and len(self.functions) >= self.max_functions:
                self.too_large = f"the SASS listing has over {self.max_functions:,} functions"
                return
            self._current = self.functions.setdefault(m.group(1), Counter())
            self._local = self.local_bytes.setdefault(m.group(1), [0, 0])
            return
        if self._current is None:
            return
        m = _INSTR.match(line)
        if m:
            self._current[m.group(1)] += 1
            if m.group(1) in ("STL", "LDL") and self._local is not None and (local := _LOCAL.match(line)):
                width = next((_WIDTH[mod] for mod in local.group(2).split(".") if mod in _WIDTH), 4)
                self._local[0 if local.group(1) == "STL" else 1] += width


def parse_sass(text: str) -> dict[str, Counter]:
    """``{function name: Counter(base opcode -> count)}``; ``HMMA.16816.F32`` counts as ``HMMA``."""
    counter = SassCounter(max_bytes=len(text.encode()) + 1)
    counter.feed(text.encode())
    return counter.close()


# The dumps run while the grading's children start and the other stages compile, when every CPU is busy;
# only scoring reads them, long after. So they take the CPUs only when nothing else wants them
# (docs/measurements/2026-12-01-h200-speed-round3.md).
SASS_NICE = 19


def dump_sass(cubin: str, cuobjdump, timeout_s: float = 60.0, store: reuse.Store | None = None) -> SassResult:
    """The opcode counts of ``cubin``'s SASS. ``store``: where listings read before are kept
    (grader.compile.reuse.listing_store); a cubin with the same bytes, read by the same cuobjdump, gets the
    counts kept there instead of a dump, and a listing read whole is kept there."""
    if cuobjdump is None or getattr(cuobjdump, "path", None) is None:
        return SassResult(reason="cuobjdump not found")
    name, read = _listing(cubin, cuobjdump, store)  # read: the cubin's bytes the key was made of
    if name is not None and store is not None and (hit := reuse.load(store, name)) is not None:
        kept = _from_record(hit.record)
        if kept is not None:
            return kept
    counter = SassCounter()
    # The listing is counted as it streams (stdout_sink); what the record keeps of it is a short
    # head and tail for a message, never what is judged.
    proc = sandbox.run([cuobjdump.path, "-sass", cubin], timeout_s=timeout_s, output_limit=64_000, nice=SASS_NICE,
                       stdout_sink=counter.feed)
    if not proc.ok:
        return SassResult(reason=f"cuobjdump failed ({proc.brief()}): {quote_code(proc.stderr.strip(), 300)}")
    opcodes = counter.close()
    if counter.too_large:
        return SassResult(reason=f"listing too large: {counter.too_large}, so its instructions were not counted")
    result = SassResult(opcodes=opcodes, local_bytes={f: (s, ld) for f, (s, ld) in counter.local_bytes.items()})
    if name is not None and store is not None and _read_bytes(cubin) == read:  # unchanged by the dump
        reuse.save_record(store, name, _to_record(result))
    return result


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _listing(cubin: str, cuobjdump, store: reuse.Store | None) -> tuple[str | None, bytes | None]:
    if store is None:
        return None, None
    data = _read_bytes(cubin)
    if data is None:
        return None, None
    return reuse.listing_key(cuobjdump, data, (MAX_LISTING_BYTES, MAX_FUNCTIONS, _MAX_LINE)), data


def _to_record(result: SassResult) -> dict:
    # pairs, not objects: the functions and opcodes keep the order the listing gave them
    return {"opcodes": [[f, list(c.items())] for f, c in result.opcodes.items()],
            "local_bytes": [[f, list(v)] for f, v in result.local_bytes.items()]}


def _from_record(record: dict) -> SassResult | None:
    try:
        opcodes = {str(f): Counter({str(op): int(n) for op, n in pairs}) for f, pairs in record["opcodes"]}
        local = {str(f): (int(s), int(ld)) for f, (s, ld) in record["local_bytes"]}
    except (KeyError, TypeError, ValueError):
        return None
    return SassResult(opcodes=opcodes, local_bytes=local)


class SassDumps:
    """The SASS of each compiled stage, read in the background (grader/pipeline.py): the scored
    items are the only readers, so the compile step hands the cubins over and goes on, and the
    dumps (one per stage) run while the GPU steps do.
    :meth:`collect` waits for them; :meth:`close` ends the pool whatever happened."""

    def __init__(self, cuobjdump, workers: int, store: reuse.Store | None = None):
        from concurrent.futures import ThreadPoolExecutor

        self.cuobjdump = cuobjdump
        self.store = store
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="sass")
        self._pending: dict[str, Future] = {}

    def start(self, stage: str, cubin: str) -> None:
        self._pending[stage] = self._pool.submit(_timed_dump, cubin, self.cuobjdump, self.store)

    def collect(self) -> dict[str, tuple[SassResult, float]]:
        """Each started stage's SASS and the seconds its dump took, in the order they were started."""
        done = {stage: future.result() for stage, future in self._pending.items()}
        self._pending.clear()
        return done

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _timed_dump(cubin: str, cuobjdump, store: reuse.Store | None) -> tuple[SassResult, float]:
    t0 = time.monotonic()
    result = dump_sass(cubin, cuobjdump, store=store)
    return result, time.monotonic() - t0
