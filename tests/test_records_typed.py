"""No persisted record has an untyped field: every record grading.json, results.json and the child protocol hold
(the Grading, the Results, each mode's spec and result, and every record they reach) declares its fields' types,
without Any, a bare dict, or a dict of Any. A mapping keyed by data (stage ids, metric names) names its value type."""
from __future__ import annotations

import dataclasses
import typing

from grader.children.protocol import BY_NAME
from grader.evidence.results import Results
from grader.grading import Grading

ROOTS = (Grading, Results, *(t for m in BY_NAME.values() for t in (m.spec, m.result)))


def _untyped(t: object) -> bool:
    if t is typing.Any or t is dict or t is list:
        return True
    args = typing.get_args(t)
    if typing.get_origin(t) is dict and any(a is typing.Any for a in args):
        return True
    return any(_untyped(a) for a in args)


def records() -> dict[type, dict[str, object]]:
    """Every record reachable from the persisted ones, with its fields' types."""
    found: dict[type, dict[str, object]] = {}
    todo: list[object] = list(ROOTS)
    while todo:
        t = todo.pop()
        todo += typing.get_args(t)
        if isinstance(t, type) and dataclasses.is_dataclass(t) and t not in found:
            hints = typing.get_type_hints(t)
            found[t] = {f.name: hints[f.name] for f in dataclasses.fields(t)}
            todo += found[t].values()
    return found


def test_every_persisted_records_fields_are_typed():
    found = records()
    assert {Grading, Results} <= found.keys() and len(found) > 50  # the walk reached the nested records
    untyped = [f"{t.__qualname__}.{name}: {hint}" for t, fields in found.items() for name, hint in fields.items()
               if _untyped(hint)]
    assert untyped == []


def test_the_check_sees_an_untyped_field():
    @dataclasses.dataclass
    class Loose:
        values: dict[str, typing.Any]

    assert _untyped(typing.get_type_hints(Loose)["values"]) and not _untyped(dict[str, float])
