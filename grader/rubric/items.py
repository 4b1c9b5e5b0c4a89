"""How an item of every rubric section is read (its record, Item: grader/evidence/rubric.py, with its kind's params
record: grader/evidence/params.py).

A stage's items name a ``kind`` (an entry of grader/rubric/kinds.py's registry, which also reads
a stage item) and that kind's ``params``. The occupancy and report sections grade each item by
its id; their items carry no params (:class:`NoParams`), and their ``number`` (``O.3``, ``R.2``) is set by the section. A stage item's
number is its stage's number and its id (``3.reuse``), given when it is scored.
"""
from __future__ import annotations

from grader.evidence.params import ItemParams, NoParams
from grader.evidence.rubric import Item
from grader.rubric.errors import RubricError
from grader.rubric.reader import Reader

# Gradescope's visibilities, the only ones results.json may carry.
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")


def read_item(r: Reader, item_id: str, kind: str | None = None, number: str = "",
              params: ItemParams | None = None) -> Item:
    """The keys every item has (title, points, visibility), from an open reader; the caller calls done()."""
    title = r.text("title")
    points = float(r.get("points", (int, float)))
    if points < 0:
        raise RubricError(r.path("points"), f"is {points:g}", "zero or more points")
    visibility = r.choice("visibility", VISIBILITIES, "visible")
    return Item(item_id, title, points, visibility, kind, params or NoParams(), number)


def is_technique(item: Item) -> bool:
    """Whether the item is technique evidence (it gates its stage's speed items)."""
    return item.params.is_technique()
