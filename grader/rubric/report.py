"""The ``report:`` section of rubric.yaml -> a typed, validated :class:`ReportConfig`.

The section names the report file, the transitions it must discuss (each with the stage whose
kernel the cited metrics are compared with: the stage *after* the transition), the names a
report may cite besides raw ncu metric names (``derived``: arithmetic over metric names, the
same expressions as the rubric's ``ncu`` items), the tolerance for cited values, the two
results tables, and every item's points and visibility. The section is read once, when the
rubric is loaded (grader/rubric/load.py), with the rubric's one reader: unknown keys and wrong
types raise :class:`grader.rubric.errors.RubricError` naming the key path.

Items, in report order (``R.1``, ``R.2``, ...):

- ``<transition>.cites`` (per transition): the paragraph is there, has prose, and cites at
  least one metric by name with a value;
- ``<transition>.values`` (per transition): every cited value matches the student's own kernel;
- ``table.<id>`` (per table): the table is there, complete, and its arithmetic adds up;
- ``table.times``: the tables' times agree with the grader's timings (loose);
- ``reasoning``: the quality of the reasoning, graded by hand.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grader.evidence.rubric import Item
from grader.model import Bonus
from grader.rubric.errors import RubricError
from grader.rubric.expr import METRIC_RE, check_expression
from grader.rubric.items import VISIBILITIES, read_item
from grader.rubric.peaks import PEAKS
from grader.rubric.reader import Reader

LAST_COLUMNS = ("speedup", "fp32_multiple")  # speed-up over the table's first stage; x the FP32 peak
ITEM_KINDS = ("cites", "values", "times", "reasoning")
STAGE = "report"  # ItemResult.stage of every report item
_DERIVED_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Transition:
    id: str
    before: str  # stage id
    after: str  # stage id: cited metrics are compared with this stage's kernel unless a citation names another
    # The bonus stage's own counting (grader/model.py: Bonus) when ``after`` is a bonus stage: its
    # paragraph's automatic items are outside the report's max_points, like the stage's own items.
    bonus: Bonus = Bonus.NONE

    @property
    def label(self) -> str:
        return f"{self.before} -> {self.after}"


@dataclass(frozen=True)
class Derived:
    name: str  # lower_case_with_underscores; spaces or hyphens in a citation mean the same
    expr: str  # arithmetic over metric names and N (grader/rubric/expr.py)
    unit: str  # "%", "ns", "byte" or "" (a count or a ratio)
    title: str


@dataclass(frozen=True)
class TableSpec:
    id: str
    title: str
    stages: tuple[str, ...]
    baseline: str  # what the baseline row is called in the handout, e.g. "cuBLAS SGEMM"
    baseline_names: tuple[str, ...]  # words that identify the baseline row
    peak: str  # which ceiling the % column is against
    last_column: str  # "speedup" or "fp32_multiple"
    points: float
    visibility: str = "visible"


@dataclass(frozen=True)
class ReportConfig:
    file: str
    min_words: int
    rel_tol: float
    abs_tol: float
    arithmetic_rel: float
    time_rel: float
    transitions: tuple[Transition, ...]
    derived: dict[str, Derived]
    stage_names: dict[str, tuple[str, ...]]
    tables: tuple[TableSpec, ...]
    kinds: dict[str, Item]  # cites, values, times, reasoning: points, title, visibility

    def items(self) -> list[Item]:
        """Every graded item, numbered, in report order; ``kind`` says which check grades it."""
        out: list[Item] = []

        def paragraph(t: Transition) -> None:
            for kind in ("cites", "values"):
                k = self.kinds[kind]
                label = f"{t.label} (bonus)" if t.bonus is not Bonus.NONE else t.label
                out.append(Item(f"{t.id}.{kind}", f"Report, {label}: {k.title}", k.points, k.visibility, kind))

        # Bonus transitions come last, so adding one never renumbers the items a course's outline names.
        for t in self.transitions:
            if t.bonus is Bonus.NONE:
                paragraph(t)
        for tb in self.tables:
            out.append(Item(f"table.{tb.id}", f"Report: {tb.title} table present, complete and consistent",
                            tb.points, tb.visibility, "table"))
        for kind, item_id in (("times", "table.times"), ("reasoning", "reasoning")):
            k = self.kinds[kind]
            out.append(Item(item_id, f"Report: {k.title}", k.points, k.visibility, kind))
        for t in self.transitions:
            if t.bonus is not Bonus.NONE:
                paragraph(t)
        return [dataclasses.replace(i, number=f"R.{n}") for n, i in enumerate(out, 1)]

    def bonus_of(self, item_id: str) -> Bonus:
        """How an item's points count: a bonus transition's cites and values items count as its stage's."""
        t = next((t for t in self.transitions if item_id.startswith(f"{t.id}.")), None)
        return t.bonus if t is not None else Bonus.NONE

    @property
    def max_points(self) -> float:
        """The section's share of the total (a bonus transition's items are outside it)."""
        return sum(i.points for i in self.items() if self.bonus_of(i.id) is Bonus.NONE)

    def stages_named(self) -> set[str]:
        named = {s for t in self.transitions for s in (t.before, t.after)}
        return named | {s for tb in self.tables for s in tb.stages} | set(self.stage_names)


def metric_unit(name: str) -> str:
    """The unit ncu reports a raw metric in with ``--print-units base``: "ns", "byte", "%" or ""."""
    if name.startswith("gpu__time_duration"):
        return "ns"
    if "bytes" in name:
        return "byte"
    if "pct" in name:
        return "%"
    return ""


