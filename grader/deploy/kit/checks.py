"""The checks of ``python -m grader check``: is a submission well-formed? No GPU, no scores.

Each check reads the submission the way the grader does, with the grader's own code, and returns
:class:`Row` records (ok / fix / skip, with detail lines):

- layout: every file the rubric names, found where the grader looks (grader/compile/locate.py);
- kernels: each stage compiled by the grader's own guarded compile (grader/compile/stage.py): the
  kernel's name and signature, and the ``<kernel>_launch`` array as the grader reads it from the
  cubin (skipped, saying so, without nvcc);
- answers: the occupancy answers parsed by grader/occupancy/answers.py (every field, or its line
  and what was expected), the plausibility rules grading applies (grader/occupancy/grading.py:
  ``implausible``), and every value with a unit as the grader reads it;
- report: the report's sections and citations read by grader/writeup/ (every citation and whether
  the grader can use it; an unknown name with the closest names the grader knows; a bonus section
  left out is information only), and its results tables checked by grading's own table checks
  (grader/writeup/run.py: ``check_tables``).
"""
from __future__ import annotations

import difflib
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from grader.compile.intake import Intake
from grader.compile.locate import Problem, locate
from grader.compile.stage import compile_stage
from grader.evidence.compile import CompileResult
from grader.evidence.rubric import Stage
from grader.evidence.tools import Tool
from grader.model import Bonus, Cause
from grader.rubric import metric_names
from grader.rubric.types import Rubric
from grader.untrusted.quote import quote_code

MAX_LINES = 12  # detail lines shown under one row; the rest are counted
MAX_CITATION_LINES = 20  # a report section's citations listed one per line
MAX_UNIT_LINES = 60  # the occupancy answers with a unit, one per line (the rubric bounds their number)


class Mark(str, Enum):
    OK = "ok"
    FIX = "FIX"  # the grader cannot use this as it is
    SKIP = "skip"  # not checked here (no nvcc, the file is missing)
    INFO = "info"  # worth knowing, nothing to fix (an optional part left out)


@dataclass
class Row:
    mark: Mark
    what: str
    detail: str
    lines: list[str] = field(default_factory=list)


def _some(lines: list[str], limit: int = MAX_LINES) -> list[str]:
    return lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])


def expected_files(rubric: Rubric) -> list[tuple[str, bool]]:
    """(path, nearby) of every file the grader reads: the stage files keep their exact place; the
    occupancy files and the report may also sit directly under the submission or one folder down."""
    files = [(st.file, False) for st in rubric.stages]
    if rubric.occupancy is not None:
        files += [(rubric.occupancy.program_file, True), (rubric.occupancy.answers_file, True)]
    if rubric.report is not None:
        files.append((rubric.report.file, True))
    return files


def _bonus_files(rubric: Rubric) -> set[str]:
    """The files of bonus stages: optional, as a bonus report section is."""
    return {st.file for st in rubric.stages if st.bonus is not Bonus.NONE}


def layout(taken: Intake, rubric: Rubric) -> list[Row]:
    rows = []
    bonus = _bonus_files(rubric)
    for rel, nearby in expected_files(rubric):
        found = locate(taken.root, rel, nearby=nearby)
        if found.path is not None:
            where = found.path.relative_to(taken.root).as_posix()
            rows.append(Row(Mark.OK, rel, "found" + (f" as {where}" if where != rel else "")))
            continue
        left_out = taken.why_missing(rel)  # a link or an oversized file the intake did not copy
        if rel in bonus and found.problem is Problem.MISSING and not left_out:
            rows.append(Row(Mark.INFO, rel, f"not there (optional, for bonus points): starter/{rel} is where to start"))
            continue
        hint = f" (starter/{rel} is where to start)" if found.problem is Problem.MISSING and not left_out else ""
        rows.append(Row(Mark.FIX, rel, (left_out or found.message) + hint))
    return rows


def _launch_words(c: CompileResult) -> str:
    assert c.launch is not None
    (bx, by), (bm, bn), smem = c.launch.block, c.launch.tile, c.launch.smem
    return f"block {bx}x{by}, tile {bm}x{bn}, {smem} B dynamic shared memory ({c.launch_source})"


def _kernel_row(st: Stage, c: CompileResult) -> Row:
    what = f"kernel {st.number} {st.id}"
    if c.ok:
        return Row(Mark.OK, what, f"`{st.kernel}` compiles; launch: {_launch_words(c)}")
    first, *rest = (c.problem or "did not compile").splitlines() or [""]
    return Row(Mark.SKIP if c.cause is not Cause.STUDENT else Mark.FIX, what, first, _some(rest))


