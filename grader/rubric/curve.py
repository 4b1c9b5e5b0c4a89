"""How a threshold item's points grow with its measured value: the item's curve (pure).

A threshold item (a speed kind, or an ``ncu`` item) earns its full points at its threshold (``min``,
or an ncu item's ``value``) and, declared in rubric.yaml, part of them below it:

* ``partial_from: Z``: a linear ramp, nothing at ``Z``, full points at the threshold;
* ``curve: [[V1, F1], [V2, F2], ...]``: a piecewise-linear ramp through those knees (value, fraction
  of the points), nothing before the first knee (unless its fraction is above 0), full points at the
  threshold; continuous, so a speed just either side of a knee earns almost the same;
* ``steps: [[V1, F1], ...]``: a staircase: the fraction of the last step reached, full points at the
  threshold.

For an item whose value must be small (``op: "<="`` or ``"<"``) the knees' values fall towards the
threshold instead of rising. At most one of the three is given; with none the item is all or nothing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from grader.evidence.params import CURVE_KEYS, Curved
from grader.rubric.errors import RubricError


@dataclass(frozen=True)
class Curve:
    """``knees``: (value, fraction) below the threshold, in the order a better kernel meets them;
    ``full``: the threshold; ``higher``: whether larger values are better; ``steps``: staircase."""

    knees: tuple[tuple[float, float], ...]
    full: float
    higher: bool = True
    steps: bool = False

    def _beyond(self, value: float, level: float) -> bool:
        """``value`` reaches ``level`` (at least it, in the item's direction)."""
        return value >= level if self.higher else value <= level

    def fraction(self, value: float) -> float:
        """The fraction of the points ``value`` earns (1.0 at or past the threshold)."""
        if math.isnan(value):
            return 0.0
        if self._beyond(value, self.full):
            return 1.0
        earned = 0.0
        points = [*self.knees, (self.full, 1.0)]
        for k, (level, frac) in enumerate(points[:-1]):
            if not self._beyond(value, level):
                break
            if self.steps:
                earned = frac
                continue
            nxt_level, nxt_frac = points[k + 1]
            span = nxt_level - level
            earned = frac + (nxt_frac - frac) * ((value - level) / span if span else 1.0)
        return max(0.0, min(1.0, earned))

    def needed_for(self, fraction: float) -> float | None:
        """The least value (in the item's direction) that earns at least ``fraction``; None if none."""
        if fraction <= 0:
            return None
        points = [*self.knees, (self.full, 1.0)]
        prev_level, prev_frac = None, 0.0
        for level, frac in points:
            if frac >= fraction:
                if self.steps or prev_level is None or frac == prev_frac:
                    return level
                return prev_level + (level - prev_level) * (fraction - prev_frac) / (frac - prev_frac)
            prev_level, prev_frac = level, frac
        return None

    def note(self, points: float, value: float, show) -> str:
        """For feedback: what ``value`` earned of ``points`` and what the next points need ("" without a
        curve or at full points); ``show`` formats a value in the item's unit."""
        frac = self.fraction(value)
        if not self.knees or frac >= 1.0 or points <= 0:
            return ""
        earned = round(points * frac, 2)
        step = 1.0 if points >= 2 else points / 2
        target = min(points, (int(earned / step + 1e-9) + 1) * step)
        need = self.needed_for(target / points)
        nxt = f"; {target:g} points need {show(need)}" if need is not None and target < points else ""
        return f"; on the curve this earns {earned:g} of {points:g} points{nxt} ({self.words(show)})"

    def words(self, show) -> str:
        """The curve in words for the handout and feedback; ``show`` formats one value."""
        if not self.knees:
            return ""
        kind = "in steps" if self.steps else "on a linear ramp"
        parts = [f"{100 * f:g}% of the points at {show(v)}" for v, f in self.knees]
        return f"partial credit {kind}: {', '.join(parts)}, full points at {show(self.full)}"


def curve_of(params: Curved, full: float, op: str = ">=") -> Curve:
    """The item's curve from its validated params (all or nothing when it declares none)."""
    higher = op in (">=", ">")
    if params.partial_from is not None:
        return Curve(((float(params.partial_from), 0.0),), full, higher)
    for knees, steps in ((params.curve, False), (params.steps, True)):
        if knees is not None:
            return Curve(tuple((float(v), float(f)) for v, f in knees), full, higher, steps)
    return Curve((), full, higher)


def check_curve(params: Curved, full: float | None, op: str, where) -> None:
    """Validate an item's curve keys; ``where(key)`` names the key's path. ``full`` None: the threshold
    is an expression (an ncu item's ``value`` in N), and no curve may be declared against it."""
    given = [k for k in CURVE_KEYS if params.given(k)]
    if not given:
        return
    if len(given) > 1:
        raise RubricError(where(given[1]), f"is given beside {given[0]}", "at most one of " + ", ".join(CURVE_KEYS))
    key = given[0]
    if op not in (">=", ">", "<=", "<"):
        raise RubricError(where(key), f"is given for op {op!r}", "a curve only on items compared with >=, >, <= or <")
    if full is None:
        raise RubricError(where(key), "is given for a threshold that is an expression",
                          "a curve only where the threshold is a number")
    higher = op in (">=", ">")
    toward = "rising" if higher else "falling"
    if key == "partial_from":
        z = params.partial_from
        assert z is not None  # given
        if not (z < full if higher else z > full) or (higher and z < 0):
            raise RubricError(where(key), f"is {z!r}", (f"a number from 0 up to (not including) min = {full:g}"
                                                        if higher else f"a number above the threshold {full:g}"))
        return
    knees = params.get(key)
    expected = (f"a list of [value, fraction] pairs, values {toward} towards the threshold {full:g} (not reaching "
                "it), fractions from 0 to 1 not falling")
    if not isinstance(knees, list) or not knees:
        raise RubricError(where(key), f"is {knees!r}", expected)
    prev_v, prev_f = None, 0.0
    for k, knee in enumerate(knees):
        ok = (isinstance(knee, list) and len(knee) == 2
              and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in knee))
        if ok:
            v, f = float(knee[0]), float(knee[1])
            ok = (0.0 <= f <= 1.0 and f >= prev_f and (v < full if higher else v > full)
                  and (prev_v is None or (v > prev_v if higher else v < prev_v)))
        if not ok:
            raise RubricError(f"{where(key)}[{k}]", f"is {knee!r}", expected)
        prev_v, prev_f = v, f
