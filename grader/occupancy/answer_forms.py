"""The forms an answer may take (integer, number, percentage, size, time, choice, free text,
compute capability) and the parser of one value, which never raises.

:func:`parse_value` returns the value, normalised, or one message naming the field, the form
expected and what the student wrote (as inline code, trimmed: it is shown in Markdown).

Units: percentages are in percent (``29.7`` or ``"29.7%"``); sizes are in KiB (``7``,
``"7 KiB"``, ``"7 KB"``, ``"7168 B"``; KB means KiB here) and are stored in bytes; times are in
ms (``1.2``, ``"1.2 ms"``, ``"1200 us"``). No number beyond ``MAX_MAGNITUDE`` is accepted, so
every later product stays finite.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from grader.occupancy.calculator import KIB, LIMITS
from grader.untrusted.quote import quote_code
from grader.untrusted.yaml_load import MAX_MAGNITUDE, Refused

INT, NUMBER, PERCENT, SIZE, TIME, CHOICE, TEXT, CC = (
    "int", "number", "percent", "size", "time", "choice", "text", "cc")

_EXPECTED = {
    INT: "an integer",
    NUMBER: "a number",
    PERCENT: "a percentage such as 29.7 or '29.7%'",
    SIZE: "a size in KiB such as 7 or '7 KiB' (or '7168 B')",
    TIME: "a time in ms such as 1.25 or '1.25 ms' (or '1250 us')",
    TEXT: "a sentence or more of text",
    CC: "a compute capability: " + ", ".join(LIMITS),
}


@dataclass(frozen=True)
class Field:
    kind: str
    choices: dict[str, tuple[str, ...]] = field(default_factory=dict)  # canonical -> aliases
    many: bool = False  # a single value or a list of them; parsed to a tuple

    def expected(self) -> str:
        if self.kind == CHOICE:
            text = "one of: " + ", ".join(self.choices)
        else:
            text = _EXPECTED[self.kind]
        return text + (", or a list of them" if self.many else "")


MAX_NUMBER_TEXT = 64  # characters of a number with its unit; longer text is not one number


class _Bad(ValueError):
    """A value that does not have the field's form; ``why`` says more when the form alone does not."""

    def __init__(self, why: str = "") -> None:
        super().__init__(why)
        self.why = why


_NUM = r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][+-]?\d+)?|[+-]?\.\d+(?:[eE][+-]?\d+)?"
_WITH_UNIT = re.compile(rf"({_NUM})\s*([A-Za-zµ%]*)")  # on stripped text of at most MAX_NUMBER_TEXT
_SIZE_UNITS = {"": 1.0, "k": 1.0, "kb": 1.0, "kib": 1.0, "b": 1 / KIB, "byte": 1 / KIB,
               "bytes": 1 / KIB, "mb": KIB, "mib": KIB}
_TIME_UNITS = {"": 1.0, "ms": 1.0, "us": 1e-3, "µs": 1e-3, "usec": 1e-3, "s": 1e3,
               "sec": 1e3, "ns": 1e-6}


def _number_and_unit(raw: Any) -> tuple[float, str]:
    if isinstance(raw, Refused):
        raise _Bad(raw.why)
    if isinstance(raw, bool):
        raise _Bad
    value, unit = None, ""
    if isinstance(raw, (int, float)):  # the loader has refused any beyond MAX_MAGNITUDE
        value = float(raw)
    elif isinstance(raw, str):
        text = raw.strip()
        if len(text) > MAX_NUMBER_TEXT:
            raise _Bad(f"{len(text):,} characters, too long for a number")
        m = _WITH_UNIT.fullmatch(text)
        if m:
            value, unit = float(m.group(1).replace(",", "")), m.group(2).lower()
    if value is None:
        raise _Bad
    if not math.isfinite(value):
        raise _Bad("not a finite number")
    if abs(value) > MAX_MAGNITUDE:
        raise _Bad(f"a number too large (at most {MAX_MAGNITUDE:.0e} in size)")
    return value, unit


