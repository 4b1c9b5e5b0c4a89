"""A student's YAML file, read with limits, so that no file can make the grader slow or large.

``yaml.safe_load`` is safe from code execution but not from size: 500 bytes of nested aliases
("billion laughs") describe a structure that is small in memory yet expands to gigabytes when
printed, deep nesting overflows the recursion of PyYAML's composer, and a 5,000-digit integer
makes ``int()`` raise. :func:`load_yaml` therefore

- refuses a text over ``max_bytes`` before parsing it;
- composes the node tree itself (PyYAML's ``Composer`` over libyaml's event parser, in C where
  available), counting: aliases and anchors are refused, and so is nesting deeper than
  ``max_depth`` or more than ``max_nodes`` values; each refusal is a whole-file problem with its
  line;
- replaces a value it cannot use by a :class:`Refused` marker *in place*, so that only the key
  holding it fails: a scalar over ``max_scalar`` characters, an integer or float beyond
  ``MAX_MAGNITUDE`` or not finite (``.inf``, ``.nan``, ``1e999``), a date that does not exist.

It never raises for the text's content: it returns ``(data, None)`` or ``(None, message)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.nodes import Node, ScalarNode
from yaml.resolver import Resolver

from grader.untrusted.quote import quote_code, trim

try:  # libyaml's event parser: 10x faster than the pure-Python one on a large file
    from yaml._yaml import CParser as _EventParser
except ImportError:  # PyYAML built without libyaml
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _EventParser(Reader, Scanner, Parser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)

MAX_MAGNITUDE = 1e15  # no answer a student writes is larger; keeps every later product finite
INT_TAG, FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"


@dataclass(frozen=True)
class Limits:
    max_bytes: int = 256 * 1024
    max_depth: int = 20  # mappings and lists inside each other
    max_nodes: int = 10_000  # scalars, lists and mappings in the whole file
    max_scalar: int = 20_000  # characters of one value (a free-text answer is a paragraph or two)


@dataclass(frozen=True)
class Refused:
    """A value the loader did not construct; ``text`` is the start of what the file says."""

    text: str
    why: str  # e.g. "not a finite number", "20,345 characters; at most 20,000"
    line: int

    def __str__(self) -> str:
        return self.text


class _Refusal(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line, self.message = line, message


class _BoundedLoader(Composer, _EventParser, SafeConstructor, Resolver):
    """PyYAML's composer and safe constructor over the event parser, with the limits above."""

    def __init__(self, text: str, limits: Limits) -> None:
        _EventParser.__init__(self, text)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        Composer.__init__(self)
        self.limits, self.nodes, self.depth = limits, 0, 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event: Any = self.peek_event()  # a NodeEvent: the composer asks only where a node starts
        line = event.start_mark.line + 1
        if isinstance(event, AliasEvent) or event.anchor is not None:
            raise _Refusal(line, "anchors and aliases (&name, *name) are not allowed; write each value out")
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise _Refusal(line, f"more than {self.limits.max_nodes:,} values; the file should hold one "
                                 "value per key of the template")
        if self.depth >= self.limits.max_depth:
            raise _Refusal(line, f"nested more than {self.limits.max_depth} levels deep")
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        if not isinstance(node, ScalarNode):
            return super().construct_object(node, deep)
        line = node.start_mark.line + 1
        if len(node.value) > self.limits.max_scalar:
            return Refused(trim(node.value), f"{len(node.value):,} characters; at most "
                                             f"{self.limits.max_scalar:,}", line)
        try:
            value = super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:  # int() over 4,300 digits, 2024-13-45, 1:2:...:9.5
            why = "a number too large" if node.tag in (INT_TAG, FLOAT_TAG) else f"cannot be read ({exc})"
            return Refused(trim(node.value), trim(why), line)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                return Refused(trim(node.value), "not a finite number", line)
            if abs(value) > MAX_MAGNITUDE:
                return Refused(trim(node.value), f"a number too large (at most {MAX_MAGNITUDE:.0e} in size)", line)
        return value


def _mark_line(exc: yaml.YAMLError) -> int | None:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return mark.line + 1 if mark is not None else None


def load_yaml(text: str, filename: str, limits: Limits = Limits()) -> tuple[Any, str | None]:
    """``(data, None)``, where values it could not use are :class:`Refused`, or ``(None, message)``
    naming the file, the line and what was expected. An empty text is ``({}, None)``."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > limits.max_bytes:
        return None, f"{filename} is {size:,} bytes; the limit is {limits.max_bytes:,}"
    if not text.strip():
        return {}, None
    loader = _BoundedLoader(text, limits)
    try:
        return loader.get_single_data(), None
    except _Refusal as exc:
        return None, f"{filename} line {exc.line}: {exc.message}"
    except yaml.YAMLError as exc:
        line = _mark_line(exc)
        where = f"{filename} line {line}" if line else filename
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        # the parser's words may carry the student's text (a tag, a character): shown, not rendered
        return None, f"{where}: not valid YAML ({quote_code(problem, 120)})"
    except RecursionError:  # only with a max_depth above what the interpreter's stack allows
        return None, f"{filename}: nested too deeply"
    finally:
        loader.dispose()
