"""The ``report:`` section of rubric.yaml -> a typed, validated :class:`ReportConfig`.

The section names the report file, the transitions it must discuss (each with the stage whose
kernel the cited metrics are compared with: the stage *after* the transition), the names a
report may cite besides raw ncu metric names (``derived``: arithmetic over metric names, the
same expressions as the rubric's ``ncu`` items), the tolerance for cited values, the two
results tables, and every item's points and visibility. Unknown keys and wrong types raise
:class:`grader.errors.RubricError` naming the key path.

Items, in report order (``R.1``, ``R.2``, ...):

- ``<transition>.cites`` (per transition): the paragraph is there, has prose, and cites at
  least one metric by name with a value;
- ``<transition>.values`` (per transition): every cited value matches the student's own kernel;
- ``table.<id>`` (per table): the table is there, complete, and its arithmetic adds up;
- ``table.times``: the tables' times agree with the grader's timings (loose);
- ``reasoning``: the quality of the reasoning, graded by hand.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from grader.errors import RubricError
from grader.profile.ncu import METRIC_RE
from grader.profile.criteria import check_expression
from grader.spec.items import ItemSpec

VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
PEAKS = ("fp32", "fp16_tensor")
LAST_COLUMNS = ("speedup", "fp32_multiple")  # speed-up over the table's first stage; x the FP32 peak
ITEM_KINDS = ("cites", "values", "times", "reasoning")
STAGE = "report"  # ItemResult.stage of every report item
_DERIVED_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Transition:
    id: str
    before: str  # stage id
    after: str  # stage id: cited metrics are compared with this stage's kernel unless a citation names another

    @property
    def label(self) -> str:
        return f"{self.before} -> {self.after}"


@dataclass(frozen=True)
class Derived:
    name: str  # lower_case_with_underscores; spaces or hyphens in a citation mean the same
    expr: str  # arithmetic over metric names and N (grader/profile/criteria.py)
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
    kinds: dict[str, ItemSpec]  # cites, values, times, reasoning: points, title, visibility

    def items(self) -> list[ItemSpec]:
        """Every graded item, numbered, in report order."""
        out: list[ItemSpec] = []
        for t in self.transitions:
            for kind in ("cites", "values"):
                k = self.kinds[kind]
                out.append(ItemSpec(f"{t.id}.{kind}", f"Report, {t.label}: {k.title}", k.points, k.visibility))
        for tb in self.tables:
            out.append(ItemSpec(f"table.{tb.id}", f"Report: {tb.title} table present, complete and consistent",
                                tb.points, tb.visibility))
        for kind, item_id in (("times", "table.times"), ("reasoning", "reasoning")):
            k = self.kinds[kind]
            out.append(ItemSpec(item_id, f"Report: {k.title}", k.points, k.visibility))
        return [ItemSpec(i.id, i.title, i.points, i.visibility, f"R.{n}") for n, i in enumerate(out, 1)]

    @property
    def max_points(self) -> float:
        return sum(i.points for i in self.items())

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


class _Map:
    """One mapping of the section; remembers its key path and rejects unknown keys."""

    def __init__(self, raw: Any, where: str):
        if not isinstance(raw, dict):
            raise RubricError(where, f"is {raw!r}", "a mapping of keys to values")
        self.raw, self.where, self.seen = raw, where, set()

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., what: str = "") -> Any:
        self.seen.add(key)
        path = f"{self.where}.{key}"
        if key not in self.raw:
            if default is ...:
                raise RubricError(path, "is missing", what or _kind_name(kind))
            return default
        value = self.raw[key]
        if isinstance(value, bool) or not isinstance(value, kind):
            raise RubricError(path, f"is {value!r}", what or _kind_name(kind))
        return value

    def number(self, key: str, default: Any = ..., lo: float = 0.0, hi: float | None = None) -> float:
        value = float(self.get(key, (int, float), default))
        if value < lo or (hi is not None and value > hi):
            rng = f"a number from {lo:g}" + (f" to {hi:g}" if hi is not None else " up")
            raise RubricError(f"{self.where}.{key}", f"is {value:g}", rng)
        return value

    def text(self, key: str, default: Any = ..., choices: tuple[str, ...] = ()) -> str:
        value = self.get(key, str, default)
        if not value.strip():
            raise RubricError(f"{self.where}.{key}", "is empty", "a non-empty string")
        if choices and value not in choices:
            raise RubricError(f"{self.where}.{key}", f"is {value!r}", "one of: " + ", ".join(choices))
        return value

    def words(self, key: str, default: Any = ...) -> tuple[str, ...]:
        value = self.get(key, list, default, "a non-empty list of strings")
        if not value or not all(isinstance(v, str) and v.strip() for v in value):
            raise RubricError(f"{self.where}.{key}", f"is {value!r}", "a non-empty list of strings")
        return tuple(value)

    def done(self) -> None:
        unknown = [k for k in self.raw if k not in self.seen]
        if unknown:
            raise RubricError(f"{self.where}.{unknown[0]}", "is not a known key",
                              "one of: " + ", ".join(sorted(self.seen)))


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a mapping"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def _transitions(raw: Any, where: str, stage_ids: tuple[str, ...] | None) -> tuple[Transition, ...]:
    if not isinstance(raw, list) or not raw:
        raise RubricError(where, f"is {raw!r}", "a non-empty list of {from: stage id, to: stage id}")
    out = []
    for k, entry in enumerate(raw):
        m = _Map(entry, f"{where}[{k}]")
        before, after = m.text("from"), m.text("to")
        tid = m.text("id", f"{before}_to_{after}")
        m.done()
        for key, sid in (("from", before), ("to", after)):
            if stage_ids is not None and sid not in stage_ids:
                raise RubricError(f"{where}[{k}].{key}", f"is {sid!r}", "a stage id: " + ", ".join(stage_ids))
        out.append(Transition(tid, before, after))
    ids = [t.id for t in out]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup:
        raise RubricError(where, f"has the transition id {dup!r} twice", "one entry per transition")
    return tuple(out)


def _derived(raw: Any, where: str) -> dict[str, Derived]:
    m = _Map(raw, where)
    out = {}
    for name in list(m.raw):
        path = f"{where}.{name}"
        if not isinstance(name, str) or not _DERIVED_NAME.match(name) or "__" in name:
            raise RubricError(path, "is not a valid name",
                              "lower_case_with_underscores without '__' (that marks an ncu metric name)")
        entry = m.raw[name]
        d = _Map(entry if isinstance(entry, dict) else {"expr": entry}, path)
        expr = d.text("expr")
        problem = check_expression(expr)
        if problem:
            raise RubricError(f"{path}.expr", problem, "arithmetic over ncu metric names and N")
        metrics = METRIC_RE.findall(expr)
        inferred = metric_unit(metrics[0]) if len(metrics) == 1 and METRIC_RE.fullmatch(expr.strip()) else ""
        unit = d.text("unit", inferred or "-", ("%", "ns", "byte", "-"))
        title = d.text("title", name.replace("_", " "))
        d.done()
        m.seen.add(name)
        out[name] = Derived(name, expr, "" if unit == "-" else unit, title)
    m.done()
    return out


def _tables(raw: Any, where: str, stage_ids: tuple[str, ...] | None) -> tuple[TableSpec, ...]:
    if not isinstance(raw, list) or not raw:
        raise RubricError(where, f"is {raw!r}", "a non-empty list of tables")
    out = []
    for k, entry in enumerate(raw):
        m = _Map(entry, f"{where}[{k}]")
        stages = m.words("stages")
        for sid in stages:
            if stage_ids is not None and sid not in stage_ids:
                raise RubricError(f"{where}[{k}].stages", f"names {sid!r}", "stage ids: " + ", ".join(stage_ids))
        out.append(TableSpec(
            m.text("id"), m.text("title"), stages, m.text("baseline"), m.words("baseline_names"),
            m.text("peak", choices=PEAKS), m.text("last_column", choices=LAST_COLUMNS),
            m.number("points"), m.text("visibility", "visible", VISIBILITIES)))
        m.done()
    ids = [t.id for t in out]
    if len(set(ids)) != len(ids):
        raise RubricError(where, "has duplicate table ids", "one id per table")
    return tuple(out)


def load_report_config(raw: dict, where: str = "rubric.yaml.report",
                       stage_ids: tuple[str, ...] | list[str] | None = None) -> ReportConfig:
    """Validate the section's mapping (as yaml.safe_load gives it) and build the config.

    ``stage_ids``, when given, are the rubric's stage ids: every stage the section names must be one.
    """
    ids = tuple(stage_ids) if stage_ids is not None else None
    top = _Map(raw, where)
    file = top.text("file")
    if file.startswith("/") or ".." in file.replace("\\", "/").split("/"):
        raise RubricError(f"{where}.file", f"is {file!r}", "a relative path inside the submission")
    min_words = int(top.number("min_words", 40))
    tol = _Map(top.get("tolerance", dict, {}), f"{where}.tolerance")
    rel, abs_ = tol.number("rel", 0.15, hi=1.0), tol.number("abs", 0.05)
    arithmetic, time_rel = tol.number("arithmetic_rel", 0.05, hi=1.0), tol.number("time_rel", 0.5)
    tol.done()
    transitions = _transitions(top.get("transitions", list), f"{where}.transitions", ids)
    derived = _derived(top.get("derived", dict, {}), f"{where}.derived")
    names_map = _Map(top.get("stage_names", dict, {}), f"{where}.stage_names")
    stage_names = {}
    for sid in list(names_map.raw):
        if ids is not None and sid not in ids:
            raise RubricError(f"{where}.stage_names.{sid}", "is not a stage id", "one of: " + ", ".join(ids))
        stage_names[str(sid)] = tuple(w.strip().lower() for w in names_map.words(sid))
    names_map.done()
    tables = _tables(top.get("tables", list), f"{where}.tables", ids)
    items = _Map(top.get("items", dict), f"{where}.items")
    kinds = {}
    for kind in ITEM_KINDS:
        s = _Map(items.get(kind, dict), f"{where}.items.{kind}")
        kinds[kind] = ItemSpec(kind, s.text("title"), s.number("points"), s.text("visibility", "visible", VISIBILITIES))
        s.done()
    items.done()
    top.done()
    return ReportConfig(file, min_words, rel, abs_, arithmetic, time_rel, transitions, derived, stage_names,
                        tables, kinds)
