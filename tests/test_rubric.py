"""rubric.yaml validation: the shipped rubric loads; each kind of mistake names its key."""
import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grader.model import Bonus
from grader.rubric.errors import RubricError
from grader.rubric.load import load_rubric, parse_rubric

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def raw():
    return yaml.safe_load((ROOT / "rubric.yaml").read_text())


def test_shipped_rubric_is_the_six_stage_ladder_and_the_hopper_bonus():
    r = load_rubric(ROOT / "rubric.yaml")
    assert [s.id for s in r.stages] == ["naive", "coalesced", "tiled", "blocktiling_1d", "blocktiling_2d", "wmma",
                                        "hopper"]
    assert [s.kernel for s in r.stages] == ["mmNaive", "mmCoalesced", "mmTiled", "mm1DBlocktiling",
                                            "mm2DBlocktiling", "mmWMMA", "mmHopper"]
    assert r.stage("wmma").inputs == "fp16" and r.stage("wmma").baseline == "cublas_gemmex_fp16"
    hopper = r.stage("hopper")
    assert (hopper.inputs, hopper.operands, hopper.requires_arch) == ("bf16", "tensor_maps", "sm_90a")
    assert hopper.bonus is Bonus.EXTRA and hopper.max_points == 10 and r.bonus_points == 10 + 3  # + its report paragraph
    assert r.max_points == sum(s.max_points for s in r.stages[:-1]) + r.occupancy.max_points + r.report.max_points
    assert all(s.bench.n == 4096 for s in r.stages)
    assert (r.stage("naive").bench.reps, r.stage("naive").bench.warmup) == (1, 0)  # per-stage override merged over settings.bench
    assert r.stage("tiled").bench.reps == 20
    assert len(r.correctness_sizes) >= 2
    for s in r.stages:
        assert {"compiles", "correct"} <= {i.kind for i in s.items}


def _error(raw, mutate) -> RubricError:
    bad = copy.deepcopy(raw)
    mutate(bad)
    with pytest.raises(RubricError) as exc:
        parse_rubric(bad)
    return exc.value


def test_unknown_key_is_named(raw):
    err = _error(raw, lambda r: r["stages"][2].update(kernal="mmTiled"))
    assert err.where == "rubric.yaml.stages[2].kernal" and "not a known key" in str(err)


def test_wrong_type_is_named(raw):
    err = _error(raw, lambda r: r["stages"][0]["items"][1].update(points="six"))
    assert err.where == "rubric.yaml.stages[0].items[1].points" and "a number" in str(err)


def test_missing_stage_file(raw):
    err = _error(raw, lambda r: r["stages"][3].pop("file"))
    assert err.where == "rubric.yaml.stages[3].file" and "missing" in str(err)


def test_negative_points(raw):
    err = _error(raw, lambda r: r["stages"][1]["items"][0].update(points=-1))
    assert err.where.endswith("stages[1].items[0].points") and "zero or more" in str(err)


def test_unknown_visibility_and_kind(raw):
    err = _error(raw, lambda r: r["stages"][1]["items"][0].update(visibility="secret"))
    assert "after_due_date" in str(err)
    err = _error(raw, lambda r: r["stages"][1]["items"][0].update(kind="fast"))
    assert err.where.endswith("items[0].kind") and "fraction_of_baseline" in str(err)


def _speed_index(raw):
    return next(k for k, it in enumerate(raw["stages"][4]["items"]) if it["id"] == "speed")


def test_threshold_item_needs_min(raw):
    k = _speed_index(raw)
    err = _error(raw, lambda r: r["stages"][4]["items"][k].pop("min"))
    assert err.where.endswith(f"stages[4].items[{k}].min")


def test_reference_to_unknown_stage(raw):
    def mutate(r):
        r["stages"][3]["items"].append({"id": "x", "kind": "speedup_over_stage", "stage": "tild",
                                        "min": 2, "title": "t", "points": 1})
    err = _error(raw, mutate)
    assert "tild" in str(err) and "tiled" in str(err)