def _named_in_source(st: Stage, path: Path) -> Row:
    """Without nvcc: only whether the file names the kernel at all."""
    what = f"kernel {st.number} {st.id}"
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return Row(Mark.FIX, what, f"{st.file} cannot be read ({exc.strerror or exc})")
    if not re.search(rf"\b{re.escape(st.kernel)}\b", text):
        return Row(Mark.FIX, what, f"{st.file} never names `{st.kernel}`: the grader launches that kernel")
    return Row(Mark.SKIP, what, f"names `{st.kernel}`; not compiled, so its signature and launch array are unchecked")


def kernels(taken: Intake, rubric: Rubric, work: Path, nvcc: Tool | None, arch_flags: list[str],
            why_not: str = "") -> list[Row]:
    """One row per stage. ``why_not``: why nothing is compiled ("" to compile with ``nvcc``). A stage
    that needs another architecture than ``arch_flags`` (the Hopper stage on a student's T4) is built
    for the one it needs, as the course's GPU builds it, and its row says it is not evaluated on this GPU."""
    from grader.compile.toolchain import newer_arch_needed, unsupported_reason

    def flags(st: Stage) -> list[str]:
        return [f"-arch={st.requires_arch}"] if unsupported_reason(st.requires_arch, arch_flags) else arch_flags

    todo: list[tuple[Stage, Path]] = []
    rows: dict[str, Row] = {}
    for st in rubric.stages:
        found = locate(taken.root, st.file)
        if found.path is None:
            optional = " (a bonus stage: optional)" if st.bonus is not Bonus.NONE else ""
            rows[st.id] = Row(Mark.SKIP, f"kernel {st.number} {st.id}", f"not compiled: {st.file} is not there{optional}")
        elif why_not:
            row = _named_in_source(st, found.path)
            rows[st.id] = row if row.mark is Mark.FIX else Row(row.mark, row.what, f"{why_not}; {row.detail}")
        else:
            todo.append((st, found.path))

    def one(st: Stage) -> CompileResult:
        folder = work / st.id
        folder.mkdir(parents=True, exist_ok=True)
        sizes = list(rubric.correctness_sizes) + [st.bench.n]
        # The student's own machine: no fence and no user switch (the student runs their own code).
        return compile_stage(st, taken.root, folder, nvcc, flags(st), rubric, sizes)

    if todo:
        with ThreadPoolExecutor(max_workers=max(1, min(len(todo), os.cpu_count() or 2))) as pool:
            for (st, _), c in zip(todo, pool.map(one, [st for st, _ in todo])):
                why = "" if c.ok or c.proc is None else newer_arch_needed(c.proc.stderr + c.proc.stdout, flags(st))
                rows[st.id] = Row(Mark.SKIP, f"kernel {st.number} {st.id}", why) if why else _kernel_row(st, c)
    for st in rubric.stages:
        if why := unsupported_reason(st.requires_arch, arch_flags):
            r = rows[st.id]
            rows[st.id] = Row(r.mark, r.what, f"{r.detail} (built for {st.requires_arch}); {why}", r.lines)
    return [rows[st.id] for st in rubric.stages]


# --------------------------------------------------------------------------------------------
# answers
# --------------------------------------------------------------------------------------------
_KEY = re.compile(r"^( *)([A-Za-z0-9_]+)\s*:")


def key_lines(text: str) -> dict[str, int]:
    """The line of each dotted key path of a block-style YAML mapping (for messages only)."""
    out: dict[str, int] = {}
    stack: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        m = _KEY.match(line)
        if not m:
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group(2)))
        out.setdefault(".".join(k for _, k in stack), number)
    return out


