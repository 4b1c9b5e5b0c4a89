"""Calibrate the rubric's thresholds on the current GPU (instructors: ``run_local.py --calibrate [REPEATS]``).

Grades the reference solutions and the one-stage-shifted submission (grader/instructor/shifted.py)
REPEATS times each, interleaved, and writes ``calibration.md`` and ``calibration.json``:
for every threshold item (``ncu``, ``fraction_of_baseline``, ``fraction_of_peak``,
``speedup_over_stage``) the value measured on the reference kernel and on its predecessor
(min / median / max over the repeats), the threshold, the margin and a verdict. It also prints,
and writes into both files, the measured reference time of each stage's benchmark, from which the
stage's time limit derives (grader/instructor/stage_limits.py proposes ``stages[].limits.reference_s``).

Margin: ``(reference - threshold) / |threshold|`` for ``>=`` and ``>`` (the worst, i.e.
smallest, reference value), ``(threshold - reference) / |threshold|`` for ``<=`` and ``<``
(the largest). Verdict "OK": the reference passes every repeat with at least
``MIN_MARGIN`` and the predecessor fails every repeat. Integrity items (``op: "=="``,
e.g. FFMA count == N^3) must instead pass the reference every repeat; the predecessor
value is shown for information (it normally passes too).

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
from grader.model import Status

if TYPE_CHECKING:  # annotations only: the report logic takes any Grading-shaped object and imports no pipeline
    from grader.grading import Environment, Grading
    from grader.spec.types import Rubric

MIN_MARGIN = 0.10
THRESHOLD_KINDS = ("ncu", "fraction_of_baseline", "fraction_of_peak", "speedup_over_stage")
_VALUE_KEY = {"fraction_of_baseline": "fraction_of_baseline", "fraction_of_peak": "ratio",
              "speedup_over_stage": "speedup"}


@dataclass
class Row:
    stage: str
    number: str
    item: str
    title: str
    kind: str
    op: str
    threshold: float | None
    reference: list[float | None] = field(default_factory=list)  # one value per repeat
    reference_passed: list[bool] = field(default_factory=list)
    predecessor: list[float | None] = field(default_factory=list)
    predecessor_passed: list[bool] = field(default_factory=list)
    predecessor_source: str = ""
    integrity: bool = False
    margin: float | None = None
    verdict: str = ""
    why: str = ""


def _op_threshold(item, result) -> tuple[str, float | None]:
    if item.kind == "ncu":
        return item.params["op"], (result.values or {}).get("threshold") if result else None
    return ">=", float(item.params["min"])


def _value(item, result) -> float | None:
    if result is None:
        return None
    key = "value" if item.kind == "ncu" else _VALUE_KEY[item.kind]
    v = (result.values or {}).get(key)
    return float(v) if isinstance(v, (int, float)) else None


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


def _verdict(row: Row, repeats: int, has_predecessor: bool) -> tuple[str, str]:
    ref_ok = len(row.reference_passed) == repeats and all(row.reference_passed)
    if not ref_ok:
        bad = repeats - sum(row.reference_passed)
        return "FAIL", f"the reference does not pass in {bad} of {repeats} repeats"
    if row.integrity:
        return "OK", ""
    if row.margin is not None and row.margin < MIN_MARGIN:
        return "TIGHT", f"reference margin {100 * row.margin:.1f}% < {100 * MIN_MARGIN:.0f}%"
    if not has_predecessor:
        return "OK", "no predecessor to fail"
    if any(v is None for v in row.predecessor) or len(row.predecessor) < repeats:
        return "UNCHECKED", "the predecessor was not measured in every repeat"
    passed = sum(row.predecessor_passed)
    if passed:
        return "WEAK", f"the predecessor passes in {passed} of {repeats} repeats"
    return "OK", ""


def _find(items, stage: str, item: str):
    return next((r for r in items if r.stage == stage and r.item == item), None)


def calibration_rows(rubric, references: list, predecessors: list,
                     predecessor_notes: dict[str, str] | None = None) -> list[Row]:
    """One row per threshold item. ``references``/``predecessors``: Gradings, one per repeat.

    ``predecessor_notes``: per stage, what the shifted submission holds (grader.instructor.shifted);
    a stage whose note says it kept its own reference has no predecessor.
    """
    notes = predecessor_notes or {}
    rows = []
    repeats = len(references)
    for k, st in enumerate(rubric.stages):
        has_pred = k > 0 and "own reference" not in notes.get(st.id, "")
        for it in st.items:
            if it.kind not in THRESHOLD_KINDS:
                continue
            first = _find(references[0].items, st.id, it.id) if references else None
            op, thr = _op_threshold(it, first)
            row = Row(st.id, st.number, it.id, it.title, it.kind, op, thr, integrity=(op == "==" or bool(it.params.get("integrity"))),
                      predecessor_source=(notes.get(st.id) or f"stage {rubric.stages[k - 1].number}")
                      if has_pred else "none (first stage)" if k == 0 else notes.get(st.id, ""))
            for g in references:
                r = _find(g.items, st.id, it.id)
                row.reference.append(_value(it, r))
                row.reference_passed.append(bool(r and r.status == Status.PASSED))
                if row.threshold is None and r is not None:
                    row.threshold = _op_threshold(it, r)[1]
            if has_pred:
                for g in predecessors:
                    r = _find(g.items, st.id, it.id)
                    row.predecessor.append(_value(it, r))
                    row.predecessor_passed.append(bool(r and r.status == Status.PASSED))
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


def render_markdown(rows: list[Row], meta: dict) -> str:
    ok = sum(r.verdict == "OK" for r in rows)
    lines = ["# Threshold calibration", "",
             f"- GPU: {meta.get('device', '?')}",
             f"- date: {meta.get('date', '?')}; repeats: {meta.get('repeats', '?')}; "
             f"profile N = {meta.get('profile_n', '?')}, clock control {meta.get('clock_control', '?')}",
             f"- Nsight Compute: {meta.get('ncu', '?')}",
             f"- grading time per submission (s): reference {meta.get('seconds_reference', '-')}, "
             f"shifted {meta.get('seconds_shifted', '-')}",
             f"- verdicts: {ok} OK of {len(rows)}", "",
             "Reference = `solutions/`; predecessor = the same stage in the one-stage-shifted submission "
             "(each stage's file holds the previous stage's reference kernel). Values are min / median / max "
             f"over the repeats. Margin: the worst reference repeat's distance to the threshold, relative "
             f"to the threshold. OK = the reference passes every repeat with >= {100 * MIN_MARGIN:.0f}% "
             "margin and the predecessor fails every repeat; integrity items (`==`) must pass the reference "
             "every repeat (their predecessor value is for information).", "",
             "| item | criterion | reference | predecessor | margin | verdict |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        crit = f"{r.op} {_num(r.threshold)}"
        pred = _triple(r.predecessor) if r.predecessor else r.predecessor_source or "-"
        if r.predecessor:
            fails = len(r.predecessor_passed) - sum(r.predecessor_passed)
            pred += f" (fails {fails}/{len(r.predecessor_passed)})"
        mg = "-" if r.margin is None else f"{100 * r.margin:.0f}%"
        verdict = r.verdict + (f": {r.why}" if r.why else "")
        lines.append(f"| {r.number}.{r.item} {r.title} | {crit} | {_triple(r.reference)} | {pred} | {mg} | "
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
                    progress: Callable[[str], None] = print) -> list[Row]:
    """Grade the reference and the shifted submission ``repeats`` times each; write the report."""
    from grader.instructor.shifted import write_shifted

    if grade_fn is None:
        from grader.pipeline import grade
        grade_fn = grade
    out_dir, solutions_dir = Path(out_dir).resolve(), Path(solutions_dir).resolve()
    shifted_dir = out_dir / "shifted_submission"
    notes = write_shifted(solutions_dir, rubric, shifted_dir)
    refs: list[Grading] = []
    preds: list[Grading] = []
    env: Environment | None = None
    for k in range(repeats):
        for label, sub, bucket in (("reference", solutions_dir, refs), ("shifted", shifted_dir, preds)):
            progress(f"calibration {k + 1}/{repeats}: grading the {label} submission")
            # GEMM stages only: the occupancy exercises have no thresholds to calibrate here.
            g = grade_fn(sub, rubric, out_dir / f"{label}_{k}", stages=[s.id for s in rubric.stages],
                         progress=lambda _m: None, env=env)
            env = env or getattr(g, "env", None)
            bucket.append(g)
    rows = calibration_rows(rubric, refs, preds, notes)
    limits = limit_proposals(rubric, refs)
    write_report(rows, _meta(rubric, refs, preds, env), out_dir, limits)
    for line in limit_lines(limits):
        progress(line)
    return rows


def _meta(rubric, refs: list, preds: list, env) -> dict:
    from grader.build import toolchain

    device = getattr(env, "device", None) or {}
    ncu = toolchain.find_ncu()
    return {"device": device.get("name") or getattr(env, "device_reason", "") or "no device",
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "repeats": len(refs), "profile_n": rubric.profile.n, "clock_control": rubric.profile.clock_control,
            "ncu": f"{ncu.path} {ncu.version or ''}".strip() if ncu.path else ncu.reason,
            "seconds_reference": _seconds(refs), "seconds_shifted": _seconds(preds)}
