"""Quote a student's text in Markdown feedback so that it is shown, never rendered.

Gradescope renders every test's ``output`` as Markdown, so a student's value written into a
message as-is could add links, images or HTML to the feedback page. :func:`quote_code` turns
the text into one inline code span: trimmed to ``limit`` characters, on one line (a line
break inside a code span could end it), control characters made visible, and fenced with a
backtick run longer than any inside the text (CommonMark's rule), so nothing in it is markup.

:func:`fence_block` does the same for many lines (a compiler's, a sanitizer's or a program's
output): one fenced code block whose fence is longer than any backtick run inside, so no line of
the text can close it. Every such output reaches feedback through one of the two.
:func:`markdown_safe` is the last guard on a whole message: Markdown that still holds raw HTML or
an image outside code is shown whole as a code block, never rendered.
"""
from __future__ import annotations

import functools
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


BLOCK_LIMIT = 4000  # characters of a tool's output shown in one block (its end: where errors are)
_BLOCK_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\u202a-\u202e\u2066-\u2069]")


def fence_block(text: object, limit: int = BLOCK_LIMIT) -> str:
    """``text`` (any number of lines) as one fenced Markdown code block, shown and never rendered.

    The fence is a backtick run longer than any in the text (at least three), so no line inside can
    close it; tabs and line breaks stay, other control characters and bidirectional overrides become
    U+FFFD; text over ``limit`` characters keeps its end (a compiler's error is at the end), said
    above the block. The block starts and ends on lines of its own (a message may go on after it)."""
    raw = (text if isinstance(text, str) else str(text)).replace("\r\n", "\n").replace("\r", "\n")
    cut = ""
    if len(raw) > limit:
        cut = f"(its last {limit:,} of {len(raw):,} characters)\n"
        raw = raw[-limit:]
    body = _BLOCK_CONTROL.sub("\ufffd", raw.strip("\n"))
    longest = max((len(m) for m in _BACKTICKS.findall(body)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"\n{cut}{fence}text\n{body}\n{fence}\n"


def markdown_safe(text: str) -> str:
    """``text`` when its Markdown renders no raw HTML and no image; else all of it as one code block.

    The grader's own messages hold neither: what does came from a student's text that no quoting
    reached, and is then shown, not rendered. Parsing is linear in the text (markdown-it-py)."""
    def unsafe(tokens: list) -> bool:
        return any(t.type in _UNSAFE_TOKENS or (t.children and unsafe(t.children)) for t in tokens)

    return fence_block(text, limit=max(len(text), 1)).strip("\n") if unsafe(_parser().parse(text)) else text


_UNSAFE_TOKENS = frozenset({"html_block", "html_inline", "image"})


@functools.lru_cache(maxsize=1)
def _parser():
    from markdown_it import MarkdownIt  # imported on first use: the children never write feedback

    return MarkdownIt("commonmark", {"html": True}).enable("table")


_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9./-]{0,199}")


def show_name(name: str) -> str:
    """A file or folder name from a submission: as it is when it is plain (letters, digits, '.', '/',
    '-'), which Markdown shows unchanged; otherwise as inline code (:func:`quote_code`)."""
    return name if _PLAIN_NAME.fullmatch(name) else quote_code(name, 200)


def show_value(value: object, limit: int = LIMIT) -> str:
    """A value from a student's file or program (any type, size or depth) as short inline code."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        # repr() of an integer over 4,300 digits raises; the size is what matters here
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
    return quote_code(value if isinstance(value, str) else _REPR.repr(value), limit)
