"""Do the stage items' titles state the thresholds the items grade by? (``check-rubric``)

A title is what students read in the handout and on Gradescope, so a threshold changed from 0.80 to
0.75 under a title still saying "80% of cuBLAS SGEMM for full points" makes the handout disagree with
the grading. Only numbers a title states as a threshold are compared, each with the item's threshold
and the knees of its partial-credit curve (grader/rubric/curve.py), so "(twice a tiled kernel)" or
"4 sectors (128 bytes)" are never read as one:

- ``fraction_of_baseline`` and ``fraction_of_peak``: every ``N%`` against ``min`` x 100;
  ``fraction_of_peak`` and ``speedup_over_stage``: every ``N x`` (``Nx``, ``N times``) against ``min``;
- ``speedup_over_stage`` and ``ncu`` (a numeric ``value``): the number after "at least", "at most",
  "exactly", ... against the threshold; an ``ncu`` item in percent (``unit: "%"``): every ``N%`` too.

Each kind's entry (grader/rubric/kinds.py: ``title_percent``, ``title_times``, ``title_bounds``) says which.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from grader.evidence.params import Curved, ItemParams
from grader.evidence.rubric import Item
from grader.rubric.kinds import REGISTRY, Kind
from grader.rubric.types import Rubric

_NUM = r"(\d+(?:\.\d+)?)"
PERCENT = re.compile(_NUM + r"\s*%")
TIMES = re.compile(_NUM + r"\s*(?:x|×|times)(?![A-Za-z0-9])")
BOUND = re.compile(r"\b(?:at least|at most|exactly|no more than|no less than|more than|less than|fewer than|"
                   r"below|above|under|over|up to)\s+" + _NUM + r"(?![\d.])")


@dataclass(frozen=True)
class TitleProblem:
    path: str  # the title's key path (rubric.yaml.stages[4].items[4].title)
    message: str


def _thresholds(params: ItemParams, full: float) -> list[float]:
    """The item's threshold and the knees of its curve, in the units of ``min`` / ``value``."""
    out = [full]
    if not isinstance(params, Curved):
        return out
    if params.partial_from is not None:
        out.append(float(params.partial_from))
    for knees in (params.curve, params.steps):
        out += [float(v) for v, _ in knees or []]
    return out


def _stated(title: str, item: Item, kind: Kind) -> list[tuple[float, float, str]]:
    """(number as stated, the same in the threshold's units, how it is stated) of each threshold the title states."""
    out: list[tuple[float, float, str]] = []
    scale = kind.title_percent_scale(item)
    if scale is not None:
        out += [(float(m.group(1)), float(m.group(1)) / scale, f"{m.group(1)}%") for m in PERCENT.finditer(title)]
    if kind.title_times:
        out += [(float(m.group(1)), float(m.group(1)), f"{m.group(1)}x") for m in TIMES.finditer(title)]
    if kind.title_bounds:
        seen = {n for n, _, _ in out}
        out += [(float(m.group(1)), float(m.group(1)), m.group(0)) for m in BOUND.finditer(title)
                if float(m.group(1)) not in seen]
    return out


def title_problems(rubric: Rubric) -> list[TitleProblem]:
    """Each stage item whose title states a threshold the item does not grade by."""
    out = []
    for k, st in enumerate(rubric.stages):
        for j, it in enumerate(st.items):
            kind = REGISTRY.of(it)
            key = kind.level_param
            full = it.params.get(key) if key else None
            if isinstance(full, bool) or not isinstance(full, (int, float)):
                continue  # no threshold (compiles, sass), or an ncu value in N (the title says N^3, not a number)
            allowed = _thresholds(it.params, float(full))
            for _, value, said in _stated(it.title, it, kind):
                if not any(math.isclose(value, a, rel_tol=1e-9, abs_tol=1e-9) for a in allowed):
                    as_pct = f" ({100 * float(full):g}%)" if kind.title_percent == 100.0 else ""
                    out.append(TitleProblem(
                        f"{rubric.source}.stages[{k}].items[{j}].title",
                        f"says {said!r} but {key} is {float(full):g}{as_pct}: the title is what students read, "
                        f"so write the threshold the item grades by (title: {it.title!r})"))
    return out
