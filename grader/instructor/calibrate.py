"""Calibrate the rubric's thresholds on the current GPU (instructors: ``python -m grader calibrate``).

Grades three populations REPEATS times each, interleaved, and writes ``calibration.md`` and
``calibration.json``:

* the reference (``solutions/``);
* the textbook population (``tests/submissions/textbook/course``: each stage's plainest faithful
  kernel, written as the handout teaches it), when given;
* the predecessors: the one-stage-shifted submission (grader/instructor/shifted.py) of each of the
  two, so that every stage holds the previous stage's reference and the previous stage's textbook kernel.

For every item that has a threshold or is technique evidence, the report shows the value each
population measured (min / median / max over the repeats), what it earned, the margin and a verdict
by the item's role (the rule every default criterion must meet):

* *technique* items (``technique: true``, the SASS and ncu evidence of the stage's technique): the
  reference passes every repeat with at least ``MIN_MARGIN``, the textbook kernel passes every
  repeat, and both predecessors fail every repeat;
* *speed* items (the speed kinds of grader/rubric/kinds.py, scored on their curve and only once the technique
  items pass): the reference earns all their points with ``MIN_MARGIN`` over the full level, and the
  textbook kernel earns at least half of them in every repeat;
* *integrity* items (``op: "=="`` or ``integrity: true``): the reference passes every repeat;
* any other threshold item: the reference passes every repeat with ``MIN_MARGIN``; the other values
  are shown for information.

Margin: ``(reference - threshold) / |threshold|`` for ``>=`` and ``>`` (the worst, i.e.
smallest, reference value), ``(threshold - reference) / |threshold|`` for ``<=`` and ``<``
(the largest). It also prints, and writes into both files, the measured reference time of each
stage's benchmark, from which the stage's time limit derives (grader/instructor/stage_limits.py).

The report logic (:func:`calibration_rows`, :func:`render_markdown`) is pure and works on
any objects shaped like grader.pipeline.Grading (``.items``, ``.seconds``, ``.env``).
"""
from __future__ import annotations

import datetime as _dt
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from grader.instructor.stage_limits import LimitProposal, limit_proposals
from grader.instructor.stage_limits import render_lines as limit_lines
from grader.rubric.items import Item, is_technique
from grader.rubric.kinds import REGISTRY, Reading, Registry

if TYPE_CHECKING:  # annotations only: the report logic takes any Grading-shaped object and imports no pipeline
    from grader.grading import Environment, Grading
    from grader.rubric.types import Rubric

MIN_MARGIN = 0.10
# The textbook population a calibration grades by default (beside the solutions in a checkout).
DEFAULT_TEXTBOOK = Path("tests") / "submissions" / "textbook" / "course"
HALF = 0.5  # the share of a speed item's points the textbook kernel must earn


@dataclass
class Measured:
    """One population's readings of one item: a value, a pass and the share of the points earned per repeat."""

    values: list[float | None] = field(default_factory=list)
    passed: list[bool] = field(default_factory=list)
    earned: list[float] = field(default_factory=list)

    def add(self, reading: Reading, result) -> None:
        self.values.append(reading.value)
        self.passed.append(reading.passed)
        self.earned.append(result.score / result.max_score if result is not None and result.max_score else 0.0)

    @property
    def measured(self) -> bool:
        return bool(self.passed)


@dataclass
class Row:
    stage: str
    number: str
    item: str
    title: str
    kind: str
    op: str
    threshold: float | None
    role: str = "other"  # technique, speed, integrity or other
    reference: list[float | None] = field(default_factory=list)  # one value per repeat
    reference_passed: list[bool] = field(default_factory=list)
    reference_earned: list[float] = field(default_factory=list)
    predecessor: list[float | None] = field(default_factory=list)
    predecessor_passed: list[bool] = field(default_factory=list)
    predecessor_source: str = ""
    textbook: Measured = field(default_factory=Measured)
    textbook_predecessor: Measured = field(default_factory=Measured)
    integrity: bool = False
    margin: float | None = None
    verdict: str = ""
    why: str = ""


def _role(item: Item, op: str, registry: Registry) -> str:
    if is_technique(item):
        return "technique"
    if registry.of(item).speed:
        return "speed"
    if op == "==" or item.params.get("integrity"):
        return "integrity"
    return "other"


