"""The submission's compiles share one deadline (settings.timeouts.static_total_s).

A header that includes itself twice, 40 deep, in every stage file makes each compile run until its
limit: before the shared deadline the grading cost compile_s once per build (about 8 minutes of a
worker for the whole rubric, and Gradescope's "Autograder error"). Here a rubric copy with a short
deadline grades three such stages: every compile item fails naming the setting, results.json is written.
"""
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from grader.compile import toolchain
from grader.compile.student import Deadline

ROOT = Path(__file__).resolve().parent.parent
BOMB = Path(ROOT / "tests" / "submissions" / "include_bomb" / "gemm")
STAGES = {"naive": "mmNaive", "coalesced": "mmCoalesced", "tiled": "mmTiled"}
# The shared deadline, counted from the grading's start. No bombed compile ever ends by itself, so any deadline stops
# every one of them (a compile still waiting for a core when it passes is not started, and says so alike); until then
# each running one keeps a cc1plus busy on a core. Nothing honest has to fit inside it.
DEADLINE_S = 3


@pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")
def test_every_compile_of_a_bombed_submission_ends_at_the_shared_deadline(tmp_path):
    gemm = tmp_path / "sub" / "gemm"
    gemm.mkdir(parents=True)
    (gemm / "bomb.h").write_text((BOMB / "bomb.h").read_text())
    for stage, kernel in STAGES.items():
        (gemm / f"{stage}.cu").write_text(
            f'#include "bomb.h"\nextern "C" __global__ void {kernel}(const float* A, const float* B, float* C, int N)'
            " { C[0] = A[0] * B[0]; }\n")
    rubric = yaml.safe_load((ROOT / "rubric.yaml").read_text())
    rubric["settings"]["timeouts"]["static_total_s"] = DEADLINE_S
    path = tmp_path / "rubric.yaml"
    path.write_text(yaml.safe_dump(rubric, sort_keys=False))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "grader" / "run_local.py"), str(tmp_path / "sub"), "--out",
                           str(out), "--quiet", "--no-gpu", "--rubric", str(path), "--stages", ",".join(STAGES)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    tests = {t["number"]: t for t in json.loads((out / "results.json").read_text())["tests"]}
    for number in ("1.compiles", "2.compiles", "3.compiles"):
        t = tests[number]
        assert t["extra_data"]["status"] == "failed", t["output"][:600]
        assert "settings.timeouts.static_total_s" in t["output"], t["output"][:600]


def test_a_compile_cut_to_the_deadline_runs_until_it():
    """What is left of the deadline, as a compile's limit, is rounded up to a tenth of a second, never down: a compile
    stopped at that limit has reached the deadline, so its message names the setting (rounded down, a compile could
    end a few milliseconds early and name only a limit of, say, 2.9 s that no setting gives)."""
    for left in (2.94, 2.96, 0.04, 7.5):
        deadline = Deadline.after(time.monotonic(), left)
        cut = deadline.cut(120)
        assert cut >= deadline.left() and round(cut, 1) == cut
    deadline = Deadline.after(time.monotonic(), 60)
    assert deadline.cut(1.5) == 1.5  # a compile's own shorter limit stays its own
    assert Deadline.after(time.monotonic() - 5, 2).cut(120) == 0.1  # past: the shortest limit, not a negative one