def test_tile_must_divide_the_sizes(raw):
    err = _error(raw, lambda r: r["stages"][4]["launch"].update(tile=[96, 128]))
    assert err.where.endswith("stages[4].launch.tile") and "does not divide" in str(err)


def test_duplicate_stage_ids_and_single_size(raw):
    err = _error(raw, lambda r: r["stages"][1].update(id="naive"))
    assert "appears twice" in str(err)
    err = _error(raw, lambda r: r["settings"].update(correctness_sizes=[512]))
    assert "at least two sizes" in str(err)


def test_partial_credit_range(raw):
    k = _speed_index(raw)
    def edit(r):
        r["stages"][4]["items"][k].pop("curve", None)
        r["stages"][4]["items"][k].update(partial_from=0.9)
    err = _error(raw, edit)
    assert err.where.endswith("partial_from")


def test_yaml_syntax_error_names_the_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("version: 1\nstages:\n  - id: [unclosed\n")
    with pytest.raises(RubricError) as exc:
        load_rubric(p)
    assert "line" in exc.value.where and "valid YAML" in str(exc.value)


def test_unreadable_file(tmp_path):
    with pytest.raises(RubricError) as exc:
        load_rubric(tmp_path / "missing.yaml")
    assert "cannot be read" in str(exc.value)


def test_anchor_keys_are_free_at_every_level(raw):
    doc = copy.deepcopy(raw)
    doc["settings"]["x-note"] = "for anchors"
    doc["stages"][0]["x-shared"] = [1]
    doc["report"]["x-anchor"] = {"a": 1}
    assert parse_rubric(doc).stages[0].id == "naive"


def test_every_section_reports_mistakes_the_same_way(raw):
    err = _error(raw, lambda r: r["stages"][2]["launch"].update(block=[16, 0]))
    assert err.where == "rubric.yaml.stages[2].launch.block" and err.expected == "a list of two positive integers"
    err = _error(raw, lambda r: r["stages"][5].update(inputs="fp64"))
    assert err.where == "rubric.yaml.stages[5].inputs" and err.expected == "one of: fp32, fp16, bf16"
    err = _error(raw, lambda r: r["settings"]["profile"].update(enabled="yes"))
    assert err.where == "rubric.yaml.settings.profile.enabled" and err.expected == "true or false"
    err = _error(raw, lambda r: r["settings"].update(correctness_sizes=[256, True]))
    assert "non-empty list of integers" in err.expected
    err = _error(raw, lambda r: r["peaks"]["per_sm_per_clock"].update({"12.0": {"fp32": 256}}))
    assert err.where == "rubric.yaml.peaks.per_sm_per_clock.12.0.fp16_tensor" and "missing" in err.problem
    err = _error(raw, lambda r: r.update(report=[]))
    assert err.where == "rubric.yaml.report" and "a mapping" in err.expected


def test_item_parameters_are_checked_when_the_rubric_loads(raw):
    def add(item):
        return lambda r: r["stages"][2]["items"].append({"id": "x", "title": "t", "points": 1, **item})
    err = _error(raw, add({"kind": "ncu", "expr": "sm__x.sum // 2", "op": ">=", "value": 1}))
    assert err.where == f"rubric.yaml.stages[2].items[{len(raw['stages'][2]['items'])}].expr"
    err = _error(raw, add({"kind": "sass", "forbid": [1, 2]}))
    assert err.where.endswith(".forbid") and "opcodes" in err.expected
    err = _error(raw, add({"kind": "fraction_of_peak", "peak": "fp64", "min": 0.1}))
    assert err.where.endswith(".peak") and "fp16_tensor" in err.expected


def test_the_rubric_holds_typed_sections_and_one_item_type(raw):
    from grader.evidence.rubric import Item

    r = parse_rubric(copy.deepcopy(raw))
    assert all(type(it) is Item and it.kind for st in r.stages for it in st.items)
    assert all(type(it) is Item for it in list(r.occupancy.items.values()) + r.report.items())
    doc = copy.deepcopy(raw)
    del doc["occupancy"], doc["report"]
    bare = parse_rubric(doc)
    assert (bare.occupancy, bare.report) == (None, None) and bare.part_ids == [s.id for s in bare.stages]
    assert bare.max_points == sum(s.max_points for s in bare.stages if s.bonus is Bonus.NONE) < r.max_points