def _stats(values: list[float | None]) -> tuple[float, float, float] | None:
    vs = [v for v in values if v is not None]
    return (min(vs), statistics.median(vs), max(vs)) if vs else None


def margin(op: str, values: list[float | None], threshold: float | None) -> float | None:
    """The margin of the worst repeat; None when there is nothing to compare."""
    vs = [v for v in values if v is not None]
    if not vs or threshold is None or threshold == 0 or op == "==":
        return None
    if op in (">=", ">"):
        return (min(vs) - threshold) / abs(threshold)
    return (threshold - max(vs)) / abs(threshold)


def _all_fail(m: Measured, repeats: int, valued: bool) -> tuple[bool, str]:
    """Whether ``m`` failed every repeat; ``valued``: the item has a value, so a missing one means unmeasured."""
    if len(m.passed) < repeats or (valued and any(v is None for v in m.values)):
        return False, "was not measured in every repeat"
    passed = sum(m.passed)
    return passed == 0, f"passes in {passed} of {repeats} repeats"


def _verdict(row: Row, repeats: int, has_predecessor: bool) -> tuple[str, str]:
    ref_ok = len(row.reference_passed) == repeats and all(row.reference_passed)
    if not ref_ok:
        bad = repeats - sum(row.reference_passed)
        return "FAIL", f"the reference does not pass in {bad} of {repeats} repeats"
    if row.role == "integrity":
        return "OK", ""
    if row.margin is not None and row.margin < MIN_MARGIN:
        return "TIGHT", f"reference margin {100 * row.margin:.1f}% < {100 * MIN_MARGIN:.0f}%"
    tb = row.textbook
    if row.role == "speed":
        if not tb.measured:
            return "UNCHECKED", "no textbook kernel was graded"
        short = [e for e in tb.earned if e < HALF]
        if short or len(tb.earned) < repeats:
            low = min(tb.earned, default=0.0)
            return "UNFAIR", f"the textbook kernel earns {100 * low:.0f}% of the points (needs >= {100 * HALF:.0f}%)"
        return "OK", ""
    if row.role != "technique":
        return "OK", ""
    if not tb.measured:
        return "UNCHECKED", "no textbook kernel was graded"
    if not all(tb.passed) or len(tb.passed) < repeats:
        return "UNFAIR", f"the textbook kernel fails in {len(tb.passed) - sum(tb.passed)} of {repeats} repeats"
    if not has_predecessor:
        return "OK", "no predecessor to fail"
    pred = Measured(row.predecessor, row.predecessor_passed)
    for label, m in (("the previous stage's reference", pred),
                     ("the previous stage's textbook kernel", row.textbook_predecessor)):
        if not m.measured and label.endswith("textbook kernel"):
            continue  # graded without a textbook population: the textbook check above said so
        ok, said = _all_fail(m, repeats, row.op != "sass")
        if not ok:
            return ("UNCHECKED" if "not measured" in said else "WEAK"), f"{label} {said}"
    return "OK", ""


def _find(items, stage: str, item: str):
    return next((r for r in items if r.stage == stage and r.item == item), None)


