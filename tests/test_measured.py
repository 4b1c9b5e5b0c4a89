"""An item's measured values (grader/model.py: Measured) in JSON: the fields that are set, in the record's order,
a hand-graded item's answers as keys of their own, and a non-finite number written null and read back as NaN."""
from __future__ import annotations

import json
import math

from grader.model import ItemResult, Measured, Status
from grader.records import from_jsonable, to_jsonable


def _item(values: Measured) -> ItemResult:
    return ItemResult("tiled", "speed", "speed", Status.FAILED, 0.0, 5.0, values=values)


def test_only_the_set_fields_are_written_in_the_records_order_and_read_back_equal():
    values = Measured(tflops=12.5, ratio=0.25, gated_by=["3.ffma"])
    assert json.dumps(to_jsonable(values)) == '{"tflops": 12.5, "ratio": 0.25, "gated_by": ["3.ffma"]}'
    assert from_jsonable(ItemResult, to_jsonable(_item(values))).values == values
    assert to_jsonable(Measured()) == {}


def test_answers_are_keys_of_their_own_and_come_back_as_answers():
    values = Measured(answers={"ex5.diagnosis": "memory bound", "ex5.no_eligible_meaning": None})
    data = to_jsonable(_item(values))
    assert data["values"] == {"ex5.diagnosis": "memory bound", "ex5.no_eligible_meaning": None}
    assert from_jsonable(ItemResult, data).values == values


def test_a_non_finite_number_is_written_null_and_read_back_as_nan():
    data = json.loads(json.dumps(to_jsonable(_item(Measured(value=math.nan, threshold=2.0)))))
    assert data["values"] == {"value": None, "threshold": 2.0}
    back = from_jsonable(ItemResult, data).values
    assert math.isnan(back.value) and back.threshold == 2.0
    assert to_jsonable(back) == data["values"]  # the same text again
