"""grades.csv: one row per submission, written safely for spreadsheets; and the merge of shards.

Columns: submission id, folder, names, emails, SIDs (``; `` between group members), created_at,
status, total, max_total, not_evaluated, note, one column per rubric item (``stage.item``), then the
leaderboard values.

"Not evaluated" is never written as a 0 the student earned:

- a submission the grader did not evaluate (status ``refused``, ``grader_error``, ``usage_error``,
  ``timed_out``, ``missing_folder``, ``bad_entry``, ``not_graded``) has an empty ``total`` and empty
  item cells;
- in a graded row, an item the grader could not look at (a GPU item without a GPU) is ``n/e``, and
  ``not_evaluated`` sums those items' points (0 when every automatic item was judged, so ``total`` is
  final); an item graded by hand is ``manual``, one held for a person's review ``review`` (and named
  in the note).

``max_total`` is what the current rubric gives automatically for the parts graded (``--stages``),
the same in every row, whatever rubric graded a kept row: hand-graded points are left out, as in
results.json's total.

Every cell goes through :func:`grader.untrusted.cells.safe_cell` (OWASP's rule against CSV formula injection), so a
student named ``=HYPERLINK(...)`` is text in Excel, LibreOffice and Google Sheets.
"""
from __future__ import annotations

import csv
import dataclasses
import os
from collections.abc import Iterable
from enum import Enum
from pathlib import Path

from grader.compile.intake import INTAKE_FILE
from grader.files import read_json, read_json_file
from grader.model import Bonus
from grader.records import to_jsonable
from grader.rubric.types import Rubric
from grader.untrusted.cells import safe_row
from grader.untrusted.export import Submission

STATUS_FILE = "batch_status.json"
META_COLUMNS = ["submission_id", "folder", "names", "emails", "sids", "created_at", "status",
                "total", "max_total", "not_evaluated", "note"]
NOT_EVALUATED_CELL = "n/e"
MANUAL_CELL = "manual"
REVIEW_CELL = "review"
_NOTE_ITEMS = 5  # entries named in a row's note


class RowStatus(str, Enum):
    """What happened to one submission (the CSV's status column)."""

    GRADED = "graded"              # the grader's exit 0
    GRADER_ERROR = "grader_error"  # exit 3 (the grader's own failure), or no results.json
    USAGE_ERROR = "usage_error"    # exit 2
    TIMED_OUT = "timed_out"
    REFUSED = "refused"            # intake refused the submission (links only, too big, forged zip)
    MISSING_FOLDER = "missing_folder"  # in the metadata, but the export has no folder for it
    BAD_ENTRY = "bad_entry"        # the export's entry for it is not a folder
    NOT_GRADED = "not_graded"      # not graded yet (an interrupted batch)

    def __str__(self) -> str:
        return self.value


FAILED_STATUSES = (RowStatus.GRADER_ERROR, RowStatus.USAGE_ERROR, RowStatus.TIMED_OUT)

def write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    """The one CSV writer: atomic (a temporary file renamed), every cell through safe_cell (safe_row)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(safe_row(columns))
        for row in rows:
            w.writerow(safe_row(row.get(c) for c in columns))
    os.replace(tmp, path)


def read_json_object(path: Path) -> dict[str, object]:
    """The JSON object in ``path``; empty when it is missing, not JSON or not an object."""
    data = read_json(path)
    return data if isinstance(data, dict) else {}


def _item_key(test: dict) -> str:
    extra = test.get("extra_data") or {}
    if extra.get("stage") and extra.get("item"):
        return f"{extra['stage']}.{extra['item']}"
    return str(test.get("number") or test.get("name"))


def _item_cell(test: dict) -> object:
    status = (test.get("extra_data") or {}).get("status")
    if status == "not_evaluated":
        return NOT_EVALUATED_CELL
    if status == "manual":
        return MANUAL_CELL
    if status == "review":
        return REVIEW_CELL
    return test.get("score")


def automatic_points(rubric: Rubric, parts: Iterable[str] | None = None) -> float:
    """The points the grader gives automatically for ``parts`` of ``rubric`` (all when None):
    results.json's possible total, without the hand-graded items (grader/score/hand.py)."""
    from grader.score.hand import hand_graded_items

    wanted = None if parts is None else set(parts)
    total = sum(st.max_points for st in rubric.stages
                if (wanted is None or st.id in wanted) and st.bonus is Bonus.NONE)  # bonus: outside the total
    for key in ("occupancy", "report"):
        section = getattr(rubric, key)
        if section is None or (wanted is not None and key not in wanted):
            continue
        alone = dataclasses.replace(rubric, report=None) if key == "occupancy" else \
            dataclasses.replace(rubric, occupancy=None)
        total += section.max_points - sum(i.points for i in hand_graded_items(alone))
    return round(total, 4)