def calibration_rows(rubric, references: list, predecessors: list,
                     predecessor_notes: dict[str, str] | None = None, textbook: list | None = None,
                     textbook_predecessors: list | None = None, registry: Registry = REGISTRY) -> list[Row]:
    """One row per threshold or technique item. ``references``, ``predecessors``, ``textbook`` and
    ``textbook_predecessors``: Gradings, one per repeat (the last two may be empty).

    ``predecessor_notes``: per stage, what the shifted submission holds (grader.instructor.shifted);
    a stage whose note says it kept its own reference has no predecessor. Each item is read as its kind
    says (grader/rubric/kinds.py: Kind.reading); a kind with no threshold is read only as technique evidence.
    """
    notes = predecessor_notes or {}
    rows = []
    repeats = len(references)
    for k, st in enumerate(rubric.stages):
        has_pred = k > 0 and "own reference" not in notes.get(st.id, "")
        for it in st.items:
            kind = registry.of(it)
            if not kind.calibrated and not is_technique(it):
                continue
            first = kind.reading(it, _find(references[0].items, st.id, it.id) if references else None)
            op, thr = first.op, first.threshold
            role = _role(it, op, registry)
            row = Row(st.id, st.number, it.id, it.title, it.kind, op, thr, role=role, integrity=role == "integrity",
                      predecessor_source=(notes.get(st.id) or f"stage {rubric.stages[k - 1].number}")
                      if has_pred else "none (first stage)" if k == 0 else notes.get(st.id, ""))
            for g in references:
                r = _find(g.items, st.id, it.id)
                read = kind.reading(it, r)
                row.reference.append(read.value)
                row.reference_passed.append(read.passed)
                row.reference_earned.append(r.score / r.max_score if r is not None and r.max_score else 0.0)
                if row.threshold is None and r is not None:
                    row.threshold = read.threshold
            for g in textbook or []:
                r = _find(g.items, st.id, it.id)
                row.textbook.add(kind.reading(it, r), r)
            if has_pred:
                for g in predecessors:
                    read = kind.reading(it, _find(g.items, st.id, it.id))
                    row.predecessor.append(read.value)
                    row.predecessor_passed.append(read.passed)
                for g in textbook_predecessors or []:
                    r = _find(g.items, st.id, it.id)
                    row.textbook_predecessor.add(kind.reading(it, r), r)
            row.margin = margin(op, row.reference, row.threshold)
            row.verdict, row.why = _verdict(row, repeats, has_pred)
            rows.append(row)
    return rows


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1e4 else f"{x:.4g}"


def _triple(values: list[float | None]) -> str:
    s = _stats(values)
    return "-" if s is None else " / ".join(_num(v) for v in s)


def _cell(values: list[float | None], passed: list[bool], earned: list[float] | None = None,
          speed: bool = False) -> str:
    if not passed:
        return "-"
    shown = _triple(values)
    got = sum(passed)
    text = f"{shown} (passes {got}/{len(passed)})" if shown != "-" else f"passes {got}/{len(passed)}"
    if speed and earned:
        text += f", earns {100 * min(earned):.0f}%" + (f"-{100 * max(earned):.0f}%" if max(earned) != min(earned) else "")
    return text


