"""One kernel's SASS as a list of abstracted instruction tokens (pure: text in, tokens out).

``cuobjdump -sass`` prints each instruction with its address and encoding; a token keeps the opcode
with its modifiers and the shape of each operand, and drops what the compiler chooses freely for
the same code: register numbers (``R12`` -> ``R``, ``UR4`` -> ``UR``, ``P0`` -> ``P``), immediates,
constant-bank offsets (the kernel's parameters), branch targets, reuse flags and the NOP padding.
Two kernels that differ only in names and formatting compile to the same tokens. A run of the same
token (an unrolled loop's FFMAs) becomes one token with its count, so two kernels do not match
merely because both unroll many multiply-adds; the count keeps a different tile size different.
"""
from __future__ import annotations

import re

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_LINE = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(.*?)\s*;?\s*(?:/\*.*\*/)?\s*$")
_SUBS = (
    (re.compile(r"`\([^)]*\)"), "L"),                   # branch targets: `(.L_x_3)
    (re.compile(r"\.reuse\b"), ""),                      # operand reuse flags (scheduling)
    (re.compile(r"\bc\[0x[0-9a-fA-F]+\]\[0x[0-9a-fA-F]+\]"), "c[#]"),  # constant bank: parameters
    (re.compile(r"\bUR[0-9]+\b"), "UR"),
    (re.compile(r"\bUP[0-9]+\b"), "UP"),
    (re.compile(r"\bR[0-9]+\b"), "R"),
    (re.compile(r"\bP[0-6]\b"), "P"),
    (re.compile(r"\bB[0-9]+\b"), "B"),
    (re.compile(r"-?\b0x[0-9a-fA-F]+\b"), "#"),
    (re.compile(r"(?<![\w.])-?[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?\b"), "#"),
    (re.compile(r"\s+"), " "),
)


def abstract_instruction(text: str) -> str:
    """``@!P0 FFMA R4, R5.reuse, R6, R4`` -> ``@!P FFMA R, R, R, R``."""
    for pattern, repl in _SUBS:
        text = pattern.sub(repl, text)
    return text.strip()


def kernel_instructions(sass: str, kernel: str) -> list[str] | None:
    """The abstracted instructions of ``kernel`` in a ``cuobjdump -sass`` listing, in order; None when
    the listing has no function of that name."""
    found: list[str] | None = None
    inside = False
    for line in sass.splitlines():
        m = _FUNCTION.match(line)
        if m:
            inside = m.group(1) == kernel
            if inside:
                found = []
            continue
        if not inside or found is None:
            continue
        m = _LINE.match(line)
        if m and m.group(1):
            token = abstract_instruction(m.group(1))
            if token and token != "NOP":
                found.append(token)
    return found


def run_length(tokens: list[str]) -> list[str]:
    """Consecutive equal tokens as one: ``FFMA R, R, R, R`` eight times -> ``FFMA R, R, R, R x8``."""
    out: list[str] = []
    count = 0
    for i, tok in enumerate(tokens):
        count += 1
        if i + 1 == len(tokens) or tokens[i + 1] != tok:
            out.append(tok if count == 1 else f"{tok} x{count}")
            count = 0
    return out
