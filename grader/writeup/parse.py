"""Markdown report -> sections, metric citations, numbers and tables. Pure; never raises on text.

The citation format (assignment/README.md, "The report"): an inline code span

    `name = value`            compared with the kernel of the stage after the transition
    `stage: name = value`     compared with that stage's kernel (e.g. the stage before)

where ``name`` is an Nsight Compute metric name exactly as the grader collects it
(``unit__counter.rollup``) or a derived name from the rubric (``shared_loads_per_warp_ffma``;
spaces or hyphens may replace the underscores), ``=`` may also be ``≈``, and ``value`` is a
number, optionally with thousands separators, an exponent (``8.59e9``, ``8.59 x 10^9``), a scale
word or letter (``8.59 G``, ``8.59 billion``) and a unit (``%``, ``ms``/``us``/``ns``, ``MB``/``GiB``).
Any other code span is ordinary code and is ignored; HTML comments are removed first.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from grader.profile.ncu import METRIC_RE
from grader.writeup.config import normalize_name

_COMMENT = re.compile(r"<!--.*?(?:-->|$)", re.S)
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_ARROW = re.compile(r"\s*(?:-+>|→|⟶|=>|⇒)\s*|\s+to\s+", re.I)
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?")
_POW10 = re.compile(r"\s*(?:[x×*·]\s*10\s*\^\s*|[x×*·]\s*10\*\*\s*)([-+]?\d+)")
_PREFIX = re.compile(r"^(?:~|≈|about\s+|approx\.?\s+|approximately\s+|roughly\s+)", re.I)
_WORD = re.compile(r"[A-Za-z]{2,}")
MAX_SECTIONS = 1000  # headings read; a report has a few dozen
MAX_CITATIONS = 100  # citations read per section

TIME_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "sec": 1e9}
BYTES = {"b": 1.0, "byte": 1.0, "bytes": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2.0**10,
         "mib": 2.0**20, "gib": 2.0**30, "tib": 2.0**40, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9}
SCALE = {"k": 1e3, "K": 1e3, "thousand": 1e3, "M": 1e6, "million": 1e6, "G": 1e9, "billion": 1e9,
         "T": 1e12, "trillion": 1e12}


@dataclass
class Quantity:
    value: float
    unit: str = ""  # "", "%", "time" or "byte" (value already converted to ns or bytes), or other text
    resolution: float = 0.0  # half of the last written digit, in the value's units


@dataclass
class Section:
    level: int
    heading: str
    line: int  # 1-based line of the heading
    body: str  # text up to the next heading of the same or a higher level (sub-sections included)


@dataclass
class Citation:
    text: str  # the code span as written
    line: int
    name: str  # the metric name, or the derived name (normalized)
    derived: bool
    stage: str | None = None  # the stage a "stage: name = value" prefix named; None: the default
    stage_text: str = ""  # the prefix as written
    quantity: Quantity | None = None
    problem: str = ""  # why the value cannot be used ("" when it can)


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    line: int
    heading: str = ""  # the nearest heading above it


@dataclass
class Paragraph:
    heading: str = ""
    citations: list[Citation] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # `x = y` spans whose name is no metric
    words: int = 0


def strip_comments(text: str) -> str:
    """Remove HTML comments, keeping line numbers (each comment leaves its newlines)."""
    return _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def norm(text: str) -> str:
    """Lower case, words only: 'Tiled (shared)' -> 'tiled shared', 'blocktiling_1d' -> 'blocktiling 1d'."""
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def sections(text: str) -> list[Section]:
    """Every ATX heading outside fenced code, with its body (comments already removed)."""
    lines = text.splitlines()
    heads: list[tuple[int, int, str]] = []
    fenced = False
    for k, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        m = None if fenced else _HEADING.match(line)
        if m and len(heads) < MAX_SECTIONS:
            heads.append((k, len(m.group(1)), m.group(2).strip()))
    ends = [len(lines)] * len(heads)
    open_: list[int] = []  # headings whose section is still open, outermost first
    for i, (k, level, _) in enumerate(heads):
        while open_ and heads[open_[-1]][1] >= level:
            ends[open_.pop()] = k
        open_.append(i)
    return [Section(level, title, k + 1, "\n".join(lines[k + 1:end]))
            for (k, level, title), end in zip(heads, ends)]


@functools.lru_cache(maxsize=16)
def _normalized(names: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((sid, tuple(w for w in dict.fromkeys(norm(x) for x in words) if w)) for sid, words in names)


def _key(names: dict[str, tuple[str, ...]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((sid, tuple(words)) for sid, words in names.items())


def _match_end(text: str, names: dict[str, tuple[str, ...]], at_end: bool) -> str | None:
    """The stage one of whose names ends (at_end) or starts ``text`` as whole words; longest name wins."""
    best, best_len = None, 0
    for sid, words in _normalized(_key(names)):
        for w in words:
            hit = (text == w or text.endswith(" " + w)) if at_end else (text == w or text.startswith(w + " "))
            if hit and len(w) > best_len:
                best, best_len = sid, len(w)
    return best


def heading_transition(heading: str, names: dict[str, tuple[str, ...]]) -> tuple[str, str] | None:
    """(stage before, stage after) for a heading like '1. Naive -> coalesced', else None."""
    for m in _ARROW.finditer(heading):
        left, right = norm(heading[:m.start()]), norm(heading[m.end():])
        before, after = _match_end(left, names, True), _match_end(right, names, False)
        if before and after:
            return before, after
    return None


def row_stage(cell: str, names: dict[str, tuple[str, ...]]) -> tuple[str | None, list[str]]:
    """The stage a table's kernel cell names (any of its names as whole words; longest wins).
    Returns (stage, []) or (None, the tied stages when the cell is ambiguous)."""
    text = f" {norm(cell)} "
    hits: dict[str, int] = {}
    for sid, words in _normalized(_key(names)):
        for w in words:
            if f" {w} " in text:
                hits[sid] = max(hits.get(sid, 0), len(w))
    if not hits:
        return None, []
    top = max(hits.values())
    tied = [s for s, n in hits.items() if n == top]
    return (tied[0], []) if len(tied) == 1 else (None, tied)


def parse_quantity(text: str) -> tuple[Quantity | None, str]:
    """A number with optional scale and unit -> (Quantity, '') or (None, why not)."""
    raw = text.strip()
    s = _PREFIX.sub("", raw).strip()
    m = _NUMBER.match(s)
    if not m or not any(c.isdigit() for c in m.group(0)):
        return None, f"{raw!r} is not a number" if raw else "the value is missing"
    num = m.group(0)
    mantissa = num.replace(",", "")
    value = float(mantissa)
    exp = 0
    if "e" in mantissa.lower():
        mant, e = re.split(r"[eE]", mantissa)
        exp = int(e)
    else:
        mant = mantissa
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    resolution = 0.5 * 10.0 ** (exp - decimals)
    rest = s[m.end():]
    p = _POW10.match(rest)
    if p:
        factor = 10.0 ** int(p.group(1))
        value, resolution, rest = value * factor, resolution * factor, rest[p.end():]
    rest = rest.strip()
    if rest.startswith("%"):
        return Quantity(value, "%", resolution), ""
    tok = re.match(r"[A-Za-zµμ]+", rest)
    word = tok.group(0) if tok else ""
    if word in SCALE or word.lower() in ("thousand", "million", "billion", "trillion"):
        f = SCALE.get(word, SCALE.get(word.lower(), 1.0))
        return Quantity(value * f, "", resolution * f), ""
    if word.lower() in TIME_NS and word not in ("S",):
        f = TIME_NS[word.lower()]
        return Quantity(value * f, "time", resolution * f), ""
    if word.lower() in BYTES:
        f = BYTES[word.lower()]
        return Quantity(value * f, "byte", resolution * f), ""
    return Quantity(value, word.lower(), resolution), ""


def read_citation(span: str, line: int, derived: dict[str, object],
                  stages: dict[str, tuple[str, ...]]) -> Citation | None | str:
    """One code span -> a Citation, None when it is not a `name = value` span at all, or the
    left-hand side as text when the span has that shape but names no metric (to report it)."""
    m = re.match(r"^(.*?)\s*(?:=|≈|~=)\s*(.*)$", span.strip())
    if not m or "==" in span:
        return None
    left, value_text = m.group(1).strip(), m.group(2).strip()
    stage_text = ""
    if ":" in left:
        stage_text, left = (x.strip() for x in left.split(":", 1))
    if METRIC_RE.fullmatch(left):
        cit = Citation(span, line, left, False)
    elif normalize_name(left) in derived:
        cit = Citation(span, line, normalize_name(left), True)
    elif "__" in left:
        return Citation(span, line, left, False, problem=f"`{left}` looks like an Nsight Compute metric name but "
                        "is not one (expected unit__counter.rollup, e.g. "
                        "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active)")
    else:
        return (stage_text + ": " if stage_text else "") + left if value_text else None
    if stage_text:
        cit.stage_text = stage_text
        wanted = norm(stage_text)
        cit.stage = next((sid for sid, words in stages.items() if wanted in {norm(w) for w in words}), None)
        if cit.stage is None:
            cit.problem = (f"`{stage_text}:` names no stage; write one of "
                           + ", ".join(sorted(stages)) + " before the colon")
            return cit
    q, why = parse_quantity(value_text)
    if q is None:
        cit.problem = f"the value of `{cit.name}` cannot be read: {why} (write a number, e.g. `{cit.name} = 2.5`)"
    cit.quantity = q
    return cit


def paragraph(section: Section, derived: dict[str, object], stages: dict[str, tuple[str, ...]]) -> Paragraph:
    """The citations in one section's body and the number of prose words (code spans not counted)."""
    out = Paragraph(section.heading)
    for m in _CODE_SPAN.finditer(section.body):
        if len(out.citations) >= MAX_CITATIONS:
            break
        line = section.line + 1 + section.body.count("\n", 0, m.start())
        got = read_citation(m.group(1), line, derived, stages)
        if isinstance(got, Citation):
            out.citations.append(got)
        elif isinstance(got, str):
            out.ignored.append(got)
    prose = _CODE_SPAN.sub(" ", section.body)
    prose = "\n".join(ln for ln in prose.splitlines() if not ln.lstrip().startswith("|"))
    out.words = len(_WORD.findall(prose))
    return out


def _cells(line: str) -> list[str]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", body)]


def tables(text: str) -> list[Table]:
    """Every pipe table (header row, delimiter row, body rows) outside fenced code."""
    lines = text.splitlines()
    out: list[Table] = []
    heading, fenced, k = "", False, 0
    while k < len(lines):
        line = lines[k]
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and _HEADING.match(line):
            heading = _HEADING.match(line).group(2).strip()
        elif (not fenced and line.strip().startswith("|") and k + 1 < len(lines)
              and re.fullmatch(r"\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*", lines[k + 1])):
            header = _cells(line)
            rows, j = [], k + 2
            while j < len(lines) and lines[j].strip().startswith("|"):
                rows.append(_cells(lines[j]))
                j += 1
            out.append(Table(header, rows, k + 1, heading))
            k = j
            continue
        k += 1
    return out
