"""The handout's rubric tables are generated from rubric.yaml and must be current, so the handout
and the grader can never disagree (python -m grader handout --write regenerates them)."""
import copy
import re
import subprocess
import sys

import pytest
import yaml

from grader.instructor.handout import BLOCKS, HANDOUT, apply, main, render_blocks, threshold
from grader.rubric.load import load_rubric, parse_rubric
from tests.report_check_helpers import ROOT, RUBRIC

TEXT = HANDOUT.read_text(encoding="utf-8")


def test_the_committed_handout_equals_the_generated_blocks():
    new, changed, missing = apply(TEXT, render_blocks(RUBRIC))
    assert missing == [], f"assignment/README.md lacks the blocks {missing}"
    assert changed == [], f"stale blocks {changed}: run python -m grader handout --write"
    assert new == TEXT


def test_check_passes_on_the_repository():
    assert main(["--check"]) == 0


def test_every_stage_id_kernel_and_file_appears():
    for st in RUBRIC.stages:
        for word in (st.id, st.kernel, st.file, st.launch_symbol):
            assert word in TEXT, word
    for t in RUBRIC.report.transitions:
        assert f"## {t.before} -> {t.after}" in TEXT


def test_every_item_appears_with_its_points_and_threshold():
    for st in RUBRIC.stages:
        for it in st.items:
            row = next((ln for ln in TEXT.splitlines() if ln.startswith(f"| {st.number}.{it.id}: ")), None)
            assert row is not None, (st.id, it.id)
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]
            assert cells[3] == f"{it.points:g}" and cells[1] == it.kind
            assert cells[2] == " ".join(threshold(it, st, RUBRIC).split()).replace("|", "\\|")
    for spec in RUBRIC.occupancy.items.values():
        assert f"| {spec.number} | {spec.title} | {spec.points:g} |" in TEXT
    for spec in RUBRIC.report.items():
        assert f"| {spec.number} | {spec.title} | {spec.points:g} |" in TEXT
    assert f"**{RUBRIC.max_points:g}**" in TEXT


def test_a_rubric_change_makes_the_handout_stale(tmp_path):
    raw = yaml.safe_load((ROOT / "rubric.yaml").read_text())
    changed = copy.deepcopy(raw)
    speed = next(i for i in changed["stages"][2]["items"] if i["id"] == "speed")
    speed["min"], speed["points"] = 0.2, 5
    rubric_path = tmp_path / "rubric.yaml"
    rubric_path.write_text(yaml.safe_dump(changed, sort_keys=False))
    handout = tmp_path / "README.md"
    handout.write_text(TEXT)
    args = ["--rubric", str(rubric_path), "--handout", str(handout)]
    assert main(["--check", *args]) == 1
    assert main(["--write", *args]) == 0
    assert main(["--check", *args]) == 0
    text = handout.read_text()
    assert "at least 20% of cuBLAS SGEMM's speed" in text and text != TEXT
    _, changed_blocks, _ = apply(text, render_blocks(parse_rubric(changed)))
    assert changed_blocks == []


def test_a_missing_block_is_reported(tmp_path, capsys):
    handout = tmp_path / "README.md"
    handout.write_text(re.sub(r"<!-- BEGIN GENERATED: totals -->.*?<!-- END GENERATED: totals -->", "", TEXT,
                              flags=re.S))
    assert main(["--check", "--handout", str(handout)]) == 1
    assert "no block for totals" in capsys.readouterr().err


def test_every_block_is_in_the_handout():
    for name in BLOCKS:
        assert f"<!-- BEGIN GENERATED: {name} -->" in TEXT and f"<!-- END GENERATED: {name} -->" in TEXT


def test_load_rubric_path():
    assert load_rubric(ROOT / "rubric.yaml").stages == RUBRIC.stages


@pytest.mark.parametrize("entry", [["-m", "grader.instructor.handout"], ["-m", "grader", "handout"]])
def test_an_invalid_rubric_exits_2_with_its_error_not_a_traceback(tmp_path, entry):
    raw = yaml.safe_load((ROOT / "rubric.yaml").read_text())
    raw["stages"][0]["items"][0]["points"] = "ten"
    bad = tmp_path / "rubric.yaml"
    bad.write_text(yaml.safe_dump(raw, sort_keys=False))
    proc = subprocess.run([sys.executable, *entry, "--check", "--rubric", str(bad)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    line = next(i + 1 for i, text in enumerate(bad.read_text().splitlines()) if text.strip() == "points: ten")
    assert f"error: rubric.yaml line {line}: stage naive, item compiles: points: is 'ten' (str) (expected an integer " \
           "or a number)" in proc.stderr
    missing = subprocess.run([sys.executable, *entry, "--check", "--handout", str(tmp_path / "nope.md")], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "nope.md: cannot be read" in missing.stderr and "Traceback" not in missing.stderr


def test_the_stale_hint_keeps_the_files_it_was_given(tmp_path, capsys):
    raw = yaml.safe_load((ROOT / "rubric.yaml").read_text())
    next(i for i in raw["stages"][2]["items"] if i["id"] == "speed")["points"] = 5
    rubric_path = tmp_path / "my rubric.yaml"
    rubric_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert main(["--check", "--rubric", str(rubric_path)]) == 1
    err = capsys.readouterr().err
    assert f"run python -m grader handout --write --rubric '{rubric_path}'" in err
    handout = tmp_path / "README.md"
    handout.write_text(TEXT)
    assert main(["--check", "--rubric", str(rubric_path), "--handout", str(handout)]) == 1
    assert f"--write --rubric '{rubric_path}' --handout {handout}" in capsys.readouterr().err