def test_racecheck_blocks_a_pair_null_or_the_default(raw):
    """settings.sanitizer.racecheck_blocks: racecheck watches that corner of the grid; null: all of it."""
    assert parse_rubric(raw).sanitizer.racecheck_blocks == (2, 2)
    for value, expected in (([1, 3], (1, 3)), (None, None)):
        edited = copy.deepcopy(raw)
        edited["settings"]["sanitizer"]["racecheck_blocks"] = value
        assert parse_rubric(edited).sanitizer.racecheck_blocks == expected
    err = _error(raw, lambda r: r["settings"]["sanitizer"].update(racecheck_blocks=[2, 0]))
    assert err.where == "rubric.yaml.settings.sanitizer.racecheck_blocks" and "two positive integers" in str(err)


# --------------------------------------------------------------------------------------------
# An edited rubric.yaml: errors told by line, stage id and item id, with did-you-means
# --------------------------------------------------------------------------------------------
SHIPPED = (ROOT / "rubric.yaml").read_text()


def _edited(tmp_path, old: str, new: str) -> Path:
    assert SHIPPED.count(old) >= 1, old
    path = tmp_path / "rubric.yaml"
    path.write_text(SHIPPED.replace(old, new, 1))
    return path


def _line_of(path: Path, needle: str) -> int:
    return next(n for n, text in enumerate(path.read_text().splitlines(), 1) if needle in text)


