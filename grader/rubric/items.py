"""The one graded-item type of every rubric section, and how an item is read.

A stage's items name a ``kind`` (an entry of grader/rubric/kinds.py's registry, which also reads
a stage item) and that kind's ``params``. The occupancy and report sections grade each item by
its id; their items carry no params, and their ``number`` (``O.3``, ``R.2``) is set by the section. A stage item's
number is its stage's number and its id (``3.reuse``), given when it is scored.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grader.rubric.errors import RubricError
from grader.rubric.reader import Reader

# Gradescope's visibilities, the only ones results.json may carry.
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")


@dataclass(frozen=True)
class Item:
    """One graded item: id, student-facing title, points, Gradescope visibility."""

    id: str
    title: str
    points: float
    visibility: str = "visible"
    kind: str | None = None  # a stage item's check (grader/rubric/kinds.py); None: the id says what is graded
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


def is_technique(item: Item) -> bool:
    """Whether the item is technique evidence (it gates its stage's speed items)."""
    return bool(item.params.get("technique"))
