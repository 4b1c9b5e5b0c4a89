"""On a real GPU: the warm CuPy cache spares every child compiling CuPy's kernels.

Reads the suite's shared grading of starter/ (tests/gpu_jobs.py, graded with --keep-work): every
stage child, the checker and the memcheck children ran from a copy of the warm cache; none of them
may have compiled a CuPy kernel of its own (tests/cupy_cache_report.py), so none spent its
correctness phase in NVRTC (what that costs: docs/measurements/).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.gpu


def test_no_child_compiles_cupys_kernels_itself(starter_graded):
    g = starter_graded
    assert g.rc == 0, g.stderr
    assert g.phase("cupy_cache") is not None
    report = subprocess.run([sys.executable, str(ROOT / "tests" / "cupy_cache_report.py"), str(g.out)],
                            capture_output=True, text=True, timeout=120)
    warm = re.search(r"warm cache: (\d+) files", report.stdout)
    assert warm and int(warm.group(1)) >= 10, report.stdout + report.stderr
    children = [line for line in report.stdout.splitlines() if "compiled by the child" in line]
    assert len(children) >= 7, report.stdout  # six stage children and the checker, at least
    assert report.returncode == 0, report.stdout


def test_the_correctness_runs_do_not_wait_for_nvrtc(starter_graded):
    stages = starter_graded.detail["stages"]
    for sid in stages:
        seconds = starter_graded.phase("run.correctness", sid)
        assert seconds is not None and seconds > 0, (sid, seconds)  # how long: docs/measurements/
