"""What-if for instructors: the class's measurements against the current and a proposed rubric, before tuning.

    python -m grader whatif BATCH_OR_GRADINGS [--rubric PROPOSED.yaml] --out DIR

Over stored gradings (grader/instructor/stored.py: a batch's output folder, a folder of grading folders, or
one grading), for every threshold item (the speed kinds and ``ncu``: an item graded by a number against a
``min`` or ``value``):

- the class's measured values (:func:`grader.instructor.stored.measured_value`, from the stored items) as a
  histogram PNG, with the current and the proposed threshold drawn on it, and how many gradings pass each;
- a table per item: each grading's value, status and points under both rubrics.

And the total scores (a histogram PNG, 0 to the automatic points), in three columns kept apart: as each grading was
graded (under the rubric it kept), under the base rubric (the repository's rubric.yaml, or ``--base``), and under
the proposal; "changed by your edit" is proposal minus base, "differs from the rubric this grading used" is base
minus as graded. The re-scored verdicts are the re-score's (grader/instructor/rescore.py: rescore_grading), so they
are exactly what ``rescore`` would write. An item either re-score cannot make (it needs a real re-grade) is left out
of every score compared, and a line says how many. ``DIR/report.md`` links every PNG; the numbers are also in
``DIR/whatif.json``.
"""
from __future__ import annotations

import functools
import json
import re
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grader.evidence.rubric import Item, Stage
from grader.grading import Grading, GradingFormatError
from grader.instructor.rescore import REGRADE, Compared, comparable_score, load_one, measured_under, under
from grader.instructor.stored import find_gradings, is_threshold_item, measured_value, threshold_of
from grader.model import Bonus, ItemResult, Status
from grader.rubric.kinds import REGISTRY
from grader.rubric.types import Rubric

REPORT = "report.md"
SCORES_PNG = "scores.png"


@dataclass
class Verdict:
    """One grading's result on one item under one rubric."""

    value: float | None  # what it measured; None: nothing measured
    status: str
    score: float
    refused: bool = False  # the proposal needs a real re-grade for it


@dataclass
class Row:
    name: str
    current: Verdict | None
    proposed: Verdict | None


@dataclass
class ThresholdItem:
    stage: str
    item: str
    number: str
    title: str
    kind: str
    op: str
    current: float | None  # the threshold, None: the item is not in that rubric (or it has no number)
    proposed: float | None
    points: tuple[float | None, float | None]
    rows: list[Row] = field(default_factory=list)
    # Every current threshold the gradings were graded with (more than one: they were graded under different rubrics).
    graded_with: list[float] = field(default_factory=list)
    png: str = ""
    png_problem: str = ""

    def passing(self, which: str) -> int:
        return sum(1 for r in self.rows if (v := getattr(r, which)) is not None and v.status == Status.PASSED.value)

    def measured(self, which: str) -> int:
        return sum(1 for r in self.rows if (v := getattr(r, which)) is not None and v.value is not None)

    def refused(self) -> int:
        return sum(1 for r in self.rows if r.proposed is not None and r.proposed.refused)


@dataclass(frozen=True)
class Scores(Compared):
    """One grading's total, over the items every re-score could make (the others are ``left_out``); ``new``:
    under the proposal (the base's when there is none)."""

    name: str = ""
    left_out: list[str] = field(default_factory=list)  # items that need a real re-grade under base or proposal


@dataclass
class WhatIf:
    path: Path
    gradings: int = 0
    items: list[ThresholdItem] = field(default_factory=list)
    scores: list[tuple[str, float, float]] = field(default_factory=list)  # (grading, current, proposed), comparable
    totals: list[Scores] = field(default_factory=list)
    max_score: tuple[float, float] = (0.0, 0.0)  # automatic points, as graded and under the proposal
    bonus_max: float = 0.0  # the bonus points a score may hold above them (settings.bonus: extra)
    problems: list[str] = field(default_factory=list)
    proposed_source: str = ""
    base_source: str = ""


def _op(item: Item) -> str:
    return REGISTRY.of(item).op(item)


