"""grader/rubric/kinds.py: one entry per stage item kind, and no kind switch anywhere else (no GPU)."""
import ast
import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from grader.evidence.compile import CompileResult, KernelResources, SassResult
from grader.evidence.limits import Peaks
from grader.evidence.params import RECORDS, FractionOfPeakParams, NcuParams, NoParams
from grader.evidence.rubric import Item
from grader.grading import StageOutcome
from grader.instructor.calibrate import calibration_rows
from grader.instructor.handout import threshold
from grader.instructor.stored import is_threshold_item, measured_value, threshold_of
from grader.model import ItemResult, Measured, Status, Verdict
from grader.profile.timing import summarize
from grader.records import RecordError, from_jsonable, to_jsonable
from grader.rubric.curve import Curve
from grader.rubric.errors import RubricError
from grader.rubric.kinds import REGISTRY, JudgeContext, Kind, Reading, result, stage_item
from grader.rubric.load import load_rubric
from grader.score.stages import evaluate, score

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
STAGE = RUBRIC.stage("tiled")
PEAKS = Peaks(66.9, 989.0, "test")

# One item of every kind, as a rubric writes it: a new kind must add its own here, and with it the checks below.
SAMPLES = {
    "compiles": {},
    "correct": {},
    "no_spills": {},
    "sass": {"require": ["FFMA"], "forbid": ["HMMA"], "technique": True},
    "fraction_of_baseline": {"min": 0.5, "partial_from": 0.1},
    "speedup_over_stage": {"stage": "coalesced", "min": 2},
    "fraction_of_peak": {"peak": "fp32", "min": 0.3},
    "ncu": {"expr": "smsp__inst_executed_op_shared_ld.sum / N", "op": "<=", "value": 4, "unit": "loads"},
}
# What each threshold kind's result holds (the value its judge writes under its measured key).
MEASURED = {"fraction_of_baseline": 0.6, "speedup_over_stage": 2.5, "fraction_of_peak": 0.4, "ncu": 3.0}


def sample(kind: str):
    return stage_item({"id": f"x_{kind}", "kind": kind, "title": kind, "points": 2, **SAMPLES[kind]}, "stages[0].items[0]")


def test_every_kind_has_a_sample_here():
    assert sorted(SAMPLES) == sorted(REGISTRY.names)


@pytest.mark.parametrize("name", REGISTRY.names)
def test_every_kind_declares_its_wording_reading_number_and_params(name):
    kind = REGISTRY[name]
    item = sample(name)
    assert item.kind == name and REGISTRY.of(item) is kind
    assert kind.summary.strip()
    for param, spec in kind.params.items():
        assert spec.doc.strip(), f"{name}.{param} is not documented"
    wording = kind.handout_text(item, STAGE, RUBRIC)
    assert wording.strip() and wording != name, f"{name} has no handout wording"
    assert threshold(item, STAGE, RUBRIC).startswith(wording)
    assert set(kind.params) == set(kind.record.names())  # each declared param is a field of the kind's own record
    assert isinstance(item.params, kind.record) and RECORDS[name] is kind.record  # what the codec reads it as
    assert kind.technique_allowed == ("technique" in kind.params)
    if kind.calibrated:  # a threshold kind: a number, a level, an op, an axis
        assert kind.threshold_kind and kind.level_param in kind.params and kind.axis is not None
        assert not kind.not_calibrated
        value = MEASURED[name]
        assert kind.measured_key in {f.name for f in dataclasses.fields(Measured)}  # a field of the typed values
        stored = result(STAGE, item, Status.PASSED, 1, "m",
                        values=Measured(**{kind.measured_key: value, "threshold": 4.0}))
        assert kind.reading(item, stored) == Reading(value, float(SAMPLES[name].get("min", 4)), kind.op(item), True)
        assert measured_value(item, stored) == value and is_threshold_item(item)
        assert threshold_of(item) == float(SAMPLES[name].get("min", SAMPLES[name].get("value")))
        assert kind.axis_label(item, {s.id: s for s in RUBRIC.stages}).strip()
    else:  # a static kind says why the calibration does not read its number
        assert kind.not_calibrated.strip() and kind.measured_key is None
        assert measured_value(item, result(STAGE, item, Status.PASSED, 1, "m", values=Measured(value=1.0))) is None
        assert not is_threshold_item(item)


