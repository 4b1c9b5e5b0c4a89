"""tools/phase_times.py with several gradings: one column each, a detail under the step it was in.

Two gradings whose steps hold different details (the occupancy build in the occupancy step of one and
in the compile step of the other; the warm CuPy cache and the checker's parts in the second only): each
must be listed under its own step, with "-" where a column does not have it.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grader.clock import Phase
from grader.evidence.sandbox import PartyTimeline
from tests.test_grading_json import synthetic_grading

ROOT = Path(__file__).resolve().parent.parent


def _write(folder: Path, phases: list[Phase], seconds: float) -> Path:
    g = synthetic_grading()
    g.phases, g.seconds = phases, seconds
    folder.mkdir()
    g.write(folder / "grading.json")
    return folder / "grading.json"


def test_columns_of_different_gradings_keep_each_detail_under_its_step(tmp_path):
    before = _write(tmp_path / "before", [
        Phase("compile", 1.0, "naive", True), Phase("compile_stages", 1.2),
        Phase("run", 3.0, "naive", True), Phase("run_stages", 3.1),
        Phase("build", 3.0, "occupancy", True), Phase("grade_occupancy", 6.5),
        Phase("outputs", 1.0)], 11.8)
    after = _write(tmp_path / "after", [
        Phase("compile", 1.1, "naive", True), Phase("build", 3.0, "occupancy", True), Phase("compile_stages", 3.1),
        Phase("cupy_cache", 0.02, "", True), Phase("run", 1.5, "naive", True), Phase("run_stages", 1.6),
        Phase("check.start", 0.8, "", True), Phase("check_results", 1.0),
        Phase("grade_occupancy", 3.5), Phase("outputs", 1.0)], 10.2)
    table = subprocess.run([sys.executable, "tools/phase_times.py", str(before), str(after)], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert table[0] == "| phase | before (s) | after (s) |"
    rows = [line.split(" | ")[0].lstrip("| ").replace("&nbsp;", " ") for line in table[2:]]
    assert rows == ["compile_stages", "  compile [naive]", "  build [occupancy]",
                    "run_stages", "  cupy_cache", "  run [naive]",
                    "check_results", "  check.start",
                    "grade_occupancy", "  build [occupancy]",
                    "outputs", "**total**"]
    cells = {i: line.split(" | ")[1:] for i, line in enumerate(table[2:])}
    assert cells[2] == ["-", "3.00 |"]  # the build, in the compile step: the second grading only
    assert cells[9] == ["3.00", "- |"]  # the build, in the occupancy step: the first grading only
    assert cells[7][0] == "-"  # the first grading has no checker step


def test_the_timeline_view_places_steps_and_children_from_the_grading_start(tmp_path):
    g = synthetic_grading()
    g.phases = [Phase("probe", 1.0, ended=101.0), Phase("compile_stages", 2.0, ended=103.0),
                Phase("run_stages", 5.0, ended=108.0)]
    g.timeline = [PartyTimeline("naive", [(103.1, "start"), (105.5, "wait correctness"), (105.6, "go correctness"),
                                          (107.9, "end")]),
                  PartyTimeline("racecheck:tiled", [(103.1, "start"), (107.0, "end")])]
    (tmp_path / "g").mkdir()
    g.write(tmp_path / "g" / "grading.json")
    out = subprocess.run([sys.executable, "tools/phase_times.py", "--timeline", str(tmp_path / "g" / "grading.json")],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[2:5] == ["| step probe | 0.00 - 1.00 |", "| step compile_stages | 1.00 - 3.00 |",
                        "| step run_stages | 3.00 - 8.00 |"]
    assert out[5] == "| naive | start 3.10 · wait correctness 5.50 · go correctness 5.60 · end 7.90 |"
    assert out[6] == "| racecheck:tiled | start 3.10 · end 7.00 |"


def test_phase_times_reads_every_stored_grading_of_the_demo_class():
    """tools/phase_times.py over the real stored GPU gradings of tests/fixtures/gradings/: the table (one column
    each) and each one's timeline."""
    from tests.gradings_helpers import FIXTURES, NAMES

    files = [str(FIXTURES / n / "grading.json") for n in NAMES]
    table = subprocess.run([sys.executable, "tools/phase_times.py", *files], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
    assert table.returncode == 0, table.stderr
    assert "run_stages" in table.stdout and "profile" in table.stdout
    for f in files:
        timeline = subprocess.run([sys.executable, "tools/phase_times.py", "--timeline", f], cwd=ROOT,
                                  capture_output=True, text=True, timeout=120)
        assert timeline.returncode == 0 and timeline.stdout.strip(), (f, timeline.stderr)
