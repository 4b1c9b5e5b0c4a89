"""No persisted record has an untyped or mutable-mapping field: every record grading.json, results.json and the child
protocol hold (the Grading, the Results, each mode's spec and result, each item kind's params record, and every
record they reach) declares its fields' types, without Any, object, or a dict (a bare ``dict``, ``dict[...]``, or a
dict subclass such as Counter). A mapping keyed by data (stage ids, metric names, opcodes) is a read-only
``Mapping`` that names its key and value types precisely (no Any, no object, no dict inside); the codec
(grader/records.py) writes and reads it as a JSON object."""
from __future__ import annotations

import dataclasses
import typing
from collections import Counter
from collections.abc import Mapping

from grader.children.protocol import BY_NAME
from grader.evidence.params import RECORDS, NoParams
from grader.evidence.results import Results
from grader.grading import Grading

ROOTS = (Grading, Results, NoParams, *RECORDS.values(), *(t for m in BY_NAME.values() for t in (m.spec, m.result)))


def _untyped(t: object) -> bool:
    """Any, object, a bare container, or a dict of any kind, here or anywhere inside ``t``."""
    if t is typing.Any or t is object or t in (dict, list, tuple, set, Mapping):
        return True
    origin = typing.get_origin(t)
    if isinstance(origin, type) and issubclass(origin, dict) or isinstance(t, type) and issubclass(t, dict):
        return True  # dict[...], Counter[...], a bare Counter
    return any(_untyped(a) for a in typing.get_args(t))


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
    assert {Grading, Results, *RECORDS.values()} <= found.keys() and len(found) > 50  # the walk reached them
    untyped = [f"{t.__qualname__}.{name}: {hint}" for t, fields in found.items() for name, hint in fields.items()
               if _untyped(hint)]
    assert untyped == []


def test_the_check_sees_an_untyped_field():
    @dataclasses.dataclass
    class Loose:
        values: dict[str, typing.Any]
        times: dict[str, float]
        counts: Counter[str]
        bare: Counter
        anything: object
        loose: Mapping[str, object]
        inside: Mapping[str, dict[str, int]]
        shapeless: Mapping
        maybe: list[typing.Any] | None

    hints = typing.get_type_hints(Loose)
    assert [name for name, hint in hints.items() if not _untyped(hint)] == []


def test_the_check_takes_a_precise_mapping():
    @dataclasses.dataclass
    class Typed:
        times: Mapping[str, float]
        opcodes: Mapping[str, Mapping[str, int]]
        seeds: list[int] | None
        pairs: tuple[tuple[int, int], ...]

    assert [name for name, hint in typing.get_type_hints(Typed).items() if _untyped(hint)] == []
