"""A grading records how students' processes were fenced; without bwrap it says so, once, everywhere."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.compile import toolchain

ROOT = Path(__file__).resolve().parent.parent
needs_nvcc = pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")


def _grade(tmp_path: Path, **env_extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out"
    env = dict(os.environ, **env_extra)
    proc = subprocess.run([sys.executable, str(ROOT / "grader" / "run_local.py"), str(ROOT / "solutions"),
                           "--no-gpu", "--quiet", "--stages", "naive", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, out


@needs_nvcc
def test_weak_fence_is_recorded_and_announced(tmp_path):
    proc, out = _grade(tmp_path, GRADER_SANDBOX="weak")
    grading = json.loads((out / "grading.json").read_text())
    assert grading["sandbox"]["confinement"] == "weak"
    assert grading["sandbox"]["reason"] == "GRADER_SANDBOX=weak"
    assert proc.stderr.count("without the bubblewrap sandbox") == 1
    assert "WITHOUT the bubblewrap sandbox" in (out / "summary.md").read_text()


@needs_nvcc
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed here")
def test_bwrap_fence_is_recorded_without_a_warning(tmp_path):
    proc, out = _grade(tmp_path)
    grading = json.loads((out / "grading.json").read_text())
    assert grading["sandbox"]["confinement"] == "bwrap", grading["sandbox"]
    assert "without the bubblewrap sandbox" not in proc.stderr
    assert "Sandbox: bwrap sandbox" in (out / "summary.md").read_text()
