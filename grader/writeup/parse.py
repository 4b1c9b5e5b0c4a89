"""Markdown report -> sections, metric citations, numbers and tables. Pure; never raises on text;
linear time on any text (the structure comes from :mod:`.markdown`; the few regexes here run only
on short, bounded strings and have no nested quantifiers).

The citation format (assignment/README.md, "The report"): an inline code span

    `name = value`            compared with the kernel of the stage after the transition
    `stage: name = value`     compared with that stage's kernel (e.g. the stage before)

where ``name`` is an Nsight Compute metric name exactly as the grader collects it
(``unit__counter.rollup``) or a derived name from the rubric (``shared_loads_per_warp_ffma``;
spaces or hyphens may replace the underscores), ``=`` may also be ``≈``, and ``value`` is a
number, optionally with thousands separators, an exponent (``8.59e9``, ``8.59 x 10^9``), a scale
word or letter (``8.59 G``, ``8.59 billion``) and a unit (``%``, ``ms``/``us``/``ns``, ``MB``/``GiB``).
Any other code span is ordinary code and is ignored; HTML comments are removed first. Two slips
are not ignored but become citations with a problem, so the feedback names them with what was
expected: a name one typo away from a derived name (``sectors_per_reqest = 2.5``), and a known
name with a colon instead of ``=`` (``fma_pipe_pct: 45``). A value
beyond :data:`MAX_VALUE` (``1e999``) is a problem of its one citation or cell, like text.
Student text in a problem message is quoted as inline code (:func:`grader.untrusted.quote.quote_code`).
"""
from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from grader.rubric.expr import METRIC_RE
from grader.rubric.report import normalize_name
from grader.untrusted.quote import quote_code
from grader.writeup.markdown import MAX_SECTIONS, Section, Table, sections, spans_and_words, strip_comments, tables

__all__ = ["MAX_SECTIONS", "Section", "Table", "sections", "strip_comments", "tables", "Quantity", "Citation",
           "Paragraph", "norm", "heading_transition", "row_stage", "parse_quantity", "read_citation", "paragraph"]

# "a -> b", "a → b", "a => b", "from a to b". (?<!-) makes a run of dashes match once, at its start.
_ARROW = re.compile(r"(?<!-)-+>|→|⟶|=>|⇒|(?<!\S)to(?!\S)", re.I)
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?")
_POW10 = re.compile(r"\s*[x×*·]\s*10\s*(?:\^|\*\*)\s*([-+]?\d+)")
_PREFIX = re.compile(r"^(?:~|≈|about\s+|approx\.?\s+|approximately\s+|roughly\s+)", re.I)
MAX_CITATIONS = 100  # citations read per section
MAX_HEADING = 200  # characters of a heading matched against the stage names
MAX_ARROWS = 8  # arrows tried per heading
MAX_CELL = 200  # characters of a table cell matched against the stage names
MAX_SPAN = 300  # characters of a code span read as a citation; longer ones are code
MAX_QUANTITY = 100  # characters of a value read as a number
MAX_VALUE = 1e18  # no metric, time or table cell is larger; keeps every product finite (N^3 < 1e54)
MAX_EXPONENT = 300  # |exponent| a value may write (10.0 ** 309 raises)
MAX_NAME = 80  # characters of a name compared with the derived names for a typo
TYPO_CUTOFF = 0.85  # difflib ratio above which an unknown name is a misspelt derived name

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
class Paragraph:
    heading: str = ""
    citations: list[Citation] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # `x = y` spans whose name is no metric
    words: int = 0


def norm(text: str) -> str:
    """Lower case, words only: 'Tiled (shared)' -> 'tiled shared', 'blocktiling_1d' -> 'blocktiling 1d'."""
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


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
    """(stage before, stage after) for a heading like '1. Naive -> coalesced', else None.
    Reads the first MAX_HEADING characters and tries the first MAX_ARROWS arrows."""
    heading = heading[:MAX_HEADING]
    for k, m in enumerate(_ARROW.finditer(heading)):
        if k >= MAX_ARROWS:
            break
        left, right = norm(heading[:m.start()]), norm(heading[m.end():])
        before, after = _match_end(left, names, True), _match_end(right, names, False)
        if before and after:
            return before, after
    return None


def row_stage(cell: str, names: dict[str, tuple[str, ...]]) -> tuple[str | None, list[str]]:
    """The stage a table's kernel cell names (any of its names as whole words; longest wins).
    Returns (stage, []) or (None, the tied stages when the cell is ambiguous)."""
    text = f" {norm(cell[:MAX_CELL])} "
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


def _bounded(value: float, resolution: float, raw: str) -> tuple[float, float] | str:
    """(value, resolution) or why the value is too large to use."""
    if not math.isfinite(value) or abs(value) > MAX_VALUE:
        return f"{quote_code(raw)} is not a number the grader can use: expected a number below {MAX_VALUE:.0e} in size"
    return value, resolution


