"""Quote a student's text in Markdown feedback so that it is shown, never rendered.

Gradescope renders every test's ``output`` as Markdown, so a student's value written into a
message as-is could add links, images or HTML to the feedback page. :func:`quote_code` turns
the text into one inline code span: trimmed to ``limit`` characters, on one line (a line
break inside a code span could end it), control characters made visible, and fenced with a
backtick run longer than any inside the text (CommonMark's rule), so nothing in it is markup.
"""
from __future__ import annotations

import re
import reprlib

LIMIT = 80  # characters of a student's value quoted in a message
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\u202a-\u202e\u2066-\u2069]")
_LINE_BREAK = re.compile(r"\r\n?|\n|\t")
_BACKTICKS = re.compile(r"`+")
# reprlib cuts long strings, lists, mappings and nesting, so any value gives a short repr.
_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlong, _REPR.maxlevel = LIMIT, LIMIT, 40, 2
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4


def _one_line(text: str) -> str:
    # Line breaks and tabs become spaces; other control characters, lone surrogates and
    # bidirectional overrides (which could reorder the feedback around them) become U+FFFD.
    return _CONTROL.sub("\ufffd", _LINE_BREAK.sub(" ", text))


def trim(text: str, limit: int = LIMIT) -> str:
    """``text`` cut to ``limit`` characters, with an ellipsis when it was longer."""
    return text if len(text) <= limit else text[:max(limit - 1, 0)] + "…"


def quote_code(text: object, limit: int = LIMIT) -> str:
    """``text`` as one Markdown inline code span of at most ``limit`` characters of it.

    Longer text is cut and ends with ``…`` plus its full length outside the span. Empty text
    is shown as ``(empty)``.
    """
    raw = text if isinstance(text, str) else str(text)
    total = len(raw)
    body = _one_line(raw[:limit] if total > limit else raw)
    if not body.strip():
        return "(empty)" if not body else f"`{body}`"  # spaces only: CommonMark keeps them as they are
    longest = max((len(m) for m in _BACKTICKS.findall(body)), default=0)
    fence = "`" * (longest + 1)
    # One space each side when the text starts or ends with a backtick or a space; CommonMark
    # strips exactly one from each side again, so the text is shown as it is.
    pad = " " if body[0] in "` " or body[-1] in "` " else ""
    span = f"{fence}{pad}{body}{pad}{fence}"
    return span if total <= limit else f"{span}… ({total:,} characters)"


def show_value(value: object, limit: int = LIMIT) -> str:
    """A value from a student's file or program (any type, size or depth) as short inline code."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        # repr() of an integer over 4,300 digits raises; the size is what matters here
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
    return quote_code(value if isinstance(value, str) else _REPR.repr(value), limit)