def _leaderboard(folder_dir: Path, results: dict) -> list[dict]:
    if isinstance(results.get("leaderboard"), list):
        return [e for e in results["leaderboard"] if isinstance(e, dict)]
    from grader.grading import GradingFormatError, load_grading
    from grader.outputs.leaderboard import leaderboard_entries

    try:
        return [to_jsonable(e) for e in leaderboard_entries(load_grading(folder_dir / "grading.json"))]
    except GradingFormatError:  # missing, or another grader version's file: no leaderboard values for this row
        return []


def _intake_note(folder_dir: Path) -> tuple[bool, list[str]]:
    """(refused, what the child's intake left out or refused) from its intake.json."""
    data = read_json(folder_dir / INTAKE_FILE)
    if not isinstance(data, dict):
        return False, []
    if data.get("refused"):
        return True, [f"refused: {data.get('refusal')}"]
    skipped = [s for s in data.get("skipped") or [] if isinstance(s, dict) and s.get("why") != "own_output"]
    return False, [f"left out {s.get('path')}: {s.get('detail')}" for s in skipped]


LOST_PREFIX = "first item lost: "  # the note's last part, read back by class-summary.md
# How much of a failed item's message a row's note keeps (its first line).
_REASON_CHARS = 200


def first_failure(tests: list[dict]) -> str:
    """The first automatic item that earned nothing, with the first line of its message: why a row
    reads 0 (a compile error, a wrong name) in the note ("" when every item earned something)."""
    for t in tests:
        status = (t.get("extra_data") or {}).get("status", t.get("status"))
        if status == "failed" and not t.get("score") and t.get("max_score"):
            lines = [ln.strip() for ln in str(t.get("output") or "").strip().splitlines()
                     if ln.strip() and not ln.strip().startswith(("```", "~~~"))] or [""]
            # "nvcc failed (exit code 1):" says what follows: its first line is the reason
            line = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
            line = line if len(line) <= _REASON_CHARS else line[:_REASON_CHARS - 3] + "..."
            return f"{LOST_PREFIX}{t.get('number') or t.get('name')}: {line}"
    return ""


def _note(parts: list[str], last: str = "") -> str:
    """``parts`` joined, the first few of them; ``last`` (the first lost item) always shown, at the end."""
    shown = parts[:_NOTE_ITEMS] + ([f"... {len(parts) - _NOTE_ITEMS} more"] if len(parts) > _NOTE_ITEMS else [])
    return "; ".join(shown + ([last] if last else []))


# What a row of each status that was not graded means, first in its note (docs/deployment.md's statuses).
STATUS_NOTES = {
    RowStatus.TIMED_OUT: "not graded: the grading ran past the batch's --timeout and was stopped",
    RowStatus.GRADER_ERROR: "not graded: the grader failed on it (its log.txt says why); grade it again "
                            "with --retry-failed",
    RowStatus.USAGE_ERROR: "not graded: the grader refused its input (its results.json says why)",
    RowStatus.REFUSED: "not graded: the intake refused the submission",
    RowStatus.MISSING_FOLDER: "not graded: in the export's metadata, but the export has no folder for it",
    RowStatus.BAD_ENTRY: "not graded: the export's entry for it is not a submission folder",
    RowStatus.NOT_GRADED: "not graded yet: the batch stopped before it (run the batch again to grade it)",
}


def _error_line(results: dict) -> str:
    """What an error results.json (a timeout, a grader failure, bad usage) says happened, in one line:
    its staff-only test's message (the last line of a traceback), or ""."""
    errors = [t for t in results.get("tests") or []
              if isinstance(t, dict) and "autograder_error" in (t.get("tags") or [])]
    text = str(errors[-1].get("output") or "") if errors else ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("```", "~~~"))]
    if not lines:
        return ""
    line = (lines[-1] if lines[0].startswith("Traceback") else lines[0]).removeprefix("error: ")
    return line if len(line) <= _REASON_CHARS else line[:_REASON_CHARS - 3] + "..."