def _verdict(item: Item, r: ItemResult | None) -> Verdict | None:
    if r is None:
        return None
    return Verdict(measured_value(item, r), r.status.value, r.score, r.message.startswith(REGRADE))


def _threshold_items(g: Grading) -> list[tuple[Stage, Item]]:
    return [(o.stage, it) for o in g.outcomes.values() for it in o.stage.items if is_threshold_item(it)]


def _xlabel(item: Item, stages: dict[str, Stage]) -> str:
    return REGISTRY.of(item).axis_label(item, stages) or str(item.kind)


def _file_name(stage: str, item: str) -> str:
    return "item_" + re.sub(r"[^A-Za-z0-9_.-]", "_", f"{stage}.{item}") + ".png"


def _under(g: Grading, rubric: Rubric | None, graded_with: Callable[[], Rubric | None]) -> tuple[Grading, list[str]]:
    """``g`` under ``rubric`` (grader/instructor/rescore.py: under; itself when None), and the items that need a
    real re-grade there. ``graded_with``: the rubric that graded ``g`` (parsed once, when first asked)."""
    if rubric is None:
        return g, []
    again, refused = under(g, rubric, graded_with)
    return again, [r.number for r in refused]


def what_if(source: Path, proposed: Rubric | None, out: Path, known: list[Rubric],
            base: Rubric | None = None) -> WhatIf:
    """Write ``out/report.md`` and its PNGs for the gradings under ``source`` (ConfigError when none). ``base``: the
    rubric the proposal is an edit of (the repository's rubric.yaml); None: the proposal is compared with each
    grading's own rubric."""
    from grader.outputs.plots import score_histogram_png, threshold_histogram_png
    from grader.outputs.summary import automatic_max

    col = find_gradings(source)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = WhatIf(out / REPORT, proposed_source=proposed.source if proposed is not None else "",
                    base_source=base.source if base is not None else "")
    pairs: list[tuple[str, Grading, Grading]] = []
    for name, folder in col.folders.items():
        try:
            g = load_one(folder)
        except GradingFormatError as exc:
            report.problems.append(f"{name}: {exc}")
            continue
        graded_with = functools.cache(functools.partial(measured_under, g, known))
        under_base, refused_base = _under(g, base, graded_with)
        after, refused_after = (_under(g, proposed, graded_with) if proposed is not None
                                else (under_base, refused_base))
        left = set(refused_base) | set(refused_after)
        report.totals.append(Scores(comparable_score(g, left), comparable_score(under_base, left),
                                    comparable_score(after, left), name=name, left_out=sorted(left)))
        pairs.append((name, g, after if proposed is not None else g))  # no proposal: the threshold items as graded
    report.gradings = len(pairs)
    # Every threshold item of either rubric, in the rubric's order (the current first).
    defs: dict[tuple[str, str], list] = {}
    stages: dict[str, Stage] = {}
    for _, g, _ in pairs:
        for st, it in _threshold_items(g):
            defs.setdefault((st.id, it.id), [st, it, None])
            stages.setdefault(st.id, st)
    for st in proposed.stages if proposed is not None else []:
        for it in st.items:
            if is_threshold_item(it):
                defs.setdefault((st.id, it.id), [st, None, None])[2] = it
    if proposed is None:
        for entry in defs.values():
            entry[2] = entry[1]
    for (sid, iid), (st, cur, prop) in defs.items():
        shown = prop or cur
        ti = ThresholdItem(sid, iid, f"{st.number}.{iid}", shown.title, shown.kind or "", _op(shown),
                           threshold_of(cur) if cur else None, threshold_of(prop) if prop else None,
                           (cur.points if cur else None, prop.points if prop else None))
        for name, g, after in pairs:
            before_r = next((r for r in g.items if (r.stage, r.item) == (sid, iid)), None)
            after_r = next((r for r in after.items if (r.stage, r.item) == (sid, iid)), None)
            own = next((i for i in g.outcomes[sid].stage.items if i.id == iid), None) if sid in g.outcomes else None
            if own is not None and (level := threshold_of(own, before_r)) is not None and level not in ti.graded_with:
                ti.graded_with.append(level)
            if ti.current is None and cur is not None:
                ti.current = threshold_of(cur, before_r)
            if ti.proposed is None and prop is not None:
                ti.proposed = threshold_of(prop, after_r)
            ti.rows.append(Row(name, _verdict(cur, before_r) if cur else None,
                               _verdict(prop, after_r) if prop else None))
        series = {"current": [r.current.value for r in ti.rows if r.current and r.current.value is not None]}
        if proposed is not None:
            values = [r.proposed.value for r in ti.rows if r.proposed and r.proposed.value is not None]
            if values != series["current"]:
                series["proposed"] = values
        lines = {f"current {ti.op} {ti.current:.4g}: {ti.passing('current')} of {len(ti.rows)} pass": ti.current}
        if proposed is not None:
            lines[f"proposed {ti.op} {ti.proposed:.4g}: {ti.passing('proposed')} of {len(ti.rows)} pass"
                  if ti.proposed is not None else "proposed: not in the proposed rubric"] = ti.proposed
        png = _file_name(sid, iid)
        drawn, ti.png_problem = threshold_histogram_png(series, lines, out / png, f"{ti.number} {ti.title}",
                                                        _xlabel(shown, stages))
        ti.png = png if drawn else ""
        report.items.append(ti)
    report.scores = [(t.name, t.graded, t.new) for t in report.totals]
    if pairs:  # the automatic points (hand-graded items are outside them, as in grades.csv)
        report.max_score = (automatic_max(pairs[0][1].items), automatic_max(pairs[0][2].items))
        report.bonus_max = max(sum(i.max_score for i in g.items if i.bonus is Bonus.EXTRA) for g in pairs[0][1:])
    series = {"current": [s[1] for s in report.scores]}
    if proposed is not None:
        series["proposed"] = [s[2] for s in report.scores]
    score_png, why = score_histogram_png(series, max(report.max_score) + report.bonus_max, out / SCORES_PNG,
                                         "Total scores of the class" + (" (current and proposed)" if proposed else ""))
    report.path.write_text(_markdown(report, source, SCORES_PNG if score_png else "", why), encoding="utf-8")
    (out / "whatif.json").write_text(json.dumps({
        "source": str(Path(source).resolve()), "proposed": report.proposed_source, "base": report.base_source,
        "gradings": report.gradings, "problems": report.problems, "max_score": list(report.max_score),
        "scores": [{"grading": t.name, "current": t.graded, "base": t.base, "proposed": t.new,
                    "changed_by_the_edit": t.edit, "differs_from_its_rubric": t.drift, "left_out": t.left_out}
                   for t in report.totals],
        "items": [asdict(ti) | {"passing": {"current": ti.passing("current"), "proposed": ti.passing("proposed")},
                                "measured": {"current": ti.measured("current"), "proposed": ti.measured("proposed")},
                                "refused": ti.refused()} for ti in report.items],
    }, indent=1) + "\n", encoding="utf-8")
    return report


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _cell(v: Verdict | None) -> str:
    if v is None:
        return "-"
    if v.refused:
        return REGRADE
    return f"{v.status}, {v.score:g}"


