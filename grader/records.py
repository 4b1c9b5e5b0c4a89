"""Typed records to and from JSON: the one codec of grading.json, results.json and the child protocol.

On the ground floor and a runtime file (grader/children/__init__.py: RUNTIME_FILES): the grading
process and its children both use it, so what one writes the other reads back as the same record.
:func:`from_jsonable` uses dacite (a well-kept reader of nested dataclasses, optionals, enums and
tuples, pure Python, so the fenced children import it from the interpreter's site-packages as they
import NumPy) instead of a hand-written walk over type hints.
"""
from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from enum import Enum
from typing import TYPE_CHECKING, TypeVar, overload

import dacite

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")


class RecordError(ValueError):
    """JSON data that is not the record it should be: the message names the field and what was expected."""


@functools.cache
def _float_fields(cls: type) -> frozenset[str]:
    """The fields of a record typed ``float`` (or ``float | None``)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - a name only imported for type checking: no coercion then
        return frozenset()
    return frozenset(name for name, t in hints.items() if t is float or t == (float | None))


@overload
def to_jsonable(obj: DataclassInstance | Mapping[str, object]) -> dict[str, object]: ...
@overload
def to_jsonable(obj: object) -> object: ...


def to_jsonable(obj: object) -> object:
    """Turn records (and containers of them) into JSON-ready values: a record or a mapping becomes a JSON
    object, a list or tuple a list, an enum its value, NaN null; any other value is left to the caller's
    ``json.dumps`` (its ``default``).

    A whole number in a field typed float is written as a float (``20.0``), so that a record
    read back (grader/grading.py) writes the same text again.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type) and hasattr(obj, "json_form"):
        return to_jsonable(obj.json_form())  # a record that writes a form of its own (grader/model.py: Measured)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Field by field, not dataclasses.asdict: asdict rebuilds a dict subclass (a Counter a builder put in a
        # Mapping field) from (key, value) pairs, counting the pairs.
        floats = _float_fields(type(obj))
        out: dict[str, object] = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.name in floats and type(value) is int:
                value = float(value)
            out[f.name] = to_jsonable(value)
        return out
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:  # NaN is not valid JSON
        return None
    return obj


def as_float(x: object) -> object:
    """A whole number where a float is expected reads as that float (JSON writes 2.0 as 2 in other tools)."""
    return float(x) if type(x) is int else x


def _record_types(t: object, found: dict[type, None]) -> None:
    """Every record type reachable from the type ``t`` (its fields' types, inside containers and optionals)."""
    for arg in typing.get_args(t):
        _record_types(arg, found)
    if not (isinstance(t, type) and dataclasses.is_dataclass(t)) or t in found:
        return
    found[t] = None
    try:
        hints = typing.get_type_hints(t)
    except Exception:  # noqa: BLE001 - a name only imported for type checking: its records are not walked
        return
    for hint in hints.values():
        _record_types(hint, found)


_HOOKS: dict[type, dict[type, Callable[[object], object]]] = {}


def _form_hooks(cls: type) -> dict[type, Callable[[object], object]]:
    """For each record reachable from ``cls`` that writes a form of its own (``json_form``), the reader of that
    form (its ``from_json_form``: the form back to the record's fields), as dacite's type hooks."""
    if cls not in _HOOKS:
        found: dict[type, None] = {}
        _record_types(cls, found)
        _HOOKS[cls] = {t: t.from_json_form for t in found if hasattr(t, "from_json_form")}
    return _HOOKS[cls]


def from_jsonable(cls: type[T], data: object, *, strict: bool = True) -> T:
    """The record ``cls`` that ``data`` (parsed JSON) holds; raises :class:`RecordError` naming the
    field when it is not one. ``strict``: a key the record does not declare is an error too (grading.json is
    read with it off: it writes derived keys, such as a stage's ``correct``, that its records compute).

    Enum values and tuples come back from their JSON forms, a float field written by another tool as a whole
    number (2) reads back as a float, and a Mapping field as a dict."""
    if not isinstance(data, dict):
        raise RecordError(f"expected a JSON object, found {type(data).__name__}")
    config = dacite.Config(cast=[Enum, tuple], type_hooks={float: as_float, **_form_hooks(cls)},
                           strict=strict)
    try:
        hook = config.type_hooks.get(cls)  # dacite applies the hooks to fields only, so the record's own here
        return dacite.from_dict(cls, hook(data) if hook else data, config=config)
    except RecursionError:
        raise RecordError("nested too deeply") from None
    except (dacite.DaciteError, ValueError, TypeError) as exc:
        raise RecordError(str(exc)) from None
