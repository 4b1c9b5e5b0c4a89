"""The rubric's occupancy section: rubric.yaml's loads, and mistakes name their key path."""
from __future__ import annotations

import copy

import pytest
import yaml

from grader import REPO_ROOT
from grader.evidence.params import NoParams
from grader.model import Bonus
from grader.occupancy.calculator import KIB
from grader.rubric.errors import RubricError
from grader.rubric.items import VISIBILITIES
from grader.rubric.load import load_default_occupancy, load_rubric, parse_rubric
from grader.rubric.occupancy import ITEM_IDS, load_occupancy_config


@pytest.fixture
def raw() -> dict:
    return yaml.safe_load((REPO_ROOT / "rubric.yaml").read_text(encoding="utf-8"))["occupancy"]


def test_default_section_loads_with_the_handout_parameters():
    cfg = load_default_occupancy()
    e1 = cfg.ex1
    assert (e1.max_warps, e1.max_blocks, e1.registers, e1.smem_per_sm) == (64, 32, 65536, 228 * KIB)
    assert (e1.threads_per_block, e1.regs_per_thread, e1.smem_per_block) == (32, 8, 12 * KIB)
    assert e1.target_occupancy_pct == 50
    assert cfg.ex6.register_caps == (255, 64, 32)
    assert cfg.ex4.smem_points == tuple(k * KIB for k in (0, 2, 4, 8, 16, 32, 48))
    assert cfg.ex4.block_points == (32, 64, 128, 256, 512, 1024)
    assert cfg.ex5.stalls["long_scoreboard"] == 11.90
    assert cfg.reference.compute_capability == "9.0" and cfg.reference.sm_count == 132
    assert (cfg.program_file, cfg.answers_file) == ("occupancy/occ.cu", "occupancy/answers.yaml")
    assert "CUDA_CHECK" in cfg.program.check_macros


def test_every_item_has_points_title_and_a_valid_visibility():
    cfg = load_default_occupancy()
    assert tuple(cfg.items) == ITEM_IDS
    for spec in cfg.items.values():
        assert spec.points > 0 and spec.title and spec.visibility in VISIBILITIES
    assert len({s.number for s in cfg.items.values()}) == len(ITEM_IDS)
    assert cfg.max_points == sum(s.points for s in cfg.items.values())


def test_the_section_loads_under_the_lead_s_where(raw):
    cfg = load_occupancy_config(raw)
    assert cfg.ex2.dynamic_smem == 12 * KIB


def test_unknown_key_names_its_path(raw):
    raw["ex1"]["kernel"]["colour"] = "red"
    with pytest.raises(RubricError) as err:
        load_occupancy_config(raw)
    assert err.value.where == "rubric.yaml.occupancy.ex1.kernel.colour"
    assert "threads_per_block" in err.value.expected


def test_wrong_type_names_its_path_and_the_expected_form(raw):
    raw["ex1"]["sm"]["max_warps"] = "64"
    with pytest.raises(RubricError) as err:
        load_occupancy_config(raw)
    assert err.value.where == "rubric.yaml.occupancy.ex1.sm.max_warps"
    assert "integer" in err.value.expected


@pytest.mark.parametrize("mutate, where", [
    (lambda r: r["items"].pop("ex5.occupancy"), "items.ex5.occupancy"),
    (lambda r: r["items"].__setitem__("ex9.bonus", {"title": "x", "points": 1}), "items.ex9.bonus"),
    (lambda r: r["items"]["ex1.fix"].__setitem__("visibility", "sometimes"),
     "items.ex1.fix.visibility"),
    (lambda r: r["items"]["ex1.fix"].__setitem__("points", -1), "items.ex1.fix.points"),
    (lambda r: r["reference_device"].__setitem__("compute_capability", "6.1"),
     "reference_device.compute_capability"),
    (lambda r: r["ex6"].__setitem__("register_caps", []), "ex6.register_caps"),
    (lambda r: r["ex4"]["block_sweep"].__setitem__("block_sizes", [32, True]),
     "ex4.block_sweep.block_sizes"),
    (lambda r: r.pop("files"), "files"),
    (lambda r: r.__setitem__("ex5", [1, 2]), "ex5"),
])
def test_mistakes_raise_with_the_key_path(raw, mutate, where):
    bad = copy.deepcopy(raw)
    mutate(bad)
    with pytest.raises(RubricError) as err:
        load_occupancy_config(bad, where="rubric.yaml: occupancy")
    assert err.value.where == f"rubric.yaml: occupancy.{where}"
    assert err.value.expected  # every mistake also says what would have been accepted


def test_instructors_can_change_the_parameters(raw):
    raw["ex1"]["kernel"] = {"threads_per_block": 64, "regs_per_thread": 40, "shared_mem_kib": 16}
    raw["ex6"]["register_caps"] = [255, 96, 40]
    raw["items"]["ex1.fix"]["visibility"] = "after_due_date"
    cfg = load_occupancy_config(raw)
    assert cfg.ex1.smem_per_block == 16 * KIB and cfg.ex1.regs_per_thread == 40
    assert cfg.ex6.register_caps == (255, 96, 40)
    assert cfg.items["ex1.fix"].visibility == "after_due_date"


def test_the_rubric_parses_its_section_once_into_a_typed_config(raw):
    rubric = load_rubric(REPO_ROOT / "rubric.yaml")
    assert rubric.occupancy == load_occupancy_config(raw)
    assert not hasattr(rubric, "extra")
    assert rubric.part_ids[-2:] == ["occupancy", "report"]
    assert rubric.max_points == (sum(s.max_points for s in rubric.stages if s.bonus is Bonus.NONE)
                                 + rubric.occupancy.max_points + rubric.report.max_points)


def test_a_bad_section_stops_the_rubric_with_its_key_path(raw):
    doc = yaml.safe_load((REPO_ROOT / "rubric.yaml").read_text(encoding="utf-8"))
    doc["occupancy"]["ex3"]["runs_kib"] = [12, "lots"]
    with pytest.raises(RubricError) as err:
        parse_rubric(doc)
    assert err.value.where == "rubric.yaml.occupancy.ex3.runs_kib" and "list of numbers" in err.value.expected
    del doc["occupancy"]
    rubric = parse_rubric(doc)
    assert rubric.occupancy is None and "occupancy" not in rubric.part_ids


def test_anchor_keys_are_free_and_items_carry_their_number(raw):
    raw["x-shared"] = [1, 2]
    raw["items"]["ex1.fix"]["number"] = "1.9"
    cfg = load_occupancy_config(raw)
    assert cfg.items["ex1.fix"].number == "1.9" and cfg.items["ex1.bottleneck"].number == "O.8"
    assert all(i.kind is None and i.params == NoParams() for i in cfg.items.values())
