"""Static check: is every CUDA runtime call in the student's host code checked?

Pure text analysis of one source file, no compiler. Comments, string and
character literals and preprocessor lines are blanked first (keeping line
numbers), so a call in a comment or in the CHECK macro's own definition is not
counted. A runtime call (``cudaXxx(``) counts as checked when

- it sits inside the parentheses of a checking macro or function: one of the
  configured names (``CUDA_CHECK``), or any name containing "check" or "chk"
  (``checkCuda``, ``gpuErrchk``);
- its value is assigned (``cudaError_t e = cudaMalloc(...)``), returned, compared
  (``... != cudaSuccess``) or used as an ``if``/``while``/``switch`` condition.

A kernel launch (``name<<<...>>>(...)``) counts as checked when a checked
``cudaGetLastError()`` (or ``cudaPeekAtLastError()``) follows it before the
next launch. Functions that return no error code (``cudaGetErrorString``) are
exempt. This is a heuristic for feedback, not a proof.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from grader.untrusted.quote import quote_code

DEFAULT_MACROS = ("CUDA_CHECK",)
DEFAULT_LAUNCH_CHECKS = ("cudaGetLastError", "cudaPeekAtLastError")
DEFAULT_EXEMPT = ("cudaGetErrorString", "cudaGetErrorName")

_CALL = re.compile(r"\b(cuda[A-Z]\w*)\s*\(")
_LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;{}]*>\s*)?<<<")
_CHECKISH = re.compile(r"check|chk", re.I)
_CONDITION_WORDS = ("if", "while", "switch", "return")


@dataclass(frozen=True)
class Unchecked:
    line: int
    name: str  # the runtime function, or the kernel for a launch
    kind: str  # "call" or "launch"
    source: str  # the line as written, trimmed

    def describe(self) -> str:
        if self.kind == "launch":
            return (f"line {self.line}: launch of {self.name} is not followed by a checked "
                    f"cudaGetLastError(): {quote_code(self.source, 120)}")
        return f"line {self.line}: {self.name}(...) is not checked: {quote_code(self.source, 120)}"


@dataclass
class HostCheckReport:
    calls: int = 0
    launches: int = 0
    names: set[str] = field(default_factory=set)  # every runtime function called
    unchecked: list[Unchecked] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unchecked

    def summary(self, limit: int = 10) -> str:
        if self.ok:
            return f"all {self.calls} runtime calls and {self.launches} kernel launches are checked"
        lines = [u.describe() for u in self.unchecked[:limit]]
        more = len(self.unchecked) - limit
        if more > 0:
            lines.append(f"... and {more} more")
        return "\n".join(lines)


def strip_code(src: str) -> str:
    """Blank comments, string/char literals and preprocessor lines; keep every newline."""
    out = list(src)
    i, n = 0, len(src)
    at_line_start = True

    def blank(a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = src[i]
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if c in " \t\r" and at_line_start:
            i += 1
            continue
        if c == "#" and at_line_start:  # directive, with backslash continuations
            j = i
            while j < n:
                end = src.find("\n", j)
                end = n if end < 0 else end
                if src[j:end].rstrip().endswith("\\"):
                    j = end + 1
                    continue
                j = end
                break
            blank(i, j)
            i = j
            continue
        at_line_start = False
        if src.startswith("//", i):
            end = src.find("\n", i)
            end = n if end < 0 else end
            blank(i, end)
            i = end
        elif src.startswith("/*", i):
            end = src.find("*/", i + 2)
            end = n if end < 0 else end + 2
            blank(i, end)
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _matching(text: str, open_pos: int) -> int:
    """Index of the ')' that closes the '(' at ``open_pos`` (len(text) if none)."""
    depth = 0
    for k in range(open_pos, len(text)):
        if text[k] == "(":
            depth += 1
        elif text[k] == ")":
            depth -= 1
            if depth == 0:
                return k
    return len(text)


def _word_before(text: str, pos: int) -> str:
    m = re.search(r"([A-Za-z_]\w*)\s*$", text[max(0, pos - 80):pos])
    return m.group(1) if m else ""


def _is_checked(text: str, start: int, open_pos: int, macros: tuple[str, ...]) -> bool:
    # Inside the parentheses of a checking macro (or of an if/while condition)?
    depth, k = 0, start - 1
    while k >= 0:
        ch = text[k]
        if ch in ";{}" and depth == 0:
            break
        if ch == ")":
            depth += 1
        elif ch == "(":
            if depth == 0:
                name = _word_before(text, k)
                if name in macros or _CHECKISH.search(name) or name in _CONDITION_WORDS:
                    return True
            else:
                depth -= 1
        k -= 1
    # Value assigned, returned or compared?
    before = text[max(0, start - 80):start].rstrip()
    before = re.sub(r"\(\s*cudaError(?:_t)?\s*\)$", "", before).rstrip().removesuffix("::").rstrip()
    if before.endswith(("=", "!", "&&", "||")):
        return True
    if re.search(r"\breturn$", before):
        return True
    after = text[_matching(text, open_pos) + 1:][:40].lstrip()
    return after.startswith(("==", "!=", "?"))


def check_host_source(source: str, *, macros: tuple[str, ...] = DEFAULT_MACROS,
                      launch_checks: tuple[str, ...] = DEFAULT_LAUNCH_CHECKS,
                      exempt: tuple[str, ...] = DEFAULT_EXEMPT) -> HostCheckReport:
    """Report every unchecked runtime call and unchecked kernel launch, by line."""
    text = strip_code(source)
    lines = source.splitlines()
    report = HostCheckReport()

    def line_of(pos: int) -> tuple[int, str]:
        no = text.count("\n", 0, pos) + 1
        return no, (lines[no - 1].strip() if no - 1 < len(lines) else "")

    checked_launch_checks: list[int] = []
    for m in _CALL.finditer(text):
        name = m.group(1)
        report.names.add(name)
        if name in exempt:
            continue
        report.calls += 1
        ok = _is_checked(text, m.start(), m.end() - 1, macros)
        if ok and name in launch_checks:
            checked_launch_checks.append(m.start())
        if not ok:
            no, src = line_of(m.start())
            report.unchecked.append(Unchecked(no, name, "call", src))

    launches = [m for m in _LAUNCH.finditer(text)]
    report.launches = len(launches)
    for idx, m in enumerate(launches):
        nxt = launches[idx + 1].start() if idx + 1 < len(launches) else len(text)
        if not any(m.end() <= pos < nxt for pos in checked_launch_checks):
            no, src = line_of(m.start())
            report.unchecked.append(Unchecked(no, m.group(1), "launch", src))
    report.unchecked.sort(key=lambda u: (u.line, u.kind))
    return report
