"""The CLI end to end without a GPU: compile-level grading, bad input, exit codes.

These run nvcc (CI has it; a fresh machine gets it from NVIDIA's wheels through
grader/bootstrap.sh). `--no-gpu` makes them behave the same on a GPU machine.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.build import toolchain

ROOT = Path(__file__).resolve().parent.parent
SUBS = ROOT / "tests" / "submissions"
needs_nvcc = pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")


def run_cli(*args, out: Path):
    proc = subprocess.run([sys.executable, str(ROOT / "grader" / "run_local.py"), *map(str, args),
                           "--out", str(out), "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None
    return proc, results


def _by_number(results):
    return {t["number"]: t for t in results["tests"]}


@needs_nvcc
def test_solutions_compile_everywhere_and_gpu_items_say_why(tmp_path):
    proc, res = run_cli(ROOT / "solutions", "--no-gpu", out=tmp_path)
    assert proc.returncode == 0, proc.stderr
    tests = _by_number(res)
    for number in ("1", "2", "3", "4a", "4b", "5"):
        assert tests[f"{number}.compiles"]["status"] == "passed", tests[f"{number}.compiles"]["output"]
        correct = tests[f"{number}.correct"]
        assert correct["score"] == 0 and correct["extra_data"]["status"] == "not_evaluated"
        assert "not evaluated" in correct["output"]
    assert tests["4b.no_spills"]["status"] == "passed"
    assert res["score"] == sum(t["score"] for t in res["tests"])
    assert (tmp_path / "summary.md").exists() and (tmp_path / "grading.json").exists()


@needs_nvcc
def test_starter_compiles(tmp_path):
    proc, res = run_cli(ROOT / "starter", "--no-gpu", out=tmp_path)
    assert proc.returncode == 0, proc.stderr
    tests = _by_number(res)
    assert all(tests[f"{n}.compiles"]["status"] == "passed" for n in ("1", "2", "3", "4a", "4b", "5"))


@needs_nvcc
def test_compile_error_fails_only_its_stage_and_shows_the_message(tmp_path):
    proc, res = run_cli(SUBS / "compile_error", "--no-gpu", "--stages", "tiled,naive", out=tmp_path)
    assert proc.returncode == 0
    tests = _by_number(res)
    assert tests["3.compiles"]["status"] == "failed"
    assert "error" in tests["3.compiles"]["output"] and "nvcc failed" in tests["3.compiles"]["output"]
    assert "file missing: expected gemm/naive.cu" in tests["1.compiles"]["output"]
    assert "4b.compiles" not in tests  # --stages limits the run


@needs_nvcc
def test_wrong_kernel_name_lists_what_was_found(tmp_path):
    proc, res = run_cli(SUBS / "wrong_name", "--no-gpu", "--stages", "coalesced", out=tmp_path)
    out = _by_number(res)["2.compiles"]["output"]
    assert "expected `mmCoalesced` in gemm/coalesced.cu; found: mmCoalesce" in out


@needs_nvcc
def test_submission_nested_one_folder_down(tmp_path):
    nested = tmp_path / "sub" / "my-project"
    shutil.copytree(ROOT / "solutions" / "gemm", nested / "gemm")
    proc, res = run_cli(tmp_path / "sub", "--no-gpu", "--stages", "naive", out=tmp_path / "out")
    assert _by_number(res)["1.compiles"]["status"] == "passed"
    assert "one folder down" in res["output"]


def test_bad_rubric_exits_2_and_still_writes_results(tmp_path):
    bad = tmp_path / "rubric.yaml"
    bad.write_text((ROOT / "rubric.yaml").read_text().replace("points: 6}", "points: -6}", 1))
    proc, res = run_cli(ROOT / "solutions", "--rubric", bad, out=tmp_path / "out")
    assert proc.returncode == 2
    assert "points" in proc.stderr and "Traceback" not in proc.stderr
    assert res is not None and res["score"] == 0


def test_missing_submission_exits_2(tmp_path):
    proc, res = run_cli(tmp_path / "nope", out=tmp_path / "out")
    assert proc.returncode == 2 and "does not exist" in proc.stderr and res is not None


def test_check_rubric_only(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "grader" / "run_local.py"), "--check-rubric"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and "valid; 6 stages" in proc.stderr


@needs_nvcc
@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() != 0,
                    reason="switching users needs root")
def test_nvcc_runs_as_the_unprivileged_student_user():
    import os
    import pwd
    import tempfile

    from grader.build.compile import compile_stage
    from grader.spec.rubric import load_rubric

    user = "nobody"
    pwd.getpwnam(user)
    rubric = load_rubric(ROOT / "rubric.yaml")
    base = Path(tempfile.mkdtemp(prefix="grader-user-test-"))  # pytest's own folders are root-only
    try:
        os.chmod(base, 0o711)
        (base / "out").mkdir(mode=0o700)  # e.g. made under umask 077: the grader opens its own folders
        work = base / "out" / "work" / "naive"
        c = compile_stage(rubric.stage("naive"), ROOT / "solutions", work, toolchain.find_nvcc(),
                          ["-arch=sm_90a"], rubric, [512, 1280, 4096], user=user)
        assert c.ok, c.problem
        assert (work / "build").stat().st_uid == pwd.getpwnam(user).pw_uid
    finally:
        shutil.rmtree(base, ignore_errors=True)
