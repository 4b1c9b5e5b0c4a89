"""One mapping of rubric.yaml, read key by key: the one reader every section uses.

Each reader knows its key path (``rubric.yaml.stages[2].launch``), checks each value's type as
it is taken, and :meth:`Reader.done` rejects any key nobody took (keys starting with ``x-``
stay free for YAML anchors). Every problem is a :class:`RubricError` naming the key path, what
the value is, and what was expected.
"""
from __future__ import annotations

import difflib
from typing import Any

from grader.rubric.errors import RubricError

MISSING: Any = object()  # "no default": the key is required
Types = type | tuple[type, ...]
_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list",
          dict: "a mapping"}


def type_name(typ: Types) -> str:
    return " or ".join(dict.fromkeys(_NAMES.get(t, t.__name__) for t in (typ if isinstance(typ, tuple) else (typ,))))


def shown(value: Any) -> str:
    """A value for an error message, cut short so that a pasted blob cannot flood the terminal."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Reader:
    def __init__(self, raw: Any, where: str):
        if not isinstance(raw, dict):
            raise RubricError(where, f"is {shown(raw)}", "a mapping of keys to values")
        self.raw: dict[Any, Any] = raw
        self.where = where
        self.used: set[Any] = set()

    def path(self, key: Any) -> str:
        return f"{self.where}.{key}"

    def get(self, key: str, typ: Types, default: Any = MISSING, what: str = "") -> Any:
        """The value at ``key``, of type ``typ`` (true/false only where ``typ`` names bool)."""
        self.used.add(key)
        if key not in self.raw:
            if default is MISSING:
                raise RubricError(self.path(key), "is missing" + self._misspelt(key), what or type_name(typ))
            return default
        value = self.raw[key]
        bool_ok = typ is bool or (isinstance(typ, tuple) and bool in typ)
        if not isinstance(value, typ) or (isinstance(value, bool) and not bool_ok):
            raise RubricError(self.path(key), f"is {shown(value)} ({type(value).__name__})", what or type_name(typ))
        return value

    def _misspelt(self, key: str) -> str:
        """``; `minimum` is not a known key: did you mean `min`?`` when a key not taken yet is a near-copy of
        ``key`` or starts with it. Stricter than :meth:`done`'s match: the keys not taken yet include the
        ones read after this one (``file`` beside a missing ``title`` is no misspelling)."""
        for other in (str(k) for k in self.raw if k not in self.used and not str(k).startswith("x-")):
            if other.startswith(key) or key.startswith(other) or difflib.SequenceMatcher(None, key, other).ratio() >= 0.8:
                return f"; `{other}` is not a known key: did you mean `{key}`?"
        return ""

    def sub(self, key: str, default: Any = MISSING) -> Reader:
        """The mapping at ``key``, as a reader of its own."""
        return Reader(self.get(key, dict, default), self.path(key))

    def keys(self) -> list[Any]:
        """Every key, for a mapping whose keys are data (stall names, compute capabilities)."""
        self.used.update(self.raw)
        return [k for k in self.raw if not str(k).startswith("x-")]

    def text(self, key: str, default: Any = MISSING) -> str:
        value = self.get(key, str, default, "a non-empty string")
        if not value.strip():
            raise RubricError(self.path(key), "is empty", "a non-empty string")
        return value

    def choice(self, key: str, allowed: tuple[str, ...], default: Any = MISSING) -> str:
        value = self.get(key, str, default, "one of: " + ", ".join(allowed))
        if value not in allowed:
            close = difflib.get_close_matches(value, allowed, 1, 0.6)
            raise RubricError(self.path(key), f"is {shown(value)}" + (f"; did you mean {close[0]}?" if close else ""),
                              "one of: " + ", ".join(allowed))
        return value

    def number(self, key: str, default: Any = MISSING, lo: float = 0.0, hi: float | None = None) -> float:
        """A number from ``lo`` (inclusive) up to ``hi`` (inclusive) when given."""
        value = float(self.get(key, (int, float), default))
        if value < lo or (hi is not None and value > hi):
            raise RubricError(self.path(key), f"is {value:g}", f"a number from {lo:g} " +
                              (f"to {hi:g}" if hi is not None else "up"))
        return value

    def positive(self, key: str, typ: Types = (int, float), default: Any = MISSING) -> Any:
        value = self.get(key, typ, default)
        if value <= 0:
            raise RubricError(self.path(key), f"is {value!r}", "a positive number")
        return value

    def integer(self, key: str, default: Any = MISSING, lo: int = 1) -> int:
        value = self.get(key, int, default, f"an integer >= {lo}")
        if value < lo:
            raise RubricError(self.path(key), f"is {value!r}", f"an integer >= {lo}")
        return value

    def pair(self, key: str) -> tuple[int, int]:
        value = self.get(key, list, what="a list of two positive integers")
        if not (len(value) == 2 and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
            raise RubricError(self.path(key), f"is {shown(value)}", "a list of two positive integers")
        return (value[0], value[1])

    def pair_or_none(self, key: str, default: tuple[int, int] | None) -> tuple[int, int] | None:
        """:meth:`pair`, or None where the key is written ``null``; ``default`` where it is absent."""
        self.used.add(key)
        if key not in self.raw:
            return default
        return None if self.raw[key] is None else self.pair(key)

    def list_of(self, key: str, typ: Types, lo: float | None = None, default: Any = MISSING) -> tuple[Any, ...]:
        """A non-empty list of ``typ`` (non-empty strings; numbers at least ``lo`` when given)."""
        what = _list_what(typ, lo)
        value = self.get(key, list, default, what)

        def ok(v: Any) -> bool:
            if isinstance(v, bool) or not isinstance(v, typ):
                return False
            if isinstance(v, str):
                return bool(v.strip())
            return lo is None or (isinstance(v, (int, float)) and v >= lo)

        if not value or not all(ok(v) for v in value):
            raise RubricError(self.path(key), f"is {shown(value)}", what)
        return tuple(value)

    def done(self) -> None:
        unknown = [k for k in self.raw if k not in self.used and not str(k).startswith("x-")]
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), sorted(map(str, self.used)), 1, 0.6)
            raise RubricError(self.path(unknown[0]), "is not a known key" + (f"; did you mean {close[0]}?" if close else ""),
                              "one of: " + ", ".join(sorted(map(str, self.used))))


def _list_what(typ: Types, lo: float | None) -> str:
    plural = {int: "integers", float: "numbers", str: "strings"}
    kinds = typ if isinstance(typ, tuple) else (typ,)
    noun = "numbers" if float in kinds else " or ".join(plural.get(t, t.__name__) for t in kinds)
    return f"a non-empty list of {noun}" + (f" >= {lo:g}" if lo is not None else "")
