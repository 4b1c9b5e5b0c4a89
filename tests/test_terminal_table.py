"""The TA's terminal table (grader/outputs/summary.py: render_terminal) and `grade`'s progress where there
is no terminal."""
import io
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from grader.grading import load_grading
from grader.outputs.summary import ladder_rows, render_terminal

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("width", [60, 80, 100])
def test_the_points_and_the_stage_names_are_never_cut(width):
    grading = load_grading(ROOT / "tests" / "fixtures" / "gradings" / "reference" / "grading.json")
    out = io.StringIO()
    render_terminal(grading, Console(width=width, file=out, force_terminal=False, color_system=None))
    text = out.getvalue()
    for row in ladder_rows(grading):
        assert row[0] in text and f" {row[-1]} " in text, (row, text)


def test_without_a_terminal_grade_prints_a_line_a_step(tmp_path):
    proc = subprocess.run([sys.executable, "grader/run_local.py", "starter/", "--stages", "naive", "--no-gpu",
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    steps = [ln for ln in proc.stderr.splitlines() if ln.startswith("grading: ")]
    assert steps[0].startswith("grading: probing the GPU and tools (") and len(steps) >= 3, proc.stderr
    assert any(ln.startswith("grading: compiling naive (") for ln in steps)