@pytest.mark.parametrize("name", REGISTRY.names)
def test_each_kinds_params_go_through_the_codec_as_its_own_record(name):
    item = sample(name)
    data = to_jsonable(item)
    record = REGISTRY[name].record
    # grading.json's params: the given ones, in the record's order (a curve's keys last)
    assert list(data["params"]) == [k for k in record.names() if k in SAMPLES[name]]
    back = from_jsonable(Item, json.loads(json.dumps(data)))
    assert back == item and type(back.params) is record and to_jsonable(back) == data


def test_a_stored_items_params_read_back_in_their_order_and_a_wrong_one_is_refused():
    stored = {"id": "n", "title": "t", "points": 1.0, "visibility": "visible", "kind": "ncu",
              "params": {"expr": "a.sum / N", "op": ">=", "value": 2, "unit": "%", "technique": True,
                         "partial_from": 1}, "number": ""}
    item = from_jsonable(Item, stored)
    assert item.params == NcuParams(expr="a.sum / N", op=">=", value=2, unit="%", technique=True, partial_from=1)
    assert json.dumps(to_jsonable(item)) == json.dumps(stored)  # the same bytes again (2 stays 2)
    with pytest.raises(RecordError, match="min"):  # a speed item's params without its level
        from_jsonable(Item, {**stored, "kind": "fraction_of_baseline", "params": {"partial_from": 0.1}})
    with pytest.raises(RecordError, match="fastest"):
        from_jsonable(Item, {**stored, "kind": "fastest"})
    assert from_jsonable(Item, {**stored, "kind": None, "params": {}}).params == NoParams()  # a section's item


def test_a_judge_gets_its_own_kinds_record():
    seen = []

    def judge(kind, item, params, o, context):
        seen.append(params)
        return result(o.stage, item, Status.PASSED, 1, "ok")

    registry = REGISTRY.replace(dataclasses.replace(REGISTRY["fraction_of_peak"], judge=judge))
    item = sample("fraction_of_peak")
    evaluate(item, _outcome("tiled"), {}, PEAKS, registry)
    assert seen == [FractionOfPeakParams(peak="fp32", min=0.3)]
    with pytest.raises(TypeError, match="FractionOfPeakParams"):  # an item of another kind is refused
        registry["fraction_of_peak"].judged(sample("ncu"), _outcome("tiled"), JudgeContext())


def test_a_kind_without_technique_refuses_it_and_the_param_checks_keep_their_messages():
    with pytest.raises(RubricError, match="technique"):
        stage_item({"id": "s", "kind": "fraction_of_baseline", "title": "t", "points": 1, "min": 0.5,
                    "technique": True}, "stages[0].items[0]")
    with pytest.raises(RubricError, match="has neither forbid nor require"):
        stage_item({"id": "s", "kind": "sass", "title": "t", "points": 1}, "stages[0].items[0]")
    with pytest.raises(RubricError, match="kind"):
        stage_item({"id": "s", "kind": "fastest", "title": "t", "points": 1}, "stages[0].items[0]")


# ---------------------------------------------------------------------------------------------
# Changing one kind is one entry
# ---------------------------------------------------------------------------------------------
def _outcome(stage_id: str) -> StageOutcome:
    st = RUBRIC.stage(stage_id)
    k = KernelResources(st.kernel, "sm_90a", registers=64)
    c = CompileResult(st.id, True, kernel=k, launch=st.launch, launch_source="rubric default")
    o = StageOutcome(stage=st, compile=c, sass=SassResult(opcodes={st.kernel: Counter({"FFMA": 100, "STG": 4})}),
                     verdict=Verdict.CORRECT, correctness_message="correct")
    o.timing = summarize(4096, [2.73 / 0.6] * 5, [2.73] * 5, PEAKS.get(st.peak))
    return o


