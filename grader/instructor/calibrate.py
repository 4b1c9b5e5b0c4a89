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

Two halves: :func:`run_calibration` grades on the GPU, writing each grading's folder
(``<population>_<repeat>/grading.json``) into the output folder, then calls :func:`analyse`, the pure
half, which reads only stored gradings (:func:`load_populations`): ``python -m grader calibrate
--from-gradings DIR`` runs it alone on a calibration's folder or on any folder of gradings named by
population (tests/fixtures/gradings/), without a GPU. The analysis also writes the GPU's calibration
entry (grader/rubric/calibration.py), which an instructor commits beside rubric.yaml.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
import re
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.evidence.rubric import Item
from grader.grading import Environment, Grading, GradingFormatError, load_grading
from grader.instructor.stage_limits import LimitProposal, limit_proposals
from grader.instructor.stage_limits import render_lines as limit_lines
from grader.instructor.stored import GRADING_FILE
from grader.rubric.items import is_technique
from grader.rubric.kinds import REGISTRY, Reading, Registry
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


def calibration_rows(rubric: Rubric, references: list[Grading], predecessors: list[Grading],
                     predecessor_notes: dict[str, str] | None = None, textbook: list[Grading] | None = None,
                     textbook_predecessors: list[Grading] | None = None, registry: Registry = REGISTRY) -> list[Row]:
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
            row = Row(st.id, st.number, it.id, it.title, it.kind or "", op, thr, role=role, integrity=role == "integrity",
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


def _seconds(gradings: list[Grading]) -> str:
    s = [g.seconds for g in gradings]
    return f"{statistics.median(s):.1f} (max {max(s):.1f})" if s else "-"


# The populations, in the order one repeat grades them, and the folder each grading of them is written to.
POPULATIONS = ("reference", "shifted", "textbook", "textbook_shifted")
FOLDER_RE = re.compile(r"^(?P<population>" + "|".join(POPULATIONS) + r")(?:_(?P<repeat>\d+))?$")


@dataclass
class Populations:
    """The gradings of each population, one per repeat (a population not graded is empty)."""

    reference: list[Grading] = field(default_factory=list)
    shifted: list[Grading] = field(default_factory=list)
    textbook: list[Grading] = field(default_factory=list)
    textbook_shifted: list[Grading] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # folders that hold no readable grading

    def of(self, population: str) -> list[Grading]:
        return {"reference": self.reference, "shifted": self.shifted, "textbook": self.textbook,
                "textbook_shifted": self.textbook_shifted}[population]


def load_populations(folder: Path) -> Populations:
    """The gradings under ``folder``: its subfolders named ``<population>`` or ``<population>_<repeat>``
    (POPULATIONS) that hold a grading.json, each population in repeat order; other folders are left aside."""
    found: dict[str, list[tuple[int, Path]]] = {p: [] for p in POPULATIONS}
    for d in sorted(Path(folder).iterdir()):
        m = FOLDER_RE.match(d.name)
        if m and d.is_dir() and (d / GRADING_FILE).is_file():
            found[m["population"]].append((int(m["repeat"] or 0), d))
    pops = Populations()
    for population, folders in found.items():
        for _, d in sorted(folders):
            try:
                pops.of(population).append(load_grading(d / GRADING_FILE))
            except GradingFormatError as exc:
                pops.problems.append(f"{d.name}: {exc}")
    return pops


@dataclass
class Calibration:
    """What the analysis found: the verdict rows, the stage limits' proposals, the report's facts, and the
    files written."""

    rows: list[Row]
    limits: list[LimitProposal]
    meta: dict
    files: list[Path] = field(default_factory=list)


def _rescored(rubric: Rubric, gradings: list[Grading], notes: list[str]) -> list[Grading]:
    """The gradings under ``rubric``: a grading graded under another rubric is re-scored (grader/instructor/
    rescore.py); the items that would need a real re-grade stay not evaluated, and ``notes`` says how many."""
    from grader.instructor.rescore import measured_under, under

    out = []
    for g in gradings:
        again, refused = under(g, rubric, functools.partial(measured_under, g, []))
        if refused:
            notes.append(f"{Path(g.submission).name}: graded under another rubric; {len(refused)} item(s) need a "
                         "real re-grade and count as not measured")
        out.append(again)
    return out


def analyse(rubric: Rubric, pops: Populations, out_dir: Path, notes: dict[str, str] | None = None,
            extra_meta: dict | None = None) -> Calibration:
    """The calibration's analysis of stored gradings (no GPU): the verdict rows, the stage limits, the report
    (calibration.md, calibration.json) and the GPU's calibration entry, written into ``out_dir``.
    ``notes``: what each stage of the shifted submissions holds (default: :func:`grader.instructor.shifted.shift_notes`)."""
    from grader.instructor.entry import write_entry
    from grader.instructor.shifted import shift_notes

    said: list[str] = list(pops.problems)
    refs, preds = _rescored(rubric, pops.reference, said), _rescored(rubric, pops.shifted, said)
    books, book_preds = _rescored(rubric, pops.textbook, said), _rescored(rubric, pops.textbook_shifted, said)
    rows = calibration_rows(rubric, refs, preds, notes if notes is not None else shift_notes(rubric),
                            books, book_preds)
    limits = limit_proposals(rubric, refs)
    meta = _meta(rubric, refs, preds, refs[0].env if refs else None)
    meta.update(seconds_textbook=_seconds(books), textbook="graded" if books else "none")
    meta.update(extra_meta or {})
    if said:
        meta["notes"] = said
    out_dir = Path(out_dir)
    md, js = write_report(rows, meta, out_dir, limits)
    cal = Calibration(rows, limits, meta, [md, js])
    env = refs[0].env if refs else None
    gpu = env.gpu if env is not None else None
    if gpu is not None and gpu.name:
        entry = write_entry(rubric, gpu.name, rows, limits, meta, out_dir)
        cal.files += [entry] if entry is not None else []
    return cal


def run_calibration(rubric: Rubric, solutions_dir: Path, out_dir: Path, repeats: int = 3,
                    grade_fn: Callable[..., Grading] | None = None,
                    progress: Callable[[str], None] = print, textbook_dir: Path | None = None) -> Calibration:
    """Grade the reference, the textbook population (when ``textbook_dir`` is given) and the shifted
    submission of each ``repeats`` times, interleaved, each grading's files into ``out_dir/<population>_<k>/``;
    then :func:`analyse` them."""
    from grader.instructor.shifted import write_shifted
    from grader.outputs.write import write_outputs

    if grade_fn is None:
        from grader.pipeline import grade
        grade_fn = grade
    # Graded with the rubric's own levels and limits, not a calibration entry of this GPU: those are what is measured.
    rubric = dataclasses.replace(rubric, calibrations=())
    out_dir, solutions_dir = Path(out_dir).resolve(), Path(solutions_dir).resolve()
    shifted_dir = out_dir / "shifted_submission"
    notes = write_shifted(solutions_dir, rubric, shifted_dir)
    pops = Populations()
    plan: list[tuple[str, Path]] = [("reference", solutions_dir), ("shifted", shifted_dir)]
    if textbook_dir is not None:
        textbook_dir = Path(textbook_dir).resolve()
        book_shifted = out_dir / "textbook_shifted_submission"
        write_shifted(textbook_dir, rubric, book_shifted)
        plan += [("textbook", textbook_dir), ("textbook_shifted", book_shifted)]
    env: Environment | None = None
    for k in range(repeats):
        for label, sub in plan:
            progress(f"calibration {k + 1}/{repeats}: grading the {label} submission")
            # GEMM stages only: the occupancy exercises have no thresholds to calibrate here.
            g = grade_fn(sub, rubric, out_dir / f"{label}_{k}", stages=[s.id for s in rubric.stages],
                         progress=lambda _m: None, env=env)
            write_outputs(g, out_dir / f"{label}_{k}")  # its grading.json: what the analysis reads back
            env = env or g.env
            pops.of(label).append(g)
    from grader.compile import toolchain

    ncu = toolchain.find_ncu()
    cal = analyse(rubric, pops, out_dir, notes, {
        "textbook": str(textbook_dir) if textbook_dir else "none",
        "ncu": f"{ncu.path} {ncu.version or ''}".strip() if ncu.path else ncu.reason})
    for line in limit_lines(cal.limits):
        progress(line)
    return cal


def _meta(rubric: Rubric, refs: list[Grading], preds: list[Grading], env: Environment | None) -> dict:
    profiled = next((g.profile.command[0] for g in refs if g.profile is not None and g.profile.command), None)
    return {"device": (env.device.name if env is not None and env.device is not None else "") or (env.device_reason if env is not None else "") or "no device",
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "repeats": len(refs), "profile_n": rubric.profile.n, "clock_control": rubric.profile.clock_control,
            "ncu": profiled or "not run",
            "seconds_reference": _seconds(refs), "seconds_shifted": _seconds(preds),
            "rubric_sha256": rubric.sha256}