def _check_rubric(path: Path, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", "check-rubric", "--rubric", str(path), "--out",
                           str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_misspelt_threshold_key_is_told_by_line_stage_item_and_the_key_meant(tmp_path):
    path = _edited(tmp_path, "min: 0.80, curve", "minimum: 0.80, curve")
    with pytest.raises(RubricError) as exc:
        load_rubric(path)
    line = _line_of(path, "minimum: 0.80")
    assert str(exc.value) == (f"rubric.yaml line {line}: stage blocktiling_2d, item speed: min: is missing; `minimum` "
                              "is not a known key: did you mean `min`? (expected an integer or a number)")


def test_an_unknown_key_and_an_unknown_kind_get_a_did_you_mean(tmp_path):
    path = _edited(tmp_path, "min: 0.80, curve", "min: 0.80, partal_from: 0.3, curve")
    with pytest.raises(RubricError) as exc:
        load_rubric(path)
    assert str(exc.value).startswith(f"rubric.yaml line {_line_of(path, 'partal_from')}: stage blocktiling_2d, "
                                     "item speed: partal_from: is not a known key; did you mean partial_from?")
    path = _edited(tmp_path, "kind: fraction_of_baseline", "kind: fraction_of_baselin")
    with pytest.raises(RubricError) as exc:
        load_rubric(path)
    assert str(exc.value).startswith(f"rubric.yaml line {_line_of(path, 'fraction_of_baselin,')}: stage coalesced, "
                                     "item speed: kind: is 'fraction_of_baselin'; did you mean fraction_of_baseline?")
    path = _edited(tmp_path, "smem: ", "smme: ")
    with pytest.raises(RubricError) as exc:
        load_rubric(path)
    assert str(exc.value).startswith(f"rubric.yaml line {_line_of(path, 'smme: ')}: stage naive: launch.smme: "
                                     "is not a known key; did you mean smem?")


def test_a_path_outside_the_stages_keeps_its_keys(tmp_path):
    path = _edited(tmp_path, "  bonus: extra\n", "  bonus: extr\n")
    with pytest.raises(RubricError) as exc:
        load_rubric(path)
    assert str(exc.value).startswith(f"rubric.yaml line {_line_of(path, 'bonus: extr')}: settings.bonus: is 'extr'; "
                                     "did you mean extra?")


def test_the_shipped_titles_state_their_thresholds(tmp_path):
    from grader.rubric.titles import title_problems

    assert title_problems(load_rubric(ROOT / "rubric.yaml")) == []
    proc = _check_rubric(ROOT / "rubric.yaml", tmp_path)
    assert proc.returncode == 0 and "valid; 7 stages" in proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("old,new,said", [
    ("min: 0.80, curve", "min: 0.75, curve", "says '80%' but min is 0.75 (75%)"),
    ('title: "80% of cuBLAS SGEMM for full points"', 'title: "at least 85% of cuBLAS SGEMM"',
     "says '85%' but min is 0.8 (80%)"),
    ("at least 128 FFMA per", "at least 100 FFMA per", "says 'at least 100' but value is 128"),
    ("active 63% of cycles", "active 60% of cycles", "says '60%' but value is 63"),
])
def test_a_title_that_states_another_threshold_fails_check_rubric(tmp_path, old, new, said):
    path = _edited(tmp_path, old, new)
    load_rubric(path)  # valid YAML and keys: only the title disagrees
    proc = _check_rubric(path, tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = _line_of(path, new)
    assert f"error: rubric.yaml line {line}: stage " in proc.stderr and f": title: {said}" in proc.stderr
    assert "Traceback" not in proc.stderr and (tmp_path / "out" / "results.json").is_file()


def test_a_speedup_title_is_checked_against_its_min_and_curve(raw):
    from grader.rubric.titles import title_problems

    def with_speedup(title: str) -> list:
        bad = copy.deepcopy(raw)
        items = next(st for st in bad["stages"] if st["id"] == "tiled")["items"]
        speed = next(i for i in items if i["id"] == "speed")
        speed.clear()
        speed.update(id="speed", kind="speedup_over_stage", stage="coalesced", min=2.0, partial_from=1.5,
                     title=title, points=5)
        return title_problems(parse_rubric(bad))

    assert with_speedup("2x the coalesced kernel for full points (partial credit from 1.5x)") == []
    assert with_speedup("at least 2 times the coalesced kernel") == []
    (problem,) = with_speedup("3x the coalesced kernel for full points")
    assert problem.path.endswith(".title") and "says '3x' but min is 2" in problem.message


def test_a_missing_key_names_only_a_near_copy_as_its_misspelling(tmp_path):
    path = _edited(tmp_path, 'title: "80% of cuBLAS SGEMM for full points"', 'tittle: "80% of cuBLAS SGEMM for full points"')
    with pytest.raises(RubricError) as exc:
        load_rubric(path)
    assert "item speed: title: is missing; `tittle` is not a known key: did you mean `title`?" in str(exc.value)
    raw = yaml.safe_load(SHIPPED)
    del raw["stages"][0]["title"]  # its file: is read later, and is no misspelling of title
    with pytest.raises(RubricError) as exc:
        parse_rubric(raw)
    assert exc.value.problem == "is missing"


def test_a_benchmark_may_have_no_warm_up_but_not_fewer(raw):
    bare = copy.deepcopy(raw)
    bare["stages"][1]["bench"] = {"reps": 1, "min_reps": 1, "warmup": 0}
    assert parse_rubric(bare).stages[1].bench.warmup == 0
    err = _error(raw, lambda r: r["stages"][1].update(bench={"warmup": -1}))
    assert err.where == "rubric.yaml.stages[1].bench.warmup" and "an integer >= 0" in str(err)
    err = _error(raw, lambda r: r["stages"][1].update(bench={"reps": 0}))
    assert err.where == "rubric.yaml.stages[1].bench.reps" and "a positive number" in str(err)


def test_an_unclosed_flow_mapping_is_told_by_the_line_it_starts_on():
    from grader.rubric.load import rubric_from_text

    lines = (ROOT / "rubric.yaml").read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if "{id: speed, kind: fraction_of_baseline" in ln and ln.endswith("}"))
    lines[at] = lines[at][:-1]  # the closing brace forgotten
    with pytest.raises(RubricError) as info:
        rubric_from_text("\n".join(lines) + "\n", "rubric.yaml")
    assert str(info.value).startswith(f"rubric.yaml line {at + 1}: is not valid YAML: the flow mapping that starts "
                                      "here: did not find expected ',' or '}'"), str(info.value)