def test_one_replaced_entry_changes_the_score_the_handout_and_the_calibration_together():
    def judge(kind, item, params, o, context: JudgeContext) -> ItemResult:
        return result(o.stage, item, Status.PASSED, 1, "judged by the replacement",
                      values=Measured(fraction_of_baseline=0.01))

    def handout(kind, item, params, stage, rubric) -> str:
        return "whatever the replacement says"

    old = REGISTRY["fraction_of_baseline"]
    new: Kind = dataclasses.replace(old, judge=judge, handout=handout, measured_key="fraction_of_baseline",
                                    speed=False)
    registry = REGISTRY.replace(new)
    assert REGISTRY["fraction_of_baseline"] is old and registry["fraction_of_baseline"] is new

    outcomes = {"tiled": _outcome("tiled")}
    speed = next(it for it in STAGE.items if it.kind == "fraction_of_baseline")
    scored = {r.item: r for r in score(outcomes, PEAKS, registry)}
    before = {r.item: r for r in score(outcomes, PEAKS)}
    assert scored[speed.id].message == "judged by the replacement" and scored[speed.id].status == Status.PASSED
    assert before[speed.id].message != scored[speed.id].message
    # Not a speed kind any more: the technique gate (no ncu metrics here, so it waits) leaves it alone.
    assert before[speed.id].values.gated_by is not None and scored[speed.id].values.gated_by is None

    assert threshold(speed, STAGE, RUBRIC, registry) == "whatever the replacement says"
    assert threshold(speed, STAGE, RUBRIC).startswith("at least")

    grading = type("G", (), {"items": list(scored.values())})()
    rows = calibration_rows(RUBRIC, [grading], [], registry=registry)
    row = next(r for r in rows if (r.stage, r.item) == ("tiled", speed.id))
    assert row.reference == [0.01] and row.role == "other"  # read through the replaced entry, no longer "speed"
    default = next(r for r in calibration_rows(RUBRIC, [grading], []) if (r.stage, r.item) == ("tiled", speed.id))
    assert default.role == "speed"


class _FullFromZero(Kind):
    """A threshold kind whose every item earns its full points from 0 up: a curve no shipped kind has."""

    def curve(self, item):
        return Curve(knees=(), full=0.0)


@pytest.mark.parametrize("name", ["fraction_of_baseline", "fraction_of_peak"])
def test_a_replaced_kinds_curve_is_the_one_its_judge_applies(name):
    old = REGISTRY[name]
    registry = REGISTRY.replace(_FullFromZero(**{f.name: getattr(old, f.name) for f in dataclasses.fields(old)}))
    o = _outcome("tiled")
    o.timing = summarize(4096, [2.73 / 0.01] * 5, [2.73] * 5, PEAKS.get(o.stage.peak))  # 1% of cuBLAS: slow
    item = dataclasses.replace(sample(name), points=5.0)
    shipped = evaluate(item, o, {"tiled": o}, PEAKS)
    replaced = evaluate(item, o, {"tiled": o}, PEAKS, registry)
    assert (shipped.status, shipped.score) == (Status.FAILED, 0.0)
    assert (replaced.status, replaced.score) == (Status.PASSED, 5.0)


# ---------------------------------------------------------------------------------------------
# No kind switch outside the registry
# ---------------------------------------------------------------------------------------------
KIND_NAMES = frozenset(REGISTRY.names)
REGISTRY_MODULE = "grader/rubric/kinds.py"


def _is_kind(node: ast.AST) -> bool:
    """An expression that reads an item's kind: ``kind``, ``x.kind``, ``x["kind"]``, ``x.get("kind")`` (or ``... or ""``)."""
    if isinstance(node, ast.BoolOp):
        return any(_is_kind(v) for v in node.values)
    if isinstance(node, ast.Name):
        return node.id == "kind"
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "kind"
    return False


def _names_kinds(node: ast.AST) -> bool:
    """A literal that is a kind name, or a collection (tuple, list, set, dict keys, frozenset(...)) holding one."""
    return any(isinstance(n, ast.Constant) and n.value in KIND_NAMES for n in ast.walk(node))


