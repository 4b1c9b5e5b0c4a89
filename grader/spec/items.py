"""What the rubric's non-stage sections (occupancy, report) share: their items' spec."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ItemSpec:
    """One item of a section: id, student-facing title, points, Gradescope visibility, number."""

    id: str
    title: str
    points: float
    visibility: str = "visible"
    number: str = ""