def normalize_name(text: str) -> str:
    """A derived name as a report may write it: 'Shared loads per warp FFMA' -> shared_loads_per_warp_ffma."""
    return re.sub(r"[\s\-]+", "_", text.strip().lower())


def _transitions(raw: Any, where: str, stage_ids: tuple[str, ...] | None,
                 bonus: Mapping[str, Bonus]) -> tuple[Transition, ...]:
    if not isinstance(raw, list) or not raw:
        raise RubricError(where, f"is {raw!r}", "a non-empty list of {from: stage id, to: stage id}")
    out = []
    for k, entry in enumerate(raw):
        m = Reader(entry, f"{where}[{k}]")
        before, after = m.text("from"), m.text("to")
        tid = m.text("id", f"{before}_to_{after}")
        m.done()
        for key, sid in (("from", before), ("to", after)):
            if stage_ids is not None and sid not in stage_ids:
                raise RubricError(m.path(key), f"is {sid!r}", "a stage id: " + ", ".join(stage_ids))
        out.append(Transition(tid, before, after, bonus.get(after, Bonus.NONE)))
    ids = [t.id for t in out]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup:
        raise RubricError(where, f"has the transition id {dup!r} twice", "one entry per transition")
    return tuple(out)


def _derived(m: Reader) -> dict[str, Derived]:
    out = {}
    for name in m.keys():
        path = m.path(name)
        if not isinstance(name, str) or not _DERIVED_NAME.match(name) or "__" in name:
            raise RubricError(path, "is not a valid name",
                              "lower_case_with_underscores without '__' (that marks an ncu metric name)")
        entry = m.raw[name]
        d = Reader(entry if isinstance(entry, dict) else {"expr": entry}, path)  # `name: expr` is short for {expr: }
        expr = d.text("expr")
        problem = check_expression(expr)
        if problem:
            raise RubricError(d.path("expr"), problem, "arithmetic over ncu metric names and N")
        metrics = METRIC_RE.findall(expr)
        inferred = metric_unit(metrics[0]) if len(metrics) == 1 and METRIC_RE.fullmatch(expr.strip()) else ""
        unit = d.choice("unit", ("%", "ns", "byte", "-"), inferred or "-")
        title = d.text("title", name.replace("_", " "))
        d.done()
        out[name] = Derived(name, expr, "" if unit == "-" else unit, title)
    m.done()
    return out


def _tables(raw: Any, where: str, stage_ids: tuple[str, ...] | None) -> tuple[TableSpec, ...]:
    if not isinstance(raw, list) or not raw:
        raise RubricError(where, f"is {raw!r}", "a non-empty list of tables")
    out = []
    for k, entry in enumerate(raw):
        m = Reader(entry, f"{where}[{k}]")
        stages = m.list_of("stages", str)
        for sid in stages:
            if stage_ids is not None and sid not in stage_ids:
                raise RubricError(m.path("stages"), f"names {sid!r}", "stage ids: " + ", ".join(stage_ids))
        out.append(TableSpec(
            m.text("id"), m.text("title"), stages, m.text("baseline"), m.list_of("baseline_names", str),
            m.choice("peak", PEAKS), m.choice("last_column", LAST_COLUMNS),
            m.number("points"), m.choice("visibility", VISIBILITIES, "visible")))
        m.done()
    ids = [t.id for t in out]
    if len(set(ids)) != len(ids):
        raise RubricError(where, "has duplicate table ids", "one id per table")
    return tuple(out)


def load_report_config(raw: Any, where: str = "rubric.yaml.report",
                       stage_ids: tuple[str, ...] | list[str] | None = None,
                       bonus: Mapping[str, Bonus] | None = None) -> ReportConfig:
    """Validate the section's mapping (as yaml.safe_load gives it) and build the config.

    ``stage_ids``, when given, are the rubric's stage ids: every stage the section names must be one.
    ``bonus``: the bonus stages' ids and how their points count (a transition to one is a bonus too).
    """
    ids = tuple(stage_ids) if stage_ids is not None else None
    top = Reader(raw, where)
    file = top.text("file")
    if file.startswith("/") or ".." in file.replace("\\", "/").split("/"):
        raise RubricError(top.path("file"), f"is {file!r}", "a relative path inside the submission")
    min_words = int(top.number("min_words", 40))
    tol = top.sub("tolerance", {})
    rel, abs_ = tol.number("rel", 0.15, hi=1.0), tol.number("abs", 0.05)
    arithmetic, time_rel = tol.number("arithmetic_rel", 0.05, hi=1.0), tol.number("time_rel", 0.5)
    tol.done()
    transitions = _transitions(top.get("transitions", list), top.path("transitions"), ids, bonus or {})
    derived = _derived(top.sub("derived", {}))
    names_map = top.sub("stage_names", {})
    stage_names = {}
    for sid in names_map.keys():
        if ids is not None and sid not in ids:
            raise RubricError(names_map.path(sid), "is not a stage id", "one of: " + ", ".join(ids))
        stage_names[str(sid)] = tuple(w.strip().lower() for w in names_map.list_of(sid, str))
    names_map.done()
    tables = _tables(top.get("tables", list), top.path("tables"), ids)
    items = top.sub("items")
    kinds = {}
    for kind in ITEM_KINDS:
        s = items.sub(kind)
        kinds[kind] = read_item(s, kind, kind)
        s.done()
    items.done()
    top.done()
    return ReportConfig(file, min_words, rel, abs_, arithmetic, time_rel, transitions, derived, stage_names,
                        tables, kinds)