def answers(taken: Intake, rubric: Rubric) -> list[Row]:
    from grader.occupancy.answer_forms import with_unit
    from grader.occupancy.answers import answer_schema
    from grader.occupancy.grading import implausible
    from grader.occupancy.run import MAX_ANSWERS_BYTES, load_answers

    cfg = rubric.occupancy
    if cfg is None:
        return []
    parsed, path = load_answers(taken.root, cfg)
    what = "occupancy answers"
    if parsed.error:
        return [Row(Mark.FIX if path is not None else Mark.SKIP, what, parsed.error)]
    assert path is not None
    lines = key_lines(path.read_bytes()[:MAX_ANSWERS_BYTES].decode("utf-8", errors="replace"))
    schema = answer_schema(cfg)
    total = len(schema)
    malformed = [p for p in parsed.problems if p not in parsed.unanswered]
    odd = implausible(parsed, cfg)  # well-formed, but grading will say it cannot be meant
    shown = [f"line {lines[p]}: {msg}" if p in lines else msg
             for p, msg in [(p, parsed.problems[p]) for p in malformed] + list(odd.items())]
    if parsed.unanswered:
        shown.append(f"{len(parsed.unanswered)} fields have no answer yet: " + ", ".join(parsed.unanswered[:8])
                     + (", ..." if len(parsed.unanswered) > 8 else ""))
    shown += parsed.notes
    detail = (f"{len(parsed.values)} of {total} answers read" + (f"; {len(malformed)} malformed" if malformed else "")
              + (f"; {len(odd)} implausible" if odd else "")
              + (f"; {len(parsed.unanswered)} empty" if parsed.unanswered else ""))
    rows = [Row(Mark.FIX if parsed.problems or odd else Mark.OK, what, detail, _some(shown))]
    # Every value with a unit as the grader reads it: a bare 7168 in a KiB field shows as 7168 KiB.
    units = [f"{p}: {shown_value}" for p, f in schema.items()
             if p in parsed.values and (shown_value := with_unit(f, parsed.values[p])) is not None]
    if units:
        rows.append(Row(Mark.OK, "occupancy units", "the answers with a unit, as the grader reads them",
                        _some(units, MAX_UNIT_LINES)))
    return rows


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------
def _citation_line(c, known: frozenset[str], derived: list[str]) -> tuple[bool, str]:
    """(usable, the line that says so) for one citation."""
    head = f"line {c.line}: {quote_code(c.text)}"
    if c.problem:
        return False, f"{head}: {c.problem}"
    if c.derived or c.name in known:
        return True, f"{head}: ok"
    close = difflib.get_close_matches(c.name, sorted(known) + derived, 2, 0.6)
    ncu = metric_names.problem(c.name)
    why = "no Nsight Compute metric has this name" if ncu else "the grader does not collect this metric"
    return False, f"{head}: {why}" + (f"; closest: {', '.join(close)}" if close else "")


def report(taken: Intake, rubric: Rubric) -> list[Row]:
    from grader.writeup.hints import known_metrics
    from grader.writeup.parse import heading_transition, paragraph, sections, strip_comments
    from grader.writeup.run import check_tables, read_report, stage_names
    from grader.writeup.tables import describe

    cfg = rubric.report
    if cfg is None:
        return []
    text, problem = read_report(taken.root, cfg.file)
    if text is None:
        return [Row(Mark.SKIP, "report", f"not read: {problem}")]
    text = strip_comments(text)
    names = stage_names(rubric, cfg)
    found = {}
    for sec in sections(text):
        pair = heading_transition(sec.heading, names)
        tid = next((t.id for t in cfg.transitions if (t.before, t.after) == pair), None)
        if tid and tid not in found:
            found[tid] = paragraph(sec, cfg.derived, names)
    # What a profiled stage's metrics hold: the rubric's and the diagnosis's metrics, and what ncu
    # reports of every launch itself (launch__registers_per_thread, ...).
    known, derived = known_metrics(rubric, cfg) | metric_names.attributes(), sorted(cfg.derived)
    rows = []
    for t in cfg.transitions:
        what = f"report {t.label}"
        par = found.get(t.id)
        if par is None and t.bonus is not Bonus.NONE:  # grading gives its bonus items 0, nothing lost
            rows.append(Row(Mark.INFO, what, f"no section (optional, for bonus points): a heading such as "
                                             f"`## {t.label}` adds it"))
            continue
        if par is None:
            rows.append(Row(Mark.FIX, what, f"no section: expected a heading such as `## {t.label}`"))
            continue
        checked = [_citation_line(c, known, derived) for c in par.citations]
        lines = [line for _, line in checked]
        lines += [f"not a citation: {quote_code(x)} names no metric the grader knows" for x in par.ignored]
        good = sum(ok for ok, _ in checked)
        fix = []
        if par.words < cfg.min_words:
            fix.append(f"{par.words} words (at least {cfg.min_words} expected)")
        if not good:
            fix.append("no usable citation (write e.g. `sectors_per_request = 2.5`)")
        detail = f"{len(checked)} citations, {good} usable; {par.words} words"
        bad = fix or good < len(checked) or par.ignored
        rows.append(Row(Mark.FIX if bad else Mark.OK, what, "; ".join(fix) if fix else detail,
                        _some(lines, MAX_CITATION_LINES)))
    numbers = {i.id: i.number for i in cfg.items()}
    for spec, chk in zip(cfg.tables, check_tables(cfg, text, rubric)):  # grading's own table checks
        what, item = f"report table {spec.id}", numbers.get(f"table.{spec.id}", "")
        problems = describe(chk)
        if problems:
            rows.append(Row(Mark.FIX, what, f"{item}: {spec.title} table is incomplete or inconsistent",
                            _some(problems.splitlines())))
        else:
            rows.append(Row(Mark.OK, what, f"{item}: all {len(chk.required)} rows complete and consistent "
                                           f"(implied peak {chk.peak_gflops or 0:,.0f} GFLOP/s)"))
    return rows
