"""The TA's class view beside grades.csv: class-summary.md and scores.png.

From the rows grades.csv was written from (grader/outputs/grades_csv.py: csv_rows): how many
submissions were graded and how the others ended, the score distribution (a histogram PNG, through the
what-if's plotting), each automatic item's pass rate over the graded rows (full points, part of them,
nothing, not evaluated), and each submission's first lost item with its reason (what a 0 means).
"""
from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path

from grader.outputs.grades_csv import LOST_PREFIX, META_COLUMNS, NOT_EVALUATED_CELL, RowStatus

SUMMARY_FILE = "class-summary.md"
SCORES_PNG = "scores.png"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _item_rates(columns: list[str], graded: list[dict]) -> list[str]:
    lines = ["| item | full points | part | nothing | not evaluated |", "|---|---|---|---|---|"]
    for col in columns:
        if col in META_COLUMNS or col.startswith("leaderboard: "):
            continue
        cells = [r.get(col) for r in graded if col in r]
        nums = [c for c in cells if isinstance(c, (int, float))]
        if not nums and NOT_EVALUATED_CELL not in cells:
            continue  # graded by hand or held for review in every row
        top = max(nums, default=0.0)
        full = sum(1 for c in nums if top and c >= top)
        part = sum(1 for c in nums if 0 < c < top)
        none = sum(1 for c in nums if c == 0)
        ne = sum(1 for c in cells if c == NOT_EVALUATED_CELL)
        n = len(cells) or 1
        lines.append(f"| {col} | {full} ({100 * full / n:.0f}%) | {part} | {none} | {ne} |")
    return lines


def _first_lost(row: dict) -> str:
    """The row's first lost item with its whole reason (the note's last part, whose message may hold "; "),
    or, for a row that was not graded, its note: such a row earned nothing, and never reads as perfect."""
    note = str(row.get("note") or "")
    if row.get("status") != RowStatus.GRADED:
        return note or f"not graded ({row.get('status')})"
    at = note.find(LOST_PREFIX)
    if at >= 0:
        return note[at + len(LOST_PREFIX):]
    clean = "every item earned points" if not row.get("not_evaluated") else \
        f"every item judged earned points; {row['not_evaluated']:g} points not evaluated"
    return clean + (f" ({note})" if note else "")


def write_class_summary(out: Path, columns: list[str], rows: list[dict], max_total: float | None,
                        graded_by: str = "") -> Path:
    """Write class-summary.md (and scores.png when there are graded rows) into ``out``; return the page.
    ``graded_by``: the rubric the totals are under, for the plot's legend (a re-score names its rubric)."""
    from grader.outputs.plots import score_histogram_png

    out = Path(out)
    graded = [r for r in rows if r.get("status") == RowStatus.GRADED and isinstance(r.get("total"), (int, float))]
    ended = Counter(str(r.get("status")) for r in rows)
    top = max_total if max_total is not None else max((r.get("max_total") or 0 for r in rows), default=0)
    lines = ["# Class summary", "", f"{len(rows)} submissions: "
             + ", ".join(f"{n} {status}" for status, n in sorted(ended.items())), ""]
    if graded:
        totals = [float(r["total"]) for r in graded]
        png, problem = score_histogram_png({f"under {graded_by or 'the rubric that graded them'}": totals},
                                           float(top or max(totals) or 1), out / SCORES_PNG,
                                           f"{len(graded)} graded submissions")
        lines += [f"Scores (of {top:g} automatic points): median {statistics.median(totals):g}, "
                  f"min {min(totals):g}, max {max(totals):g}.", ""]
        lines += [f"![score distribution]({SCORES_PNG})" if png else f"(no histogram: {problem})", ""]
        lines += ["## Pass rate per item", "", *_item_rates(columns, graded), ""]
    lines += ["## Each submission's first lost item", "", "| submission | status | total | first lost item, or note |",
              "|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: str(r.get("folder"))):
        lines.append(f"| {_cell(r.get('folder'))} | {_cell(r.get('status'))} | {_cell(r.get('total', ''))} | "
                     f"{_cell(_first_lost(r))} |")
    page = out / SUMMARY_FILE
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return page