def csv_rows(subs: Iterable[Submission], subs_dir: Path,
             max_total: float | None = None) -> tuple[list[str], list[dict]]:
    """(columns, rows) for these submissions from their graded folders. ``max_total``: the current
    rubric's automatic points (:func:`automatic_points`); None takes each results.json's own."""
    item_cols: list[str] = []
    board_cols: list[str] = []
    rows = []
    for sub in subs:
        people = sub.submitters()
        row: dict[str, object] = {
            "submission_id": sub.submission_id, "folder": sub.folder,
            "names": "; ".join(p["name"] for p in people),
            "emails": "; ".join(p["email"] for p in people),
            "sids": "; ".join(p["sid"] for p in people),
            "created_at": sub.created_at(), "max_total": max_total,
        }
        rows.append(row)
        if sub.path is None:
            missing = RowStatus.BAD_ENTRY if sub.problems else RowStatus.MISSING_FOLDER
            row["status"] = missing
            row["note"] = _note([STATUS_NOTES[missing], *sub.problems])
            continue
        folder_dir = subs_dir / sub.folder
        read = read_json_file(folder_dir / "results.json")
        results = read.data
        if read.too_big:  # not a results.json the grader wrote: said so, never read into memory
            row["status"] = RowStatus.GRADER_ERROR
            row["note"] = _note([f"not graded: its results.json {read.problem}, more than a grading writes, "
                                 "and was not read", *sub.problems])
            continue
        if not isinstance(results, dict):
            row["status"] = RowStatus.NOT_GRADED
            row["note"] = _note([STATUS_NOTES[RowStatus.NOT_GRADED], *sub.problems])
            continue
        status = read_json_object(folder_dir / STATUS_FILE).get("status") or RowStatus.GRADED
        refused, left_out = _intake_note(folder_dir)
        row["status"] = RowStatus.REFUSED if refused and status == RowStatus.GRADED else status
        tests = [t for t in results.get("tests", []) if isinstance(t, dict)]
        if max_total is None:
            row["max_total"] = round(sum(float(t.get("max_score") or 0) for t in tests), 4)
        if row["status"] != RowStatus.GRADED:  # not evaluated: no total, no item cells (never a 0)
            why = next((note for s, note in STATUS_NOTES.items() if s == row["status"]), f"not graded ({row['status']})")
            detail = _error_line(results) if row["status"] != RowStatus.REFUSED else ""
            row["note"] = _note([why + (f": {detail}" if detail else ""), *sub.problems, *left_out])
            continue
        row["total"] = results.get("score")
        cells = {_item_key(t): (_item_cell(t), t) for t in tests if "autograder_error" not in (t.get("tags") or [])}
        row["not_evaluated"] = round(sum(float(t.get("max_score") or 0) for c, t in cells.values()
                                         if c == NOT_EVALUATED_CELL), 4)
        review = [key for key, (c, _) in cells.items() if c == REVIEW_CELL]
        lost = first_failure(tests)
        row["note"] = _note(sub.problems + left_out + ([f"held for review: {', '.join(review)}"] if review else []),
                            lost)
        for key, (cell, _) in cells.items():
            if key not in item_cols:
                item_cols.append(key)
            row[key] = cell
        for entry in _leaderboard(folder_dir, results):
            key = f"leaderboard: {entry.get('name')}"
            if key not in board_cols:
                board_cols.append(key)
            row[key] = entry.get("value")
    return META_COLUMNS + item_cols + board_cols, rows


def merge(inputs: list[Path], out: Path) -> tuple[int, list[str]]:
    """Join grades.csv files (or batch output folders holding one) into ``out``.

    Columns: the union, in order of first appearance; rows: one per folder (a later input wins, with
    a warning). Returns (rows written, warnings)."""
    columns: list[str] = []
    rows: dict[str, dict] = {}
    warnings = []
    for inp in inputs:
        path = Path(inp) / "grades.csv" if Path(inp).is_dir() else Path(inp)
        if not path.is_file():
            warnings.append(f"{inp}: no grades.csv; skipped")
            continue
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            for col in reader.fieldnames or []:
                if col not in columns:
                    columns.append(col)
            for row in reader:
                key = row.get("folder") or row.get("submission_id") or ""
                if key in rows and rows[key] != row:
                    warnings.append(f"{key}: in more than one input; the row from {path} is kept")
                rows[key] = row
    maxima = sorted({str(r["max_total"]) for r in rows.values() if r.get("max_total")})
    if len(maxima) > 1:
        warnings.append(f"max_total differs between rows ({', '.join(maxima)}): were the inputs graded "
                        "against different rubrics or stages?")
    # Items before leaderboard columns, whatever order the shards met them in.
    meta = [c for c in META_COLUMNS if c in columns]
    rest = [c for c in columns if c not in META_COLUMNS]
    columns = meta + [c for c in rest if not c.startswith("leaderboard: ")] + \
        [c for c in rest if c.startswith("leaderboard: ")]
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out, columns, [rows[k] for k in sorted(rows)])
    return len(rows), warnings
