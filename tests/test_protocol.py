"""The child protocol's records: a child's RESULT.json is read back into its mode's result record, and
whatever else a child wrote there (student code runs in most of them) is a typed "no result" with the
reason, never an exception."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.children.protocol import BY_NAME, MODES
from grader.evidence.protocol import StageResult
from grader.records import to_jsonable
from grader.sandbox.launch import MAX_RESULT_BYTES, read_result

# A result every mode's record accepts as its first field's value is not needed: each hostile file
# below is wrong for every mode, whatever its fields.
DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE = {
    "not an object": ("[1, 2, 3]", "expected a JSON object, found list"),
    "a string": ('"ok"', "expected a JSON object, found str"),
    "not JSON": ("{\"ok\": tru", "unreadable"),
    "nested too deeply": ('{"x": ' + DEEP + "}", "nested too deeply"),
    "an extra key": ('{"no_such_field_anywhere": 1}', "no_such_field_anywhere"),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_result_is_a_typed_no_result_for_every_mode(tmp_path: Path, mode: str, case: str):
    text, reason = HOSTILE[case]
    path = tmp_path / "result.json"
    path.write_text(text)
    got, why = read_result(path, BY_NAME[mode].result)
    assert got is None and reason in why, (mode, case, why)


@pytest.mark.parametrize("mode", MODES)
def test_wrong_types_and_a_huge_or_linked_file_are_no_result(tmp_path: Path, mode: str):
    cls = BY_NAME[mode].result
    path = tmp_path / "result.json"
    # Every result record has a first field; a list of lists fits none of their types (bool, str, dict).
    first = next(iter(cls.__dataclass_fields__))
    path.write_text(json.dumps({first: [[1]]}))
    got, why = read_result(path, cls)
    assert got is None and first in why, why
    path.write_text(" " * (MAX_RESULT_BYTES + 1))
    got, why = read_result(path, cls)
    assert got is None and "over" in why
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    path.unlink()
    path.symlink_to(target)
    got, why = read_result(path, cls)
    assert got is None and "not a regular file" in why
    path.unlink()
    assert read_result(path, cls) == (None, "the child wrote no result")


def test_a_result_round_trips_and_keeps_its_json_keys(tmp_path: Path):
    data = {"prepared": True, "loaded": True, "correctness": [{"n": 16, "seed": 3, "file": "c_16.npy", "wall_ms": 1}],
            "bench": None, "error": None, "traceback": None, "stopped": None, "attributes": {}, "times": {"a": 1.5}}
    path = tmp_path / "stage_result.json"
    path.write_text(json.dumps(data))
    got, why = read_result(path, StageResult)
    assert why == "" and got is not None and got.correctness[0].wall_ms == 1.0 and got.loaded
    assert to_jsonable(got) == {**data, "correctness": [{**data["correctness"][0], "wall_ms": 1.0}]}
    path.write_text(json.dumps({**data, "loaded": "yes"}))  # a string where a bool belongs
    got, why = read_result(path, StageResult)
    assert got is None and "loaded" in why
