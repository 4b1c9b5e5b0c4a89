"""The one graded-item type of every rubric section, and how an item is read.

A stage's items name a ``kind`` (an entry of grader/rubric/kinds.py's registry, which also reads
a stage item) and that kind's ``params``. The occupancy and report sections grade each item by
its id; their items carry no params, and their ``number`` (``O.3``, ``R.2``) is set by the section. A stage item's
number is its stage's number and its id (``3.reuse``), given when it is scored.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

from grader.rubric.errors import RubricError
from grader.rubric.reader import Reader

# Gradescope's visibilities, the only ones results.json may carry.
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")


Knees = list[list[int | float]]  # a curve's [value, fraction of the points] pairs (grader/rubric/curve.py)
ParamValue = str | int | float | bool | list[str] | Knees


@dataclass(frozen=True)
class Params:
    """A stage item's parameters. Each kind (grader/rubric/kinds.py: its ``params``) declares the ones it takes,
    their types and its checks, which the rubric reader runs; the others stay None. The JSON form (grading.json's
    ``items[].params``) holds the given ones, in this order."""

    forbid: list[str] | None = None  # sass: opcodes the kernel must not contain
    require: list[str] | None = None  # sass: opcodes it must contain
    stage: str | None = None  # speedup_over_stage: the stage compared with
    peak: str | None = None  # fraction_of_peak: which peak
    min: int | float | None = None  # the speed kinds: the level that earns full points
    expr: str | None = None  # ncu: the expression over Nsight Compute metrics
    op: str | None = None  # ncu: the comparison
    value: int | float | str | None = None  # ncu: the threshold, a number or an expression in N
    explain: str | None = None  # ncu: what to look at next, shown when the item fails
    unit: str | None = None  # ncu: the unit values are shown in
    integrity: bool | None = None  # ncu: the criterion checks honest work
    technique: bool | None = None  # sass, ncu: the item is technique evidence
    partial_from: int | float | None = None  # a threshold item's curve (grader/rubric/curve.py): one of these three
    curve: Knees | None = None
    steps: Knees | None = None

    def get(self, name: str) -> ParamValue | None:
        """The param ``name`` (a kind's ``level_param``, ``other_stage_param``, ...), None when not given."""
        return getattr(self, name) if name in PARAM_NAMES else None

    def given(self, name: str) -> bool:
        return self.get(name) is not None

    def with_level(self, name: str, level: float) -> Params:
        """These params with the level param ``name`` (a speed kind's ``min``, an ncu item's ``value``) at ``level``."""
        if name == "min":
            return dataclasses.replace(self, min=level)
        if name == "value":
            return dataclasses.replace(self, value=level)
        raise KeyError(f"{name} is not a level param")

    def json_form(self) -> dict[str, ParamValue]:
        """The given params, in the record's order (grader/records.py writes this)."""
        return {f: v for f in PARAM_NAMES if (v := getattr(self, f)) is not None}


PARAM_NAMES = tuple(f.name for f in fields(Params))


@dataclass(frozen=True)
class Item:
    """One graded item: id, student-facing title, points, Gradescope visibility."""

    id: str
    title: str
    points: float
    visibility: str = "visible"
    kind: str | None = None  # a stage item's check (grader/rubric/kinds.py); None: the id says what is graded
    params: Params = Params()
    number: str = ""


def read_item(r: Reader, item_id: str, kind: str | None = None, number: str = "",
              params: Params | None = None) -> Item:
    """The keys every item has (title, points, visibility), from an open reader; the caller calls done()."""
    title = r.text("title")
    points = float(r.get("points", (int, float)))
    if points < 0:
        raise RubricError(r.path("points"), f"is {points:g}", "zero or more points")
    visibility = r.choice("visibility", VISIBILITIES, "visible")
    return Item(item_id, title, points, visibility, kind, params or Params(), number)


def is_technique(item: Item) -> bool:
    """Whether the item is technique evidence (it gates its stage's speed items)."""
    return bool(item.params.technique)
