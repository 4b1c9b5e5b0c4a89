"""Cells of the CSV files the grader writes for people to open in a spreadsheet (grades.csv, tokens.csv
and ``serve tokens list``): a student-controlled cell is shown, never run as a formula."""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# OWASP, "CSV Injection": a cell starting with one of these is a formula to a spreadsheet.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def safe_cell(value: Any) -> Any:
    """``value`` as a spreadsheet will show it and never run it: text that starts like a formula
    gets a leading single quote (OWASP's rule); numbers, and text that is just a number, are kept."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    text = str(value)
    if text.startswith(_FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


def safe_row(values: Iterable[Any]) -> list[Any]:
    """One CSV row, every cell through :func:`safe_cell`."""
    return [safe_cell(v) for v in values]
