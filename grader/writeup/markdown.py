"""The report's Markdown structure: sections, tables, code spans and prose words. Pure; linear time.

The structure comes from markdown-it-py's token stream (CommonMark with GFM tables), not from
regexes over lines: a student's report is hostile input, and line regexes with nested or
adjacent quantifiers backtrack for minutes on an 8 KB heading or a long run of backticks.
Only the rules that decide what the grader reads are enabled: the block rules (headings,
fences, tables, lists, quotes, HTML blocks), backslash escapes and code spans. Emphasis, links,
images, entities and inline HTML change nothing the grader reads and each costs time on hostile
input, so they are off (their markup stays in the text). Link reference definitions are off too,
so ``[x]: y`` lines are prose. Text longer than :data:`MAX_CHARS` is cut there; run.py refuses
larger files before that.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

MAX_CHARS = 64 * 1024  # characters read; a report is a few pages (the reference one is 7 KB)
MAX_SECTIONS = 1000  # headings read; a report has a few dozen

_MD = MarkdownIt("commonmark", {"html": True}).enable("table").disable(
    ["reference", "emphasis", "link", "image", "autolink", "html_inline", "entity", "balance_pairs",
     "fragments_join"], ignoreInvalid=True)  # 2.x (an older rich) names fragments_join text_collapse
_NEWLINES = re.compile(r"\r\n?")  # what markdown-it itself treats as a line end, so lines agree with its map
_WORD = re.compile(r"[A-Za-z]{2,}")


@dataclass
class Section:
    level: int
    heading: str
    line: int  # 1-based line of the heading
    body: str  # text up to the next heading of the same or a higher level (sub-sections included)
    # The document's tokens and the range [start, end) of this section's body in them.
    tokens: tuple[Token, ...] = field(default=(), repr=False, compare=False)
    start: int = 0
    end: int = 0


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]  # GFM pads or cuts every row to the header's number of cells
    line: int
    heading: str = ""  # the nearest heading above it


def prepare(text: str) -> str:
    """The text as the parser reads it: cut to MAX_CHARS, line ends as ``\\n``, NUL as U+FFFD."""
    return _NEWLINES.sub("\n", text[:MAX_CHARS]).replace("\0", "\ufffd")


@functools.lru_cache(maxsize=4)
def _tokens(text: str) -> tuple[Token, ...]:
    # sections() and tables() read the same report; parse it once.
    return tuple(_MD.parse(text))


def strip_comments(text: str) -> str:
    """Remove HTML comments (an unclosed one runs to the end), keeping line numbers: each leaves its newlines."""
    out, pos = [], 0
    while (start := text.find("<!--", pos)) >= 0:
        end = text.find("-->", start + 4)
        stop = len(text) if end < 0 else end + 3
        out += [text[pos:start], "\n" * text.count("\n", start, stop)]
        pos = stop
    out.append(text[pos:])
    return "".join(out)


def sections(text: str) -> list[Section]:
    """Every heading (ATX or setext, outside code), with its body (comments already removed)."""
    text = prepare(text)
    toks, lines = _tokens(text), text.split("\n")
    heads: list[tuple[int, int, int, int, str]] = []  # token index, level, line, body's first line, title
    for i, tok in enumerate(toks):
        if tok.type == "heading_open" and tok.map and len(heads) < MAX_SECTIONS:
            heads.append((i, int(tok.tag[1:]), tok.map[0], tok.map[1], toks[i + 1].content.strip()))
    ends = [(len(toks), len(lines))] * len(heads)
    open_: list[int] = []  # headings whose section is still open, outermost first
    for n, (i, level, line, _, _) in enumerate(heads):
        while open_ and heads[open_[-1]][1] >= level:
            ends[open_.pop()] = (i, line)
        open_.append(n)
    return [Section(level, title, line + 1, "\n".join(lines[first:end_line]), toks, i + 3, end_tok)
            for (i, level, line, first, title), (end_tok, end_line) in zip(heads, ends)]


def spans_and_words(section: Section) -> tuple[list[tuple[str, int]], int]:
    """The code spans in a section's body (content, 1-based line) and its number of prose words:
    words of paragraphs, lists and quotes, not of tables, headings, code or code spans."""
    spans: list[tuple[str, int]] = []
    words, in_table, in_heading = 0, 0, False
    for tok in section.tokens[section.start:section.end]:
        kind = tok.type
        if kind in ("table_open", "table_close"):
            in_table += 1 if kind == "table_open" else -1
        elif kind in ("heading_open", "heading_close"):
            in_heading = kind == "heading_open"
        elif kind == "inline":
            line = tok.map[0] + 1 if tok.map else section.line
            for child in tok.children or ():
                if child.type in ("softbreak", "hardbreak"):
                    line += 1
                elif child.type == "code_inline":
                    spans.append((child.content, line))
                elif child.type == "text" and not in_table and not in_heading:
                    words += len(_WORD.findall(child.content))
    return spans, words


def tables(text: str) -> list[Table]:
    """Every GFM pipe table (header row, delimiter row, body rows) outside code."""
    toks = _tokens(prepare(text))
    out: list[Table] = []
    heading, in_head = "", False
    table: Table | None = None
    row: list[str] | None = None
    for i, tok in enumerate(toks):
        kind = tok.type
        if kind == "heading_open":
            heading = toks[i + 1].content.strip()
        elif kind == "table_open":
            table = Table([], [], (tok.map[0] if tok.map else 0) + 1, heading)
        elif kind in ("thead_open", "thead_close"):
            in_head = kind == "thead_open"
        elif kind == "tr_open":
            row = []
        elif kind == "inline" and row is not None:
            row.append(tok.content.strip())
        elif kind == "tr_close" and table is not None and row is not None:
            if in_head:
                table.header = row
            else:
                table.rows.append(row)
            row = None
        elif kind == "table_close" and table is not None:
            out.append(table)
            table = None
    return out