def _tables(trees: dict[str, ast.Module]) -> set[str]:
    """Module-level names bound to a literal collection of kind names (KINDS, SPEED_KINDS, MEASURED_KEYS...)."""
    found = set()
    for tree in trees.values():
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) and node.value is not None else []
            value = getattr(node, "value", None)
            if value is None or not isinstance(value, (ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Call, ast.Starred)):
                continue
            if _names_kinds(value):
                found |= {t.id for t in targets if isinstance(t, ast.Name)}
    return found


def _ref(node: ast.AST, tables: set[str]) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name in tables


def kind_switches(sources: dict[str, str]) -> list[str]:
    """Where a module compares an item's kind with a kind name, tests it against a collection of kind names, or
    looks it up in a table keyed by kind names: ``path:line``."""
    trees = {path: ast.parse(text, path) for path, text in sources.items()}
    tables = _tables(trees)
    hits = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(_is_kind(o) for o in operands) and any(
                        not _is_kind(o) and (_names_kinds(o) or _ref(o, tables)) for o in operands):
                    hits.append(f"{path}:{node.lineno}")
            elif isinstance(node, ast.Subscript) and _is_kind(node.slice) and _ref(node.value, tables):
                hits.append(f"{path}:{node.lineno}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                  and node.args and _is_kind(node.args[0]) and _ref(node.func.value, tables)):
                hits.append(f"{path}:{node.lineno}")
            elif isinstance(node, ast.Match) and _is_kind(node.subject) and any(
                    _names_kinds(case.pattern) for case in node.cases):
                hits.append(f"{path}:{node.lineno}")
    return hits


def test_no_module_but_the_registry_switches_on_a_stage_item_kind():
    sources = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sorted((ROOT / "grader").rglob("*.py"))
               if str(p.relative_to(ROOT)) != REGISTRY_MODULE}
    assert len(sources) > 100  # the scan read the package
    assert kind_switches(sources) == []


# The switches the registry replaced, as they were written (grader/score/stages.py, grader/instructor/*.py,
# grader/rubric/items.py): the scan finds each of them.
STARTING_CODE = {
    "stages.py": 'def evaluate(item):\n    kind = item.kind\n    if kind == "compiles":\n        return 1\n',
    "handout.py": ('from grader.rubric.items import SPEED_KINDS\n'
                   'def threshold(item, stage):\n    p, kind = item.params, item.kind\n'
                   '    if kind in SPEED_KINDS and stage:\n        return ""\n'),
    "items.py": 'SPEED_KINDS = ("fraction_of_baseline", "speedup_over_stage", "fraction_of_peak")\n',
    "calibrate.py": ('_VALUE_KEY = {"fraction_of_baseline": "fraction_of_baseline", "fraction_of_peak": "ratio"}\n'
                     'def _value(item, result):\n    key = "value" if item.kind == "ncu" else _VALUE_KEY[item.kind]\n'),
    "stored.py": ('MEASURED_KEYS = {"ncu": "value"}\n'
                  'def measured_value(item):\n    return MEASURED_KEYS.get(item.kind or "")\n'),
    "rescore.py": ('STORED_KINDS = frozenset({"compiles", "correct"})\n'
                   'def f(it):\n    return it.kind != "ncu" and it.kind not in STORED_KINDS\n'),
    "whatif.py": 'def _op(item):\n    return ">=" if item.kind not in ("ncu",) else item.params["op"]\n',
    "match.py": 'def f(item):\n    match item.kind:\n        case "sass":\n            return 1\n',
}


def test_the_scan_finds_the_switches_it_replaced():
    hits = kind_switches(STARTING_CODE)
    assert sorted({h.split(":")[0] for h in hits}) == sorted(set(STARTING_CODE) - {"items.py"})
    assert "calibrate.py:3" in hits and "stored.py:3" in hits and "rescore.py:3" in hits


def test_the_scan_leaves_other_kinds_alone():
    # Job kinds, answer-form kinds, phase names: not stage item kinds.
    other = {"a.py": 'def f(job, f, x):\n    return job.kind is Kind.SELFCHECK or f.kind == "launch" or x == "sass"\n'}
    assert kind_switches(other) == []
