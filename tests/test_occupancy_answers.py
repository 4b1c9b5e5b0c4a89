"""The answers file: schema, units, malformed fields and unparseable YAML."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grader.occupancy.answers import answer_schema, parse_answers
from grader.rubric.load import load_default_occupancy

ROOT = Path(__file__).resolve().parent.parent
CFG = load_default_occupancy()
SCHEMA = answer_schema(CFG)


def _leaves(node, prefix=""):
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _leaves(value, path + ".")
        else:
            yield path, value


def _nested(parents: list[str], leaf: str, raw: str) -> str:
    """YAML text that sets parents...leaf to the literal ``raw``."""
    head = "".join(f"{'  ' * i}{p}:\n" for i, p in enumerate(parents))
    return head + f"{'  ' * len(parents)}{leaf}: {raw}\n"


def test_starter_template_has_every_field_and_only_empty_values():
    text = (ROOT / "starter/occupancy/answers.yaml").read_text(encoding="utf-8")
    leaves = dict(_leaves(yaml.safe_load(text)))
    assert set(leaves) == set(SCHEMA)
    assert all(v is None for v in leaves.values())
    # Every key line carries a comment saying what goes there.
    key_lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(key_lines) >= len(SCHEMA)
    assert [ln for ln in key_lines if "#" not in ln] == []
    parsed = parse_answers(text, SCHEMA)
    assert parsed.values == {} and parsed.error is None
    assert set(parsed.problems) == set(SCHEMA)
    assert parsed.problems["ex1.max_blocks"] == "ex1.max_blocks: no answer (expected an integer)"


def test_solution_answers_parse_cleanly():
    parsed = parse_answers((ROOT / "solutions/occupancy/answers.yaml").read_text(encoding="utf-8"), SCHEMA)
    assert parsed.error is None and parsed.problems == {} and parsed.notes == []
    assert parsed.get("ex1.fix.shared_mem_kib") == 7 * 1024
    assert parsed.get("ex1.fix.bottleneck") == ("shared_mem", "blocks")
    assert parsed.get("gpu.compute_capability") == "9.0"
    assert parsed.get("ex5.issued_le_eligible") == "yes"  # YAML reads yes as True
    assert parsed.get("ex6.fastest_cap") == "255"


def test_malformed_field_names_the_field_and_the_expected_form_and_spares_the_rest():
    parsed = parse_answers("ex1:\n  blocks_by_registers: about 200\n  max_blocks: 19\n", SCHEMA)
    msg = parsed.problem("ex1.blocks_by_registers")
    assert msg.startswith("ex1.blocks_by_registers: expected an integer, got `about 200`")
    assert parsed.get("ex1.max_blocks") == 19
    assert parsed.problem("ex1.max_blocks") is None


@pytest.mark.parametrize("field, raw, value", [
    ("ex1.fix.shared_mem_kib", "7", 7168),
    ("ex1.fix.shared_mem_kib", "'7 KiB'", 7168),
    ("ex1.fix.shared_mem_kib", "7KB", 7168),
    ("ex1.fix.shared_mem_kib", "'7168 B'", 7168),
    ("ex1.fix.shared_mem_kib", "6.5", 6656),
    ("ex1.occupancy_pct", "29.7%", 29.7),
    ("ex1.occupancy_pct", "'29.7 %'", 29.7),
    ("ex1.blocks_by_registers", "'65,536'", 65536),
    ("ex1.blocks_by_registers", "19.0", 19),
    ("ex6.cap_64.time_ms", "'1250 us'", 1.25),
    ("ex6.cap_64.time_ms", "0.002 s", 2.0),
    ("ex6.fastest_cap", "cap_64", "64"),
    ("ex1.bottleneck", "Shared Memory", ("shared_mem",)),
    ("ex1.bottleneck", "[smem, SM]", ("shared_mem", "blocks")),
    ("ex5.dominant_stall", "Stall Long Scoreboard", "long_scoreboard"),
    ("ex5.memory_level", "L1TEX", "global"),
    ("ex5.issued_le_eligible", "no", "no"),
    ("gpu.compute_capability", "sm_90a", "9.0"),
    ("gpu.compute_capability", "8.6", "8.6"),
    ("ex4.smem_sweep.peak_occupancy_kib", "[0, 2, '4 KiB']", (0, 2048, 4096)),
    ("ex4.block_sweep.fastest_block", "256", (256,)),
])
def test_accepted_forms(field, raw, value):
    *parents, leaf = field.split(".")
    text = _nested(parents, leaf, raw)
    parsed = parse_answers(text, SCHEMA)
    assert parsed.problem(field) is None, parsed.problem(field)
    assert parsed.get(field) == (pytest.approx(value) if isinstance(value, float) else value)


@pytest.mark.parametrize("field, raw, expected", [
    ("ex1.blocks_by_registers", "19.5", "expected an integer, got `19.5`"),
    ("ex1.blocks_by_registers", "'19 blocks'", "expected an integer, got `19 blocks`"),
    ("ex1.occupancy_pct", "'30 KB'", "expected a percentage"),
    ("ex1.fix.shared_mem_kib", "'7 GB'", "expected a size in KiB"),
    ("ex6.cap_64.time_ms", "'3 fortnights'", "expected a time in ms"),
    ("ex1.bottleneck", "bandwidth", "expected one of: registers, shared_mem, warps, blocks"),
    ("gpu.compute_capability", "'10.0'", "expected a compute capability"),
    ("ex1.max_blocks", "[19]", "expected an integer, got a list"),
    ("ex1.max_blocks", "true", "expected an integer, got `true`"),
    ("ex2.explanation", "''", "no answer"),
    ("ex1.occupancy_pct", ".nan", "expected a percentage"),
    ("ex1.fix.shared_mem_kib", ".inf", "expected a size in KiB"),
    ("ex1.occupancy_pct", "1e999", "got `1e999` (not a finite number)"),
    ("ex1.max_blocks", "0x" + "f" * 40, "(a number too large (at most 1e+15 in size))"),
    ("ex1.max_blocks", "'1e300'", "got `1e300` (a number too large"),
    ("ex6.cap_64.time_ms", "'1e400 ms'", "(not a finite number)"),
    ("gpu.name", "2024-13-45", "got `2024-13-45` (cannot be read (month must be in 1..12))"),
    ("ex2.explanation", "'" + "x" * 30_000 + "'", "(30,000 characters; at most 20,000)"),
    ("ex1.max_blocks", "{a: 1, b: 2}", "got a mapping (with `a`, `b`)"),
])
def test_rejected_forms(field, raw, expected):
    *parents, leaf = field.split(".")
    text = _nested(parents, leaf, raw)
    parsed = parse_answers(text, SCHEMA)
    assert field not in parsed.values
    assert parsed.problem(field).startswith(f"{field}: ")
    assert expected in parsed.problem(field)


def test_a_section_that_is_not_a_mapping_fails_only_its_fields():
    parsed = parse_answers("ex1:\n  fix: 7\n  max_blocks: 19\n", SCHEMA)
    assert parsed.problem("ex1.fix.shared_mem_kib") == \
        "ex1.fix: expected a mapping with shared_mem_kib:, got `7`"
    assert parsed.get("ex1.max_blocks") == 19


def test_bad_yaml_gives_one_message_with_the_line_number():
    text = "gpu:\n  name: H200\nex1:\n  max_blocks: 19\n   bottleneck: [shared\n"
    parsed = parse_answers(text, SCHEMA)
    assert parsed.error is not None
    assert parsed.error.startswith("answers.yaml line 5: not valid YAML")
    assert parsed.values == {}
    # Every field reports the same file-level problem.
    assert parsed.problem("ex1.max_blocks") == parsed.error == parsed.problem("ex5.occupancy_pct")


def test_tab_indentation_is_reported_with_its_line():
    parsed = parse_answers("ex1:\n\tmax_blocks: 19\n", SCHEMA)
    assert parsed.error.startswith("answers.yaml line 2:")


def test_a_file_that_is_not_a_mapping_is_one_error():
    parsed = parse_answers("- 1\n- 2\n", SCHEMA)
    assert "expected a mapping of exercise sections" in parsed.error


def test_empty_file_is_all_missing_not_an_error():
    parsed = parse_answers("", SCHEMA)
    assert parsed.error is None and len(parsed.problems) == len(SCHEMA)


def test_unknown_keys_are_noted_not_fatal():
    parsed = parse_answers("ex1:\n  max_block: 19\n  max_blocks: 19\nextra: 1\n", SCHEMA)
    assert parsed.get("ex1.max_blocks") == 19
    assert any(n.startswith("`ex1.max_block`:") for n in parsed.notes)
    assert any(n.startswith("`extra`:") for n in parsed.notes)


def test_a_bad_value_inside_a_list_fails_its_field_only():
    parsed = parse_answers("ex4:\n  block_sweep:\n    fastest_block: [256, 0x%s]\n" % ("f" * 30)
                           + "    api_best_block: 256\n", SCHEMA)
    assert "a number too large" in parsed.problem("ex4.block_sweep.fastest_block")
    assert parsed.get("ex4.block_sweep.api_best_block") == 256


def test_many_unknown_keys_give_a_bounded_list_of_notes():
    text = "ex1:\n" + "".join(f"  key{i}: 1\n" for i in range(500))
    parsed = parse_answers(text, SCHEMA)
    assert len(parsed.notes) == 21 and parsed.notes[-1] == "... and 480 more unknown fields"


def test_a_misspelt_key_gets_the_closest_known_one():
    parsed = parse_answers("ex1:\n  max_blcoks: 19\n  fix:\n    shared_mem_kb: 7\nzzz: 1\n", SCHEMA)
    notes = {n.split(":")[0]: n for n in parsed.notes}
    assert "did you mean `ex1.max_blocks`?" in notes["`ex1.max_blcoks`"]
    assert "did you mean `ex1.fix.shared_mem_kib`?" in notes["`ex1.fix.shared_mem_kb`"]
    assert "check its spelling and indentation" in notes["`zzz`"]
