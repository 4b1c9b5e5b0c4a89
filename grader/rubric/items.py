"""The one graded-item type of every rubric section, and how an item is read.

A stage's items name a ``kind`` (one of :data:`KINDS`: the check that grades it) and that
kind's ``params``. The occupancy and report sections grade each item by its id; their items
carry no params, and their ``number`` (``O.3``, ``R.2``) is set by the section. A stage item's
number is its stage's number and its id (``3.reuse``), given when it is scored.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from grader.rubric.curve import Curve, check_curve, curve_of
from grader.rubric.errors import RubricError
from grader.rubric.expr import COMPARE, check_expression
from grader.rubric.peaks import PEAKS
from grader.rubric.reader import Reader, Types

# Gradescope's visibilities, the only ones results.json may carry.
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
KINDS = (
    "compiles", "correct", "no_spills", "sass",
    "fraction_of_baseline", "speedup_over_stage", "fraction_of_peak", "ncu",
)
NCU_OPS = tuple(COMPARE)
# The speed kinds: their points count only once the stage's technique items pass (see TECHNIQUE).
SPEED_KINDS = ("fraction_of_baseline", "speedup_over_stage", "fraction_of_peak")
# A threshold item's partial credit (grader/rubric/curve.py), one of these keys at most.
_CURVE: dict[str, tuple[Types, bool]] = {"partial_from": ((int, float), False), "curve": (list, False),
                                         "steps": (list, False)}
# `technique: true` on a sass or ncu item: the evidence that the stage's technique is there. The stage's
# speed items earn nothing until every technique item passes, so a fast kernel of the previous stage
# earns no speed points here; the calibration asks that the stage's textbook kernel passes it and that
# the previous stage's kernels fail it.
TECHNIQUE: dict[str, tuple[Types, bool]] = {"technique": (bool, False)}
# Parameters each stage item kind takes: name -> (type, required).
KIND_PARAMS: dict[str, dict[str, tuple[Types, bool]]] = {
    "compiles": {},
    "correct": {},
    "no_spills": {},
    "sass": {"forbid": (list, False), "require": (list, False), **TECHNIQUE},
    "fraction_of_baseline": {"min": ((int, float), True), **_CURVE},
    "speedup_over_stage": {"stage": (str, True), "min": ((int, float), True), **_CURVE},
    "fraction_of_peak": {"peak": (str, True), "min": ((int, float), True), **_CURVE},
    # An Nsight Compute criterion: `expr` over metric names (and N, the profile size),
    # compared with `value` (a number or an expression in N). See grader/rubric/expr.py.
    # `integrity: true`: the criterion checks that the work is done honestly, not that the stage moved
    # on, so the previous stage's kernel may pass it too (the calibration then asks only that the
    # reference passes). Without it, only an `==` criterion is one.
    "ncu": {"expr": (str, True), "op": (str, True), "value": ((int, float, str), True),
            "explain": (str, False), "unit": (str, False), "integrity": (bool, False), **TECHNIQUE, **_CURVE},
}


@dataclass(frozen=True)
class Item:
    """One graded item: id, student-facing title, points, Gradescope visibility."""

    id: str
    title: str
    points: float
    visibility: str = "visible"
    kind: str | None = None  # a stage item's check (KINDS); None where the id alone says what is graded
    params: dict[str, Any] = field(default_factory=dict)
    number: str = ""


def read_item(r: Reader, item_id: str, kind: str | None = None, number: str = "",
              params: dict[str, Any] | None = None) -> Item:
    """The keys every item has (title, points, visibility), from an open reader; the caller calls done()."""
    title = r.text("title")
    points = float(r.get("points", (int, float)))
    if points < 0:
        raise RubricError(r.path("points"), f"is {points:g}", "zero or more points")
    visibility = r.choice("visibility", VISIBILITIES, "visible")
    return Item(item_id, title, points, visibility, kind, params or {}, number)


def stage_item(raw: Any, where: str) -> Item:
    """One entry of a stage's ``items`` list."""
    r = Reader(raw, where)
    item_id = r.text("id")
    kind = r.choice("kind", KINDS)
    params = {}
    for name, (typ, required) in KIND_PARAMS[kind].items():
        value = r.get(name, typ) if required else r.get(name, typ, None)
        if value is not None:
            params[name] = value
    item = read_item(r, item_id, kind, params=params)
    r.done()
    if kind == "fraction_of_peak":
        r.choice("peak", PEAKS)
    if kind == "ncu":
        r.choice("op", NCU_OPS)
        for key in ("expr", "value"):
            problem = check_expression(params[key]) if isinstance(params[key], str) else ""
            if problem:
                raise RubricError(r.path(key), problem, "arithmetic over ncu metric names, numbers and N")
    if kind == "sass":
        for key in ("forbid", "require"):
            if not all(isinstance(op, str) and op.strip() for op in params.get(key, [])):
                raise RubricError(r.path(key), f"is {params[key]!r}", "a list of SASS opcodes (strings)")
        if not (params.get("forbid") or params.get("require")):
            raise RubricError(where, "has neither forbid nor require", "a list of SASS opcodes in one of them")
    if kind in SPEED_KINDS:
        check_curve(params, float(params["min"]), ">=", r.path)
    if kind == "ncu":
        value = params["value"]
        check_curve(params, None if isinstance(value, str) else float(value), params["op"], r.path)
        if params.get("technique") and params.get("integrity"):
            raise RubricError(r.path("technique"), "is given beside integrity: true",
                              "one of them: technique evidence tells a stage from the one before, integrity does not")
    return item


def is_technique(item: Item) -> bool:
    """Whether the item is technique evidence (it gates its stage's speed items)."""
    return bool(item.params.get("technique"))


def curve(item: Item) -> Curve:
    """The item's partial-credit curve (all or nothing without one); a threshold kind's only."""
    if item.kind == "ncu":
        value = item.params["value"]
        return curve_of(item.params, float(value) if not isinstance(value, str) else math.nan, item.params["op"])
    return curve_of(item.params, float(item.params["min"]))
