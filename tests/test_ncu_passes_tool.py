"""docs/measurements/scripts/ncu_passes.py (a one-off experiment, kept beside the record that used it): its metric
groups come from the grader's own lists, and it reads the passes from ncu's real progress line (tests/fixtures/ncu:
a capture of ncu 2025.3.1 on an H200)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "docs" / "measurements" / "scripts"
sys.path.insert(0, str(SCRIPTS))

import ncu_passes  # noqa: E402
import pytest  # noqa: E402

from grader.compile.toolchain import find_ncu  # noqa: E402
from grader.profile import diagnosis as D  # noqa: E402
from grader.profile.ncu import metrics_needed, rubric_metrics  # noqa: E402
from grader.rubric.load import load_rubric  # noqa: E402


def test_the_groups_are_the_graders_lists_split_as_named():
    rubric = load_rubric(ROOT / "rubric.yaml")
    g = ncu_passes.groups(rubric)
    stalls, sol = set(D.STALLS.values()), {D.SM, D.MEM, D.L1, D.L2}
    assert g["all"] == metrics_needed(rubric) and g["rubric"] == rubric_metrics(rubric)
    assert set(g["all-stalls"]) == set(g["all"]) - stalls
    assert set(g["all-breakdowns"]) == set(g["all"]) - sol
    assert set(g["all-stalls-breakdowns"]) == set(g["all"]) - stalls - sol
    assert set(g["stalls"]) == stalls and set(g["breakdowns"]) == sol
    assert [g[k] for k in ("SM", "memory", "L1", "L2", "DRAM")] == [[D.SM], [D.MEM], [D.L1], [D.L2], [D.DRAM]]
    assert all(set(ms) <= set(g["all"]) for ms in g.values())


def test_passes_are_read_from_ncus_progress_line():
    captured = (ROOT / "tests/fixtures/ncu/ncu2025.3.1_sections_tiled_h200.txt").read_text()
    assert ncu_passes.passes(captured) == 17
    assert ncu_passes.passes('==PROF== Profiling "f": 0%....50%....100% - 1 pass\n') == 1
    # a kernel name or an error that merely mentions passes is not the count
    assert ncu_passes.passes('==PROF== Profiling "two_passes": 0%....50%....100% - 9 passes\n') == 9
    assert ncu_passes.passes("==ERROR== 14 passes were requested but the kernel failed\n") is None
    assert ncu_passes.passes("") is None


def test_without_ncu_it_says_so_and_exits_2(tmp_path):
    env = {"PATH": str(tmp_path), "GRADER_NCU": str(tmp_path / "missing-ncu"), "HOME": str(tmp_path)}
    if find_ncu(env).path is not None:  # a system install (/usr/local/cuda) is found whatever PATH says
        pytest.skip("an ncu is installed in a system folder here")
    proc = subprocess.run([sys.executable, str(SCRIPTS / "ncu_passes.py"), str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no ncu found" in proc.stderr
    assert not (tmp_path / "out").exists()