def render_markdown(rows: list[Row], meta: dict) -> str:
    ok = sum(r.verdict == "OK" for r in rows)
    lines = ["# Threshold calibration", "",
             f"- GPU: {meta.get('device', '?')}",
             f"- date: {meta.get('date', '?')}; repeats: {meta.get('repeats', '?')}; "
             f"profile N = {meta.get('profile_n', '?')}, clock control {meta.get('clock_control', '?')}",
             f"- Nsight Compute: {meta.get('ncu', '?')}",
             f"- grading time per submission (s): reference {meta.get('seconds_reference', '-')}, "
             f"shifted {meta.get('seconds_shifted', '-')}, textbook {meta.get('seconds_textbook', '-')}",
             f"- textbook population: {meta.get('textbook', 'none')}",
             f"- verdicts: {ok} OK of {len(rows)}", "",
             "Reference = `solutions/`; textbook = each stage's plainest faithful kernel, as the handout teaches it; "
             "predecessor = the same stage in the one-stage-shifted submission of each (each stage's file holds the "
             "previous stage's kernel). Values are min / median / max over the repeats. Margin: the worst reference "
             "repeat's distance to the threshold, relative to the threshold. The rule, by role: *technique* items "
             f"pass the reference with >= {100 * MIN_MARGIN:.0f}% margin and the textbook kernel, and fail both "
             "predecessors, every repeat; *speed* items give the reference all their points with that margin and the "
             f"textbook kernel at least {100 * HALF:.0f}% of them (they count only once the technique items pass); "
             "*integrity* items pass the reference; other items pass the reference with margin.", "",
             "| item | role | criterion | reference | textbook | predecessor (reference) | predecessor (textbook) "
             "| margin | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        crit = "SASS" if r.op == "sass" else f"{r.op} {_num(r.threshold)}"
        speed = r.role == "speed"
        ref = _cell(r.reference, r.reference_passed, r.reference_earned, speed)
        pred = _cell(r.predecessor, r.predecessor_passed) if r.predecessor_passed else r.predecessor_source or "-"
        tb = _cell(r.textbook.values, r.textbook.passed, r.textbook.earned, speed)
        tbp = _cell(r.textbook_predecessor.values, r.textbook_predecessor.passed)
        mg = "-" if r.margin is None else f"{100 * r.margin:.0f}%"
        verdict = r.verdict + (f": {r.why}" if r.why else "")
        lines.append(f"| {r.number}.{r.item} {r.title} | {r.role} | {crit} | {ref} | {tb} | {pred} | {tbp} | {mg} | "
                     f"{verdict} |")
    return "\n".join(lines) + "\n"


def write_report(rows: list[Row], meta: dict, out_dir: Path,
                 limits: list[LimitProposal] | None = None) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / "calibration.md", out_dir / "calibration.json"
    text = render_markdown(rows, meta)
    if limits:
        text += "\n## Stage time limits\n\n```\n" + "\n".join(limit_lines(limits)) + "\n```\n"
    md.write_text(text, encoding="utf-8")
    js.write_text(json.dumps({"meta": meta, "min_margin": MIN_MARGIN, "rows": [asdict(r) for r in rows],
                              "stage_limits": [asdict(p) for p in limits or []]}, indent=1) + "\n", encoding="utf-8")
    return md, js


def _seconds(gradings: list) -> str:
    s = [g.seconds for g in gradings]
    return f"{statistics.median(s):.1f} (max {max(s):.1f})" if s else "-"


def run_calibration(rubric: Rubric, solutions_dir: Path, out_dir: Path, repeats: int = 3,
                    grade_fn: Callable[..., Grading] | None = None,
                    progress: Callable[[str], None] = print, textbook_dir: Path | None = None) -> list[Row]:
    """Grade the reference, the textbook population (when ``textbook_dir`` is given) and the shifted
    submission of each ``repeats`` times, interleaved; write the report."""
    from grader.instructor.shifted import write_shifted

    write = None
    if grade_fn is None:
        from grader.outputs.write import write_outputs
        from grader.pipeline import grade
        grade_fn, write = grade, write_outputs
    out_dir, solutions_dir = Path(out_dir).resolve(), Path(solutions_dir).resolve()
    shifted_dir = out_dir / "shifted_submission"
    notes = write_shifted(solutions_dir, rubric, shifted_dir)
    refs: list[Grading] = []
    preds: list[Grading] = []
    books: list[Grading] = []
    book_preds: list[Grading] = []
    plan: list[tuple[str, Path, list]] = [("reference", solutions_dir, refs), ("shifted", shifted_dir, preds)]
    if textbook_dir is not None:
        textbook_dir = Path(textbook_dir).resolve()
        book_shifted = out_dir / "textbook_shifted_submission"
        write_shifted(textbook_dir, rubric, book_shifted)
        plan += [("textbook", textbook_dir, books), ("textbook_shifted", book_shifted, book_preds)]
    env: Environment | None = None
    for k in range(repeats):
        for label, sub, bucket in plan:
            progress(f"calibration {k + 1}/{repeats}: grading the {label} submission")
            # GEMM stages only: the occupancy exercises have no thresholds to calibrate here.
            g = grade_fn(sub, rubric, out_dir / f"{label}_{k}", stages=[s.id for s in rubric.stages],
                         progress=lambda _m: None, env=env)
            if write is not None:  # each grading's results.json and grading.json, for rescore and what-if
                write(g, out_dir / f"{label}_{k}")
            env = env or getattr(g, "env", None)
            bucket.append(g)
    rows = calibration_rows(rubric, refs, preds, notes, books, book_preds)
    limits = limit_proposals(rubric, refs)
    meta = _meta(rubric, refs, preds, env)
    meta.update(seconds_textbook=_seconds(books), textbook=str(textbook_dir) if textbook_dir else "none")
    write_report(rows, meta, out_dir, limits)
    for line in limit_lines(limits):
        progress(line)
    return rows


def _meta(rubric, refs: list, preds: list, env) -> dict:
    from grader.compile import toolchain
    device = getattr(env, "device", None) or {}
    ncu = toolchain.find_ncu()
    return {"device": device.get("name") or getattr(env, "device_reason", "") or "no device",
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "repeats": len(refs), "profile_n": rubric.profile.n, "clock_control": rubric.profile.clock_control,
            "ncu": f"{ncu.path} {ncu.version or ''}".strip() if ncu.path else ncu.reason,
            "seconds_reference": _seconds(refs), "seconds_shifted": _seconds(preds)}