def _stats(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"mean {statistics.fmean(xs):.1f}, median {statistics.median(xs):g}, min {min(xs):g}, max {max(xs):g}"


def _markdown(r: WhatIf, source: Path, score_png: str, score_problem: str) -> str:
    proposed = bool(r.proposed_source)
    lines = ["# What-if: the class against the thresholds", "",
             f"{r.gradings} grading(s) from `{source}`; current rubric: the one each grading was graded with"
             + (f"; proposed: `{r.proposed_source}`." if proposed else "; no proposed rubric (`--rubric`)."), ""]
    lines += [f"- not read: {p}" for p in r.problems] + ([""] if r.problems else [])
    lines += ["## Scores", ""]
    left = [t for t in r.totals if t.left_out]
    if left:
        lines += [f"{sum(len(t.left_out) for t in left)} item(s) in {len(left)} grading(s) need a real re-grade "
                  "(what they measure changed) and are left out of every score below, in every column: "
                  + "; ".join(f"{t.name}: {', '.join(t.left_out)}" for t in left) + ".", ""]
    lines += [f"![scores]({score_png})", ""] if score_png else [f"*No score plot: {score_problem}*", ""]
    bonus = f", and up to {r.bonus_max:g} bonus points above them" if r.bonus_max else ""
    lines += [f"- current: {_stats([s[1] for s in r.scores])} (of {r.max_score[0]:g} automatic points{bonus})"]
    if proposed:
        lines += [f"- proposed: {_stats([s[2] for s in r.scores])} (of {r.max_score[1]:g} automatic points{bonus})"]
    base = f"`{r.base_source}`" if r.base_source else "its own rubric"
    lines += ["", f"As graded: under the rubric each grading kept. Base: {base}, the rubric "
              + ("your proposal edits" if proposed else "this checkout grades with") + ". "
              + ("Changed by your edit: proposed minus base. " if proposed else "")
              + "Differs from the rubric this grading used: base minus as graded (not your edit).", ""]
    if proposed:
        lines += ["| grading | as graded | base | proposed | changed by your edit | differs from the rubric this "
                  "grading used |", "|---|---|---|---|---|---|"]
        lines += [f"| {t.name} | {t.graded:g} | {t.base:g} | {t.new:g} | {t.edit:+g} | {t.drift:+g} |"
                  for t in r.totals]
    else:
        lines += ["| grading | as graded | base | differs from the rubric this grading used |", "|---|---|---|---|"]
        lines += [f"| {t.name} | {t.graded:g} | {t.base:g} | {t.drift:+g} |" for t in r.totals]
    lines += ["", "## Threshold items", "",
              "| item | title | current | pass | proposed | pass | needs a re-grade |", "|---|---|---|---|---|---|---|"]
    for ti in r.items:
        cur = f"{ti.op} {_num(ti.current)}" if ti.current is not None else "-"
        prop = f"{ti.op} {_num(ti.proposed)}" if ti.proposed is not None else "-"
        lines.append(f"| [{ti.number}](#{_anchor(ti)}) | {ti.title} | {cur} | {ti.passing('current')} of "
                     f"{len(ti.rows)} | {prop if proposed else '-'} | "
                     f"{str(ti.passing('proposed')) + ' of ' + str(len(ti.rows)) if proposed else '-'} | "
                     f"{ti.refused() if proposed else '-'} |")
    for ti in r.items:
        lines += ["", f"### {ti.number}: {ti.title}", "",
                  f"Kind `{ti.kind}`; current threshold {ti.op} {_num(ti.current)} ({_num(ti.points[0])} points): "
                  f"{ti.passing('current')} of {len(ti.rows)} pass, {ti.measured('current')} measured."]
        if len(ti.graded_with) > 1:
            lines += ["", "The gradings were graded with different thresholds: "
                      + ", ".join(f"{ti.op} {_num(v)}" for v in ti.graded_with) + " (each one's own verdict is shown)."]
        if proposed:
            lines += ["", f"Proposed threshold {ti.op} {_num(ti.proposed)} ({_num(ti.points[1])} points): "
                          f"{ti.passing('proposed')} of {len(ti.rows)} pass, {ti.measured('proposed')} measured"
                          + (f", {ti.refused()} {REGRADE}" if ti.refused() else "") + "."]
        lines += ["", f"![{ti.number}]({ti.png})" if ti.png else f"*No plot: {ti.png_problem}*", "",
                  "| grading | measured | current | proposed |", "|---|---|---|---|"]
        for row in ti.rows:
            value = row.current.value if row.current else (row.proposed.value if row.proposed else None)
            lines.append(f"| {row.name} | {_num(value)} | {_cell(row.current)} | "
                         f"{_cell(row.proposed) if proposed else '-'} |")
    return "\n".join(lines) + "\n"


def _anchor(ti: ThresholdItem) -> str:
    """GitHub's anchor of the item's heading ("### 4b.speed: at least 80% ..." -> "4bspeed-at-least-80-...")."""
    text = f"{ti.number}: {ti.title}".lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
