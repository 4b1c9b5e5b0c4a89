"""grader/rubric/report.py: the rubric's report section, validated with key paths."""
import copy

import pytest
import yaml

from grader.evidence.params import NoParams
from grader.model import Bonus
from grader.profile.ncu import metrics_needed
from grader.rubric.errors import RubricError
from grader.rubric.expr import METRIC_RE
from grader.rubric.load import parse_rubric
from grader.rubric.report import load_report_config, metric_unit, normalize_name
from tests.report_check_helpers import CFG, ROOT, RUBRIC, TABLE

RAW = yaml.safe_load((ROOT / "rubric.yaml").read_text())
IDS = [st.id for st in RUBRIC.stages]


def _load(section):
    return load_report_config(section, "rubric.yaml.report", IDS)


def test_the_rubric_section_loads_and_counts_its_points():
    items = CFG.items()
    assert [i.number for i in items] == [f"R.{n}" for n in range(1, len(items) + 1)]
    assert len({i.id for i in items}) == len(items)
    assert CFG.max_points == sum(i.points for i in items if CFG.bonus_of(i.id) is Bonus.NONE) == 30
    assert [i.number for i in items if CFG.bonus_of(i.id) is not Bonus.NONE] == ["R.15", "R.16"]  # numbered last
    assert RUBRIC.max_points == sum(s.max_points for s in RUBRIC.stages if s.bonus is Bonus.NONE) + 60 + 30
    assert [(t.before, t.after) for t in CFG.transitions] == list(zip(IDS, IDS[1:]))


def test_every_transition_compares_with_the_stage_after_it():
    for t in CFG.transitions:
        assert IDS.index(t.after) == IDS.index(t.before) + 1


def test_every_derived_name_uses_metrics_the_grader_collects():
    needed = set(metrics_needed(RUBRIC))
    for d in CFG.derived.values():
        for metric in METRIC_RE.findall(d.expr):
            assert metric in needed, (d.name, metric)
            for kernel, row in TABLE.items():
                assert isinstance(row.get(metric), float), (d.name, metric, kernel)


@pytest.mark.parametrize("mutate,where", [
    (lambda s: s.update(colour="red"), "rubric.yaml.report.colour"),
    (lambda s: s.pop("file"), "rubric.yaml.report.file"),
    (lambda s: s.update(file="../etc/passwd"), "rubric.yaml.report.file"),
    (lambda s: s["tolerance"].update(rel=2), "rubric.yaml.report.tolerance.rel"),
    (lambda s: s["transitions"][0].update(to="tiles"), "rubric.yaml.report.transitions[0].to"),
    (lambda s: s["transitions"].append(dict(s["transitions"][0])), "rubric.yaml.report.transitions"),
    (lambda s: s["derived"].update({"bad__name": "sm__x.sum"}), "rubric.yaml.report.derived.bad__name"),
    (lambda s: s["derived"].update(bad={"expr": "sm__x.sum + import"}), "rubric.yaml.report.derived.bad.expr"),
    (lambda s: s["derived"]["duration"].update(unit="furlongs"), "rubric.yaml.report.derived.duration.unit"),
    (lambda s: s["tables"][0].update(peak="fp64"), "rubric.yaml.report.tables[0].peak"),
    (lambda s: s["tables"][1].update(stages=["wmma", "nope"]), "rubric.yaml.report.tables[1].stages"),
    (lambda s: s["items"].pop("reasoning"), "rubric.yaml.report.items.reasoning"),
    (lambda s: s["items"]["values"].update(points="two"), "rubric.yaml.report.items.values.points"),
    (lambda s: s["stage_names"].update(nine=["x"]), "rubric.yaml.report.stage_names.nine"),
])
def test_a_bad_section_names_the_key(mutate, where):
    section = copy.deepcopy(RAW["report"])
    mutate(section)
    with pytest.raises(RubricError) as exc:
        _load(section)
    assert exc.value.where == where


def test_rubric_loading_validates_the_section():
    raw = copy.deepcopy(RAW)
    raw["report"]["items"]["cites"]["points"] = -1
    with pytest.raises(RubricError) as exc:
        parse_rubric(raw)
    assert exc.value.where == "rubric.yaml.report.items.cites.points"


def test_units_and_names():
    assert metric_unit("gpu__time_duration.sum") == "ns"
    assert metric_unit("dram__bytes_read.sum") == "byte"
    assert metric_unit("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active") == "%"
    assert metric_unit("launch__registers_per_thread") == ""
    assert normalize_name(" Shared loads-per warp  FFMA ") == "shared_loads_per_warp_ffma"
    assert CFG.derived["duration"].unit == "ns" and CFG.derived["fma_pipe_pct"].unit == "%"
    assert CFG.derived["shared_loads_per_warp_ffma"].unit == ""


def test_report_items_say_which_check_grades_them():
    kinds = {i.id: i.kind for i in CFG.items()}
    assert kinds["reasoning"] == "reasoning" and kinds["table.times"] == "times"
    assert {k for i, k in kinds.items() if i.startswith("table.") and i != "table.times"} == {"table"}
    assert all((kinds[f"{t.id}.cites"], kinds[f"{t.id}.values"]) == ("cites", "values") for t in CFG.transitions)
    assert all(i.params == NoParams() for i in CFG.items())


def test_a_derived_name_written_short_is_its_expression():
    section = copy.deepcopy(RAW["report"])
    section["derived"] = {"regs": "launch__registers_per_thread", "x-note": "anchors are free"}
    cfg = _load(section)
    assert list(cfg.derived) == ["regs"] and cfg.derived["regs"].expr == "launch__registers_per_thread"
    assert cfg.derived["regs"].title == "regs" and cfg.derived["regs"].unit == ""