def _norm_word(raw: Any) -> str:
    return re.sub(r"[\s\-/.]+", "_", str(raw).strip().lower()).strip("_")


def _parse_one(f: Field, raw: Any) -> Any:
    if isinstance(raw, Refused):
        raise _Bad(raw.why)
    if isinstance(raw, (dict, list)):
        raise _Bad
    if f.kind == INT:
        value, unit = _number_and_unit(raw)
        if unit or not value.is_integer():
            raise _Bad
        return int(value)
    if f.kind == NUMBER:
        value, unit = _number_and_unit(raw)
        if unit:
            raise _Bad
        return value
    if f.kind == PERCENT:
        value, unit = _number_and_unit(raw)
        if unit not in ("", "%"):
            raise _Bad
        return value
    if f.kind == SIZE:
        value, unit = _number_and_unit(raw)
        if unit not in _SIZE_UNITS:
            raise _Bad
        return int(round(value * _SIZE_UNITS[unit] * KIB))
    if f.kind == TIME:
        value, unit = _number_and_unit(raw)
        if unit not in _TIME_UNITS:
            raise _Bad
        return value * _TIME_UNITS[unit]
    if f.kind == TEXT:
        if not str(raw).strip():
            raise _Bad
        return str(raw).strip()
    if f.kind == CC:
        if isinstance(raw, bool):
            raise _Bad
        text = f"{raw:.1f}" if isinstance(raw, (int, float)) else str(raw).strip().lower()
        m = re.fullmatch(r"(?:sm_|compute_)?(\d)(\d)a?", text)
        key = f"{m.group(1)}.{m.group(2)}" if m else text
        if key not in LIMITS:
            raise _Bad
        return key
    # CHOICE: YAML reads yes/no/true as booleans.
    word = ("yes" if raw else "no") if isinstance(raw, bool) else _norm_word(raw)
    for canonical, aliases in f.choices.items():
        if word == canonical or word in aliases:
            return canonical
    raise _Bad


def with_unit(f: Field, value: Any) -> str | None:
    """A parsed value as the grader reads it, in the field's unit ("7 KiB", "29.7%", "1.25 ms"), so
    that a student sees what a bare number was taken as; None for a field without a unit."""
    unit = {PERCENT: "%", SIZE: " KiB", TIME: " ms"}.get(f.kind)
    if unit is None:
        return None
    scale = KIB if f.kind == SIZE else 1  # sizes are kept in bytes
    return ", ".join(f"{v / scale:g}{unit}" for v in (value if isinstance(value, tuple) else (value,)))


def describe(raw: Any) -> str:
    """What the student wrote, for a message: bounded whatever its size, never rendered as Markdown."""
    if isinstance(raw, list):
        return f"a list of {len(raw)} value{'s' if len(raw) != 1 else ''}"
    if isinstance(raw, dict):
        keys = ", ".join(quote_code(k, 30) for k in list(raw)[:3])
        return f"a mapping (with {keys}{', ...' if len(raw) > 3 else ''})" if raw else "an empty mapping"
    if isinstance(raw, bool):
        return quote_code("true" if raw else "false")
    return quote_code(raw)


def parse_value(path: str, f: Field, raw: Any) -> tuple[Any, str | None]:
    """``(value, None)`` or ``(None, message naming the field and the expected form)``."""
    if raw is None or (isinstance(raw, str) and not raw.strip()) or raw == []:
        return None, f"{path}: no answer (expected {f.expected()})"
    items = raw if (f.many and isinstance(raw, list)) else [raw]
    if isinstance(raw, list) and not f.many:
        return None, f"{path}: expected {f.expected()}, got {describe(raw)}"
    out = []
    for one in items:
        try:
            out.append(_parse_one(f, one))
        except _Bad as bad:
            hint = f" ({bad.why})" if bad.why else ""
            if (not hint and f.kind in (INT, NUMBER, PERCENT) and isinstance(one, str)
                    and re.search(r"\d", one)):
                hint = " (write the number alone)"
            return None, f"{path}: expected {f.expected()}, got {describe(one)}{hint}"
    return (tuple(out) if f.many else out[0]), None
