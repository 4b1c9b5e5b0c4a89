"""Which rubric items are graded by hand: the free-text occupancy answers and the report's reasoning.

Their verdict is always :attr:`grader.model.Status.MANUAL`, and their points are course staff's:
on Gradescope they are manually graded questions of the assignment's outline, outside the
autograder's total (grader/outputs/results.py; docs/deployment.md, "The hand-graded part").
This list is what the instructor puts in that outline.
"""
from __future__ import annotations

from grader.evidence.rubric import Item
from grader.rubric.occupancy import HAND_GRADED
from grader.rubric.types import Rubric


def hand_graded_items(rubric: Rubric) -> list[Item]:
    """The hand-graded items of ``rubric``, numbered as results.json numbers them, in rubric order."""
    out: list[Item] = []
    if rubric.occupancy is not None:
        out += [spec for item_id, spec in rubric.occupancy.items.items() if item_id in HAND_GRADED]
    if rubric.report is not None:
        out += [spec for spec in rubric.report.items() if spec.kind == "reasoning"]
    return out
