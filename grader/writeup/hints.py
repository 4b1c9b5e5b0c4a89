"""Hints for the report's feedback: what a cited value that does not match probably got wrong, and
which cited metric names are probably misspelt. Pure; the names come from the rubric alone, so a
hint is the same with or without a GPU."""
from __future__ import annotations

import difflib

from grader.rubric.expr import METRIC_RE
from grader.rubric.report import ReportConfig
from grader.rubric.types import Rubric
from grader.writeup.parse import Citation


def known_metrics(rubric: Rubric, cfg: ReportConfig) -> frozenset[str]:
    """The metrics the grader asks ncu for: the rubric's ncu items, the diagnosis and the derived names."""
    from grader.profile.ncu import metrics_needed

    return frozenset(metrics_needed(rubric)) | {m for d in cfg.derived.values() for m in METRIC_RE.findall(d.expr)}


def value_hint(cited: float, measured: float, resolution: float, others: dict[str, float]) -> str:
    """A guess at what went wrong with a value that does not match (cited to ``resolution``)."""
    for sid, v in others.items():
        if v and abs(cited - v) <= 0.05 * abs(v) + resolution:
            return f" That is what your {sid} kernel measured: did you quote the other kernel?"
    if not measured or not cited:
        return ""
    ratio = max(cited / measured, measured / cited)
    for factor, why in ((8, "counts grow with N^3, so cite the value at the grader's profile size."),
                        (4, "counts grow with N^2, so cite the value at the grader's profile size."),
                        (100, "is a percentage written as a fraction, or the other way round?"),
                        (1e3, "is there a unit or scale slip?"), (1e6, "is there a unit or scale slip?")):
        if abs(ratio - factor) <= 0.08 * factor:
            return f" It is off by about {factor:g}x: {why}"
    return ""


def some(lines: list[str], limit: int = 12) -> list[str]:
    return lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])


def spelling(cits: list[Citation], known: frozenset[str]) -> list[str]:
    """Raw metric names that are likely misspelt: the part before the rollup is none the grader asks ncu for,
    but close to one. Read from the rubric alone, so the hint is the same with or without a GPU."""
    bases = sorted({m.split(".", 1)[0] for m in known})
    out = []
    for c in cits:
        base = c.name.split(".", 1)[0]
        if c.derived or base in bases or len(base) > 120:
            continue
        close = difflib.get_close_matches(base, bases, 1, 0.9)
        if close:
            out.append(f"line {c.line}: check the spelling of `{c.name}`: the grader collects `{close[0]}` "
                       f"(as {', '.join(sorted(m for m in known if m.split('.', 1)[0] == close[0]))}), not `{base}`")
    return some(out)
