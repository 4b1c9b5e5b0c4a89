"""The report's two results tables: found, complete, and arithmetically consistent. Pure.

Each table has one row per stage it lists plus a baseline row (cuBLAS), and the columns
N | kernel | ms | GFLOP/s | % of peak | last column, where the last column is the speed-up over
the table's first stage (CUDA-core table) or the multiple of the FP32 peak (Tensor Core table).
Checks per row: every cell is a number, N is the benchmark size, GFLOP/s = 2 N^3 / time, the
% column implies the same peak on every row, and the last column is what the other cells imply.
A value passes when it is within ``arithmetic_rel`` of what the other cells imply, or within
half of its own last written digit (so 0.7 % for 0.746 % is fine).
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

from grader.grading import StageOutcome
from grader.model import Cause, Gap, Status
from grader.rubric.report import TableSpec
from grader.untrusted.quote import quote_code
from grader.writeup.parse import Quantity, Table, parse_quantity, row_stage

COLUMNS = ("n", "kernel", "ms", "gflops", "pct", "last")
COLUMN_WORDS = {"n": "N", "kernel": "kernel", "ms": "ms", "gflops": "GFLOP/s", "pct": "% of peak",
                "last": "speedup (or x FP32 ceiling)"}
BASELINE = "baseline"


def column_of(header: str) -> str | None:
    h = header.strip().lower()
    if h in ("n", "size", "n (size)", "matrix size"):
        return "n"
    if "kernel" in h or "stage" in h:
        return "kernel"
    if "gflop" in h:
        return "gflops"
    if "%" in h or "percent" in h or "pct" in h:
        return "pct"
    if any(w in h for w in ("speedup", "speed-up", "speed up", "ceiling", "multiple", "×")) or h.startswith("x "):
        return "last"
    if h in ("ms", "time", "t") or "(ms)" in h or h.startswith("ms") or h.startswith("time"):
        return "ms"
    return None


@dataclass
class Row:
    key: str  # stage id, or BASELINE
    cells: dict[str, Quantity] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


@dataclass
class TableCheck:
    spec: TableSpec
    table: Table | None = None
    problems: list[str] = field(default_factory=list)  # table-level: missing, columns
    rows: dict[str, Row] = field(default_factory=dict)  # by stage id / BASELINE, every required row
    peak_gflops: float | None = None  # the peak the % column implies

    @property
    def required(self) -> list[str]:
        return list(self.spec.stages) + [BASELINE]

    def good_rows(self) -> int:
        return sum(1 for k in self.required if k in self.rows and not self.rows[k].problems)


def _column(c: str, spec: TableSpec) -> str:
    if c == "last":
        return "speedup" if spec.last_column == "speedup" else "x FP32 ceiling"
    return COLUMN_WORDS[c]


def _label(key: str, spec: TableSpec) -> str:
    return spec.baseline if key == BASELINE else key


def _near(given: Quantity, expected: float, rel: float) -> bool:
    # Cells are at most parse.MAX_VALUE, but a time of 1e-300 ms still implies an infinite rate,
    # which would be "near" anything.
    return math.isfinite(expected) and abs(given.value - expected) <= rel * abs(expected) + given.resolution


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _gflops(r: Row) -> list[float]:
    """The row's GFLOP/s as written and as its N and time imply. The % and last columns pass when they
    agree with either, so one wrong cell is reported once, not again in every cell computed from it."""
    out = [r.cells["gflops"].value] if "gflops" in r.cells and r.cells["gflops"].value > 0 else []
    n, ms = r.cells.get("n"), r.cells.get("ms")
    if n is not None and ms is not None and ms.value > 0:
        out.append(2 * n.value**3 / (ms.value * 1e6))
    return out


def _classify(table: Table, spec: TableSpec, names: dict[str, tuple[str, ...]]) -> dict[str, list[list[str]]]:
    """Rows of ``table`` grouped by the stage (or baseline) their kernel cell names."""
    cols = [column_of(h) for h in table.header]
    if "kernel" not in cols:
        return {}
    k = cols.index("kernel")
    lookup = {sid: names.get(sid, (sid,)) for sid in spec.stages}
    lookup[BASELINE] = spec.baseline_names
    out: dict[str, list[list[str]]] = {}
    for row in table.rows:
        cell = row[k] if k < len(row) else ""
        key, _ = row_stage(cell, lookup)
        if key:
            out.setdefault(key, []).append(row)
    return out


def find_tables(tables: list[Table], specs: tuple[TableSpec, ...], names: dict[str, tuple[str, ...]]
                ) -> dict[str, Table | None]:
    """For each table spec, the parsed table with the most rows of its stages; each table used once."""
    used: set[int] = set()
    out: dict[str, Table | None] = {}
    for spec in specs:
        best, best_n = None, 0
        for i, t in enumerate(tables):
            if i in used:
                continue
            n = len([key for key in _classify(t, spec, names) if key != BASELINE])
            if n > best_n:
                best, best_n = i, n
        out[spec.id] = tables[best] if best is not None else None
        if best is not None:
            used.add(best)
    return out


def check_table(spec: TableSpec, table: Table | None, names: dict[str, tuple[str, ...]], bench_n: dict[str, int],
                rel: float, fp32_peak_gflops: float | None = None) -> TableCheck:
    """Completeness and arithmetic of one table. ``bench_n``: the benchmark N of each stage."""
    chk = TableCheck(spec, table)
    if table is None:
        chk.problems.append(f"no table with rows for the stages {', '.join(spec.stages)} was found; copy the "
                            f"'{spec.title}' table of starter/report.md and fill in every cell")
        return chk
    cols = {}
    for i, h in enumerate(table.header):
        c = column_of(h)
        if c and c not in cols:
            cols[c] = i
    missing = [COLUMN_WORDS[c] for c in COLUMNS if c not in cols]
    if missing:
        chk.problems.append(f"the table at line {table.line} has no column for {', '.join(missing)} (its headers: "
                            f"{', '.join(quote_code(h, 40) for h in table.header[:8])}); use the headers of "
                            "starter/report.md")
        return chk
    groups = _classify(table, spec, names)
    n_default = bench_n.get(spec.stages[0], 0)
    for key in chk.required:
        found = groups.get(key, [])
        row = Row(key)
        chk.rows[key] = row
        if not found:
            kernel_hint = "" if key == BASELINE else f" (name it {key} or by its kernel)"
            row.problems.append(f"no row for {_label(key, spec)}{kernel_hint}")
            continue
        cells, empty = found[0], []
        for c in ("n", "ms", "gflops", "pct", "last"):
            text = cells[cols[c]].strip() if cols[c] < len(cells) else ""
            q, why = parse_quantity(text)
            if not text:
                empty.append(_column(c, spec))
            elif q is None:
                row.problems.append(f"{_column(c, spec)}: {why}")
            else:
                row.cells[c] = q
        if empty:
            row.problems.insert(0, ("every cell is empty" if len(empty) == 5 else "empty cells") + ": "
                                + ", ".join(empty))
        want_n = bench_n.get(key, n_default)
        if "n" in row.cells and want_n and row.cells["n"].value != want_n:
            row.problems.append(f"N is {row.cells['n'].value:g}; the table reports the benchmark size N = {want_n}")
        if "n" in row.cells and "ms" in row.cells and "gflops" in row.cells and row.cells["ms"].value > 0:
            n, ms = row.cells["n"].value, row.cells["ms"].value
            expected = 2 * n**3 / (ms * 1e6)
            if not _near(row.cells["gflops"], expected, rel):
                row.problems.append(f"GFLOP/s is {_fmt(row.cells['gflops'].value)}, but 2 N^3 / time with N = {n:g} "
                                    f"and {ms:g} ms gives {_fmt(expected)}"
                                    + _thousand_hint(row.cells["gflops"].value, expected, ms, rel))
    _check_pct(chk, rel)
    _check_last(chk, rel, fp32_peak_gflops)
    return chk


def _off_by_1000(small: float, large: float, rel: float) -> bool:
    """Whether ``large`` is 1000 times ``small``, within ``rel`` (a unit's prefix, not arithmetic)."""
    return small > 0 and abs(large / (1000 * small) - 1) <= max(rel, 0.02)


def _thousand_hint(gflops: float, expected: float, ms: float, rel: float) -> str:
    """A unit hint when the GFLOP/s and the time disagree by a factor of 1000: either the time was written
    in seconds, or the rate in TFLOP/s (both give the same ratio: the hint names both, with what to write)."""
    if not _off_by_1000(gflops, expected, rel):
        return ""
    return (f"; a factor of 1000 apart, which is a unit: a time in seconds where the column is ms (then write "
            f"{ms * 1000:g}), or TFLOP/s where it is GFLOP/s (then write {_fmt(gflops * 1000)})")


def _check_pct(chk: TableCheck, rel: float) -> None:
    rows = [r for r in chk.rows.values() if "pct" in r.cells and _gflops(r) and r.cells["pct"].value > 0]
    if not rows:
        return
    # One peak per table: the median of what each row implies, so one wrong row does not move it.
    chk.peak_gflops = statistics.median(_gflops(r)[0] / (r.cells["pct"].value / 100) for r in rows)
    for r in rows:
        if not any(_near(r.cells["pct"], 100 * g / chk.peak_gflops, rel) for g in _gflops(r)):
            expected = 100 * _gflops(r)[-1] / chk.peak_gflops
            r.problems.append(f"% of peak is {r.cells['pct'].value:g}, but the other rows use a peak of "
                              f"{_fmt(chk.peak_gflops)} GFLOP/s, which gives {expected:.3g}% (one peak per table)")


def _check_last(chk: TableCheck, rel: float, fp32_peak_gflops: float | None) -> None:
    spec = chk.spec
    if spec.last_column == "speedup":
        first = chk.rows.get(spec.stages[0])
        bases = _gflops(first) if first is not None else []
        what = f"this row's GFLOP/s divided by the {spec.stages[0]} row's"
    else:
        bases = [fp32_peak_gflops] if fp32_peak_gflops else []
        what = f"GFLOP/s divided by the FP32 peak of the CUDA-core table ({_fmt(fp32_peak_gflops or 0)} GFLOP/s)"
        if fp32_peak_gflops and chk.peak_gflops and fp32_peak_gflops / 1.5 <= chk.peak_gflops < 1.5 * fp32_peak_gflops:
            chk.problems.append(f"the % column implies a peak of {_fmt(chk.peak_gflops)} GFLOP/s, about the FP32 "
                                "CUDA-core peak: Tensor Core kernels are measured against the Tensor Core peak "
                                "(the handout gives both)")
        elif fp32_peak_gflops and chk.peak_gflops and chk.peak_gflops < fp32_peak_gflops / 1.5:
            # A tenth of the FP32 peak is no GPU's Tensor Core peak: the rates were written in another unit.
            unit = " (are the GFLOP/s cells in TFLOP/s?)" if chk.peak_gflops * 10 < fp32_peak_gflops else ""
            chk.problems.append(f"the % column implies a peak of {_fmt(chk.peak_gflops)} GFLOP/s, below even the "
                                f"FP32 CUDA-core peak ({_fmt(fp32_peak_gflops)} GFLOP/s){unit}: the Tensor Core "
                                "peak is far above both (the handout gives it)")
    if not bases:
        return
    for r in chk.rows.values():
        gs = _gflops(r)
        if "last" in r.cells and gs and not any(_near(r.cells["last"], g / b, rel) for g in gs for b in bases):
            r.problems.append(f"the last column is {r.cells['last'].value:g}, but {what} gives "
                              f"{gs[-1] / bases[-1]:.3g}")


def describe(chk: TableCheck) -> str:
    """Every problem of one table, one per line; '' when there is none."""
    lines = list(chk.problems)
    for key in chk.required:
        row = chk.rows.get(key)
        if row and row.problems:
            lines.append(f"row {_label(key, chk.spec)}: " + "; ".join(row.problems))
    return "\n".join(lines)


def check_times(checks: list[TableCheck], outcomes: Mapping[str, StageOutcome], time_rel: float) -> tuple[Status, float, str, bool]:
    """(status, fraction, message, needs_gpu) of the times item: each row's ms against the grader's median
    for the same kernel (or the baseline's), within ``time_rel``. When no row could be compared the causes
    of the gaps decide: not evaluated when the grader could not time a row (``needs_gpu`` when that is for
    want of a GPU), failed when only the student's stages gave nothing to time."""
    compared: list[str] = []
    bad: list[str] = []
    skipped: dict[Gap, list[str]] = {}  # why a row was not compared -> its labels, in table order
    for chk in checks:
        for key, row in chk.rows.items():
            if "ms" not in row.cells:
                continue
            sids = chk.spec.stages if key == BASELINE else (key,)
            timed = [t for s in sids if s in outcomes and (t := outcomes[s].timing) is not None]
            if not timed:
                o = outcomes.get(key) if key != BASELINE else next((outcomes[s] for s in sids if s in outcomes), None)
                if o is None:  # left out of this run (--stages): counted against the table
                    gap = Gap(Cause.STUDENT, "not graded in this run")
                elif o.gpu_reason:  # set by the pipeline exactly when the run has no usable GPU
                    gap = Gap(Cause.NO_GPU, f"not evaluated: {o.gpu_reason}")
                else:
                    gap = Gap(Cause.STUDENT, "not timed (the stage did not compile or is not correct)")
                skipped.setdefault(gap, []).append(chk.spec.baseline if key == BASELINE else key)
                continue
            tm = timed[0]
            grader_ms = tm.baseline_median_ms if key == BASELINE else tm.median_ms
            label = chk.spec.baseline if key == BASELINE else key
            ms = row.cells["ms"].value
            line = f"{label}: {ms:g} ms in the table, {grader_ms:.4g} ms measured by the grader at N={tm.n}"
            (compared if abs(ms - grader_ms) <= time_rel * grader_ms else bad).append(line)
    if bad:
        return Status.FAILED, 0.0, (f"times more than {100 * time_rel:g}% away from the grader's:\n" + "\n".join(bad)
                             + "\nMeasure again on the grading GPU (the summary table of run_local.py) and "
                             "update the table."), False
    if compared:
        return Status.PASSED, 1.0, "times agree with the grader's: " + "; ".join(compared), False
    listed = "; ".join(f"{', '.join(labels)}: {gap.message}" for gap, labels in skipped.items())
    graders = [gap for gap in skipped if gap.cause is not Cause.STUDENT]
    if graders:
        return (Status.NOT_EVALUATED, 0.0, f"not evaluated: the grader has no timings to compare with ({listed})",
                any(gap.cause is Cause.NO_GPU for gap in graders))
    return Status.FAILED, 0.0, ("no row could be compared: " + (listed if skipped else "the tables have no times; fill in "
                                                                                 "the ms column")), False