def parse_quantity(text: str) -> tuple[Quantity | None, str]:
    """A number with optional scale and unit -> (Quantity, '') or (None, why not)."""
    raw = text.strip()
    if len(raw) > MAX_QUANTITY:
        return None, f"{quote_code(raw, 40)} is too long to be a number"
    s = _PREFIX.sub("", raw).strip()
    m = _NUMBER.match(s)
    if not m or not any(c.isdigit() for c in m.group(0)):
        return None, f"{quote_code(raw)} is not a number" if raw else "the value is missing"
    mantissa = m.group(0).replace(",", "")
    mant, _, e = mantissa.lower().partition("e")
    exp = int(e) if e else 0
    pow10 = _POW10.match(s, m.end())
    exp_factor = int(pow10.group(1)) if pow10 else 0
    if abs(exp) > MAX_EXPONENT or abs(exp_factor) > MAX_EXPONENT:
        return None, f"{quote_code(raw)} is not a number the grader can use: its exponent is beyond {MAX_EXPONENT}"
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    value, resolution, rest = float(mantissa), 0.5 * 10.0 ** (exp - decimals), s[m.end():]
    if pow10:
        factor = 10.0 ** exp_factor
        value, resolution, rest = value * factor, resolution * factor, s[pow10.end():]
    rest = rest.strip()
    unit, f = "", 1.0
    tok = re.match(r"[A-Za-zµμ]+", rest)
    word = tok.group(0) if tok else ""
    if rest.startswith("%"):
        unit = "%"
    elif word in SCALE or word.lower() in ("thousand", "million", "billion", "trillion"):
        f = SCALE.get(word, SCALE.get(word.lower(), 1.0))
    elif word.lower() in TIME_NS and word not in ("S",):
        unit, f = "time", TIME_NS[word.lower()]
    elif word.lower() in BYTES:
        unit, f = "byte", BYTES[word.lower()]
    else:
        unit = word.lower()
    got = _bounded(value * f, resolution * f, raw)
    if isinstance(got, str):
        return None, got
    return Quantity(got[0], unit, got[1]), ""


def read_citation(span: str, line: int, derived: Mapping[str, object],
                  stages: dict[str, tuple[str, ...]]) -> Citation | None | str:
    """One code span -> a Citation, None when it is not a `name = value` span at all, or the
    left-hand side as text when the span has that shape but names no metric (to report it)."""
    text = span.strip()
    if len(text) > MAX_SPAN or "==" in text:
        return None
    at = min((k for k in (text.find("="), text.find("≈")) if k >= 0), default=-1)
    if at < 0:
        return _colon_citation(span, line, derived)
    left, value_text = text[:at].strip(), text[at + 1:].strip()
    if left.endswith("~"):  # "~=" means "="
        left = left[:-1].rstrip()
    stage_text = ""
    if ":" in left:
        stage_text, left = (x.strip() for x in left.split(":", 1))
    if METRIC_RE.fullmatch(left):
        cit = Citation(span, line, left, False)
    elif normalize_name(left) in derived:
        cit = Citation(span, line, normalize_name(left), True)
    elif "__" in left:
        return Citation(span, line, left, False, problem=f"{quote_code(left)} looks like an Nsight Compute metric "
                        "name but is not one (expected unit__counter.rollup, e.g. "
                        "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active)")
    elif value_text and (close := _derived_typo(left, derived)):
        return Citation(span, line, left, False, problem=f"{quote_code(left)} is not a name the grader knows: did you "
                        f"mean `{close}`? (the derived names are listed in assignment/README.md, 'The report')")
    else:
        return (stage_text + ": " if stage_text else "") + left if value_text else None
    if stage_text:
        cit.stage_text = stage_text
        wanted = norm(stage_text)
        cit.stage = next((sid for sid, words in stages.items() if wanted in {norm(w) for w in words}), None)
        if cit.stage is None:
            cit.problem = (f"{quote_code(stage_text + ':')} names no stage; write one of "
                           + ", ".join(sorted(stages)) + " before the colon")
            return cit
    q, why = parse_quantity(value_text)
    if q is None:
        cit.problem = f"the value of `{cit.name}` cannot be read: {why} (write a number, e.g. `{cit.name} = 2.5`)"
    cit.quantity = q
    return cit


def _derived_typo(name: str, derived: Mapping[str, object]) -> str | None:
    """The derived name ``name`` is a misspelling of, if it is one (difflib's ratio, on short names only)."""
    if len(name) > MAX_NAME:
        return None
    close = difflib.get_close_matches(normalize_name(name), list(derived), 1, TYPO_CUTOFF)
    return close[0] if close else None


def _colon_citation(span: str, line: int, derived: Mapping[str, object]) -> Citation | None:
    """A known metric or derived name written `name: value` (a number after the colon): a citation
    with the problem said; any other span without `=` is ordinary code (None)."""
    text = span.strip()
    left, colon, value_text = text.rpartition(":")
    if not colon:
        return None
    name = left.rpartition(":")[2].strip()  # after a stage prefix, if any
    q, _ = parse_quantity(value_text)
    if q is None:
        return None
    if METRIC_RE.fullmatch(name):
        cit = Citation(span, line, name, False)
    elif normalize_name(name) in derived:
        cit = Citation(span, line, normalize_name(name), True)
    else:
        return None
    value = value_text.strip()
    cit.problem = (f"{quote_code(text)} has a colon where a citation needs `=`: write `{name} = {value}` (a colon "
                   f"only follows a stage name, as in `tiled: {name} = {value}`)")
    return cit


def paragraph(section: Section, derived: Mapping[str, object], stages: dict[str, tuple[str, ...]]) -> Paragraph:
    """The citations in one section's body and the number of prose words (code spans and tables not counted)."""
    out = Paragraph(section.heading)
    spans, out.words = spans_and_words(section)
    for content, line in spans:
        if len(out.citations) >= MAX_CITATIONS:
            break
        got = read_citation(content, line, derived, stages)
        if isinstance(got, Citation):
            out.citations.append(got)
        elif isinstance(got, str):
            out.ignored.append(got)
    return out
