"""The Gradescope package end to end: build the zip, unpack it into a temporary /autograder tree,
run its setup.sh (reuse mode: the script path runs, nothing is installed) and its run_autograder
against sample submissions; the crash fallbacks; the Dockerfile runs the same install script.

Grading here is static (GRADER_USE_GPU=0), so the results are the same on a GPU machine.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.compile import toolchain
from grader.deploy.gradescope import build as gbuild
from grader.deploy.gradescope.policy import (
    PENDING_PREFIX,
    apply_no_gpu_policy,
    is_gpu_item,
    read_config,
    resolve_policy,
)
from grader.evidence.results import Results, ResultsTestExtra
from grader.outputs.results import OUTPUT_FORMATS, VISIBILITIES

ROOT = Path(__file__).resolve().parent.parent
needs_nvcc = pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")


def check_results(path: Path) -> dict:
    """results.json as Gradescope reads it: strict JSON, the documented fields and values."""
    text = path.read_text(encoding="utf-8")
    data = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-finite number {c} in {path}"))
    assert isinstance(data, dict)
    assert math.isfinite(data["score"])
    assert isinstance(data["execution_time"], int) and data["execution_time"] >= 0
    assert data["output_format"] in OUTPUT_FORMATS and data["visibility"] in VISIBILITIES
    assert data["stdout_visibility"] in VISIBILITIES
    assert isinstance(data["tests"], list) and data["tests"]
    for t in data["tests"]:
        assert isinstance(t["name"], str) and t["name"] and isinstance(t["number"], str)
        assert t["visibility"] in VISIBILITIES and t["output_format"] in OUTPUT_FORMATS
        # hand-graded, or pending GPU grading: neutral, outside the autograder's total, its points kept
        if t["extra_data"]["status"] == "manual" or t["extra_data"].get("pending_gpu") is True:
            assert not {"score", "max_score", "status"} & t.keys(), t["number"]
            points = t["extra_data"]["hand_graded_points" if t["extra_data"]["status"] == "manual"
                                     else "pending_gpu_points"]
            assert math.isfinite(points) and points >= 0
            continue
        assert math.isfinite(t["score"]) and math.isfinite(t["max_score"])
        assert t["status"] in ("passed", "failed")
    assert abs(data["score"] - sum(t.get("score", 0.0) for t in data["tests"])) < 1e-6
    for entry in data.get("leaderboard", []):
        assert {"name", "value"} <= entry.keys()
    return data


# --------------------------------------------------------------------------------------------
# The zip
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pkg") / "autograder.zip"
    names = gbuild.build(out)
    assert names
    return out


def test_zip_layout_and_no_solutions(package):
    with zipfile.ZipFile(package) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        manifest = json.loads(zf.read(gbuild.MANIFEST_NAME))
    names = set(infos)
    # Gradescope's two files at the root, executable
    for name in ("setup.sh", "run_autograder"):
        assert name in names
        assert (infos[name].external_attr >> 16) & 0o777 == 0o755
    assert (infos["grader/deploy/install.sh"].external_attr >> 16) & 0o111
    for needed in ("grader/cli.py", "grader/run_local.py", "grader/deploy/install.sh", "grader/bootstrap.sh",
                   "grader/deploy/gradescope/run.py", "rubric.yaml", "pyproject.toml", "gradescope.env",
                   "starter/gemm/naive.cu", "starter/occupancy/answers.yaml"):
        assert needed in names, needed
    assert not [n for n in names if n.split("/")[0] in ("solutions", "tests", ".git", ".venv")]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # no member is a copy of a reference solution
    sol = {p.read_bytes() for p in (ROOT / "solutions").rglob("*") if p.is_file()}
    with zipfile.ZipFile(package) as zf:
        assert not [n for n in names if zf.read(n) in sol]
    assert set(manifest["files"]) == names - {gbuild.MANIFEST_NAME}
    assert "GRADER_NO_GPU_POLICY=pending" in read_config_text(package)


def read_config_text(package: Path) -> str:
    with zipfile.ZipFile(package) as zf:
        return zf.read(gbuild.CONFIG_NAME).decode()


def test_zip_is_reproducible(package, tmp_path):
    again = tmp_path / "again.zip"
    gbuild.build(again)
    assert again.read_bytes() == package.read_bytes()


def test_build_cli_options(tmp_path):
    out = tmp_path / "a.zip"
    # -S: no site-packages, as in the Dockerfile's python:slim stage (the build is standard library only)
    proc = subprocess.run([sys.executable, "-S", "-m", "grader.deploy.gradescope", "build", "--out", str(out),
                           "--no-gpu-policy", "hide", "--time-limit", "1500"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = read_config_text(out)
    assert "GRADER_NO_GPU_POLICY=hide" in text and "GRADER_TIME_LIMIT_S=1500" in text
    bad = subprocess.run([sys.executable, "-m", "grader.deploy.gradescope", "build", "--out", str(out),
                          "--no-gpu-policy", "sometimes"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2


def test_build_refuses_a_copy_of_a_solution(tmp_path):
    fake = tmp_path / "repo"
    for entry in ("grader", "starter", "solutions"):
        shutil.copytree(ROOT / entry, fake / entry, ignore=shutil.ignore_patterns("__pycache__"))
    for entry in ("rubric.yaml", "pyproject.toml"):
        shutil.copy(ROOT / entry, fake / entry)
    shutil.copy(fake / "solutions" / "gemm" / "wmma.cu", fake / "grader" / "reference_wmma.cu")
    with pytest.raises(gbuild.BuildError, match="copy of solutions/gemm/wmma.cu"):
        gbuild.build(tmp_path / "x.zip", fake)


# --------------------------------------------------------------------------------------------
# An /autograder tree: setup.sh, then run_autograder
# --------------------------------------------------------------------------------------------
# The variables the package's scripts read (others, e.g. GRADER_NVCC, stay as the machine has them).
PACKAGE_VARS = ("GRADER_AUTOGRADER_DIR", "GRADER_SOURCE_DIR", "GRADER_SUBMISSION_DIR", "GRADER_RESULTS_DIR",
                "GRADER_TIME_LIMIT_S", "GRADER_NO_GPU_POLICY", "GRADER_USE_GPU", "GRADER_STAGES",
                "GRADER_RUBRIC", "GRADER_INSTALL_MODE", "GRADER_PYTHON", "GRADER_CUPY", "GRADER_NO_INSTALL",
                "GRADER_PYTHON_FILE", "GRADER_LEADERBOARD_STAGES", "GRADER_STUDENT_USER")


def _env(autograder: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PACKAGE_VARS}
    env.update(GRADER_AUTOGRADER_DIR=str(autograder), GRADER_USE_GPU="0")
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def autograder(package, tmp_path_factory) -> Path:
    """/autograder-shaped tree with the unpacked zip, set up by its own setup.sh."""
    ag = tmp_path_factory.mktemp("root") / "autograder"
    source = ag / "source"
    gbuild.unpack(package, source)
    assert os.access(source / "setup.sh", os.X_OK) and os.access(source / "run_autograder", os.X_OK)
    env = _env(ag, GRADER_INSTALL_MODE="reuse", GRADER_PYTHON=sys.executable)
    proc = subprocess.run(["bash", str(source / "setup.sh")], cwd=str(ag.parent), env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "install: reuse" in proc.stderr and "bootstrap:" in proc.stderr
    chosen = (source / ".grader-python").read_text().strip()
    assert Path(chosen).resolve() == Path(sys.executable).resolve()
    shutil.copy(source / "run_autograder", ag / "run_autograder")  # what Gradescope's build does
    assert not (source / "solutions").exists() and not (source / "tests").exists()
    return ag


def run_autograder(ag: Path, submission: Path | None, results: Path, **extra: str):
    env = _env(ag, GRADER_RESULTS_DIR=str(results), **extra)
    if submission is not None:
        env["GRADER_SUBMISSION_DIR"] = str(submission)
    proc = subprocess.run([str(ag / "run_autograder")], cwd=str(ag), env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, check_results(results / "results.json")


def _sample(tmp_path: Path) -> Path:
    sub = tmp_path / "submission"
    shutil.copytree(ROOT / "solutions" / "gemm", sub / "gemm")
    shutil.copytree(ROOT / "starter" / "occupancy", sub / "occupancy")
    return sub


def _by_number(results: dict) -> dict:
    return {t["number"]: t for t in results["tests"]}


@needs_nvcc
def test_run_autograder_grades_a_sample_submission(autograder, tmp_path):
    proc, res = run_autograder(autograder, _sample(tmp_path), tmp_path / "results")
    tests = _by_number(res)
    for number in ("1", "2", "3", "4a", "4b", "5"):
        assert tests[f"{number}.compiles"]["status"] == "passed", tests[f"{number}.compiles"]["output"]
        correct = tests[f"{number}.correct"]
        assert correct["name"].startswith(PENDING_PREFIX)
        assert "Pending GPU grading" in correct["output"] and correct["visibility"] == "visible"
        assert correct["extra_data"]["pending_gpu"] is True
    assert tests["4b.no_spills"]["status"] == "passed"
    assert not tests["4b.no_spills"]["name"].startswith(PENDING_PREFIX)  # static items untouched
    pending = [t for t in res["tests"] if t["extra_data"].get("pending_gpu")]
    assert res["extra_data"]["pending_gpu_items"] == len(pending) > 10
    assert res["output"].startswith(f"> **{len(pending)} items")
    # pending is not failed: neither passed nor failed, outside the score, as hand-graded items are, and
    # each says when it is graded (this package names no service: course staff, after the deadline)
    assert not [t["number"] for t in pending if {"score", "max_score", "status"} & t.keys()]
    assert all("Course staff grade it on a GPU machine after the deadline." in t["output"].split("Grader note")[0]
               and "neither passed nor failed" in t["output"] for t in pending)
    assert res["extra_data"]["pending_gpu_points"] == sum(t["extra_data"]["pending_gpu_points"] for t in pending) > 0
    failed = [t["number"] for t in res["tests"] if t.get("status") == "failed"]
    assert not [n for n in failed if tests[n]["extra_data"]["needs_gpu"]], failed  # no GPU item is shown red
    assert res["leaderboard"] == []  # nothing was timed without a GPU
    assert res["score"] > 0
    assert (tmp_path / "results" / "summary.md").exists()
    assert "grader exit code 0" in proc.stdout


@needs_nvcc
def test_hide_policy_and_broken_submission(autograder, tmp_path):
    sub = tmp_path / "submission"
    shutil.copytree(ROOT / "tests" / "submissions" / "compile_error", sub)  # gemm/tiled.cu does not compile
    shutil.copy(ROOT / "solutions" / "gemm" / "naive.cu", sub / "gemm" / "naive.cu")
    _, res = run_autograder(autograder, sub, tmp_path / "results", GRADER_NO_GPU_POLICY="hide",
                            GRADER_STAGES="naive,tiled,coalesced")
    tests = _by_number(res)
    assert tests["3.compiles"]["status"] == "failed" and "nvcc failed" in tests["3.compiles"]["output"]
    assert "file missing" in tests["2.compiles"]["output"]
    assert tests["1.compiles"]["status"] == "passed"
    assert tests["1.correct"]["visibility"] == "after_published"
    assert tests["3.correct"]["visibility"] == "visible"  # failed for the student's reason: not pending
    hidden = [t for t in res["tests"] if t["visibility"] == "after_published"]
    assert hidden and all(t["extra_data"].get("pending_gpu") for t in hidden)
    assert res["extra_data"]["no_gpu_policy"] == "hide"


def test_empty_submission_still_gets_results(autograder, tmp_path):
    sub = tmp_path / "submission"
    sub.mkdir()
    _, res = run_autograder(autograder, sub, tmp_path / "results", GRADER_STAGES="naive")
    assert res["score"] == 0 and "file missing" in _by_number(res)["1.compiles"]["output"]


def _copy_tree(ag: Path, dest: Path) -> Path:
    shutil.copytree(ag, dest, symlinks=True)
    return dest


def _is_fallback(res: dict) -> bool:
    return res["score"] == 0 and all("autograder_error" in t["tags"] for t in res["tests"]) \
        and res["tests"][0]["name"].startswith("Autograder error")


def test_crash_of_the_packaged_grader_still_writes_results(autograder, tmp_path):
    ag = _copy_tree(autograder, tmp_path / "autograder")
    (ag / "source" / "grader" / "deploy" / "gradescope" / "run.py").write_text("this is not python (\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "results.json").write_text('{"score": 99, "tests": []}')  # stale: replaced
    proc, res = run_autograder(ag, tmp_path, tmp_path / "results", GRADER_SOURCE_DIR=str(ag / "source"))
    assert _is_fallback(res)
    assert "exit code 1" in res["tests"][1]["output"] and res["tests"][1]["visibility"] == "hidden"
    assert "writing the fallback" in proc.stdout


def test_time_limit_still_writes_results(autograder, tmp_path):
    # Every compile for real (no session reuse): the sample's seven stages cannot be graded within the second, so
    # the limit stops the grading itself (a grading that ends first stands, with a note: run.py's results_of).
    _, res = run_autograder(autograder, _sample(tmp_path), tmp_path / "results", GRADER_TIME_LIMIT_S="1",
                            GRADER_COMPILE_REUSE="")
    assert _is_fallback(res)
    assert "time limit of 1 seconds" in res["tests"][1]["output"]


def test_broken_python_still_writes_results(autograder, tmp_path):
    ag = _copy_tree(autograder, tmp_path / "autograder")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    for name in ("python3", "fakepython"):
        script = fake_bin / name
        script.write_text("#!/bin/sh\necho 'Fatal Python error: broken' >&2\nexit 1\n")
        script.chmod(0o755)
    (ag / "source" / ".grader-python").write_text(str(fake_bin / "fakepython") + "\n")
    env_path = f"{fake_bin}{os.pathsep}/usr/bin{os.pathsep}/bin"
    _, res = run_autograder(ag, tmp_path, tmp_path / "results", GRADER_SOURCE_DIR=str(ag / "source"),
                            PATH=env_path)
    assert _is_fallback(res)


# --------------------------------------------------------------------------------------------
# One install script for the zip and the image
# --------------------------------------------------------------------------------------------
def _dockerfile_stages(text: str) -> list[list[tuple[str, str]]]:
    """[[(instruction, arguments), ...] per FROM stage], continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    stages: list[list[tuple[str, str]]] = [[]]
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            stages.append([])
        stages[-1].append((word.upper(), rest.strip()))
    return stages


def test_dockerfile_installs_with_the_setup_script_only():
    stages = _dockerfile_stages((ROOT / "Dockerfile").read_text())
    preamble, *built = stages
    assert any(i == "ARG" and re.match(r"BASE=nvidia/cuda:13\.0\.\d+-devel-ubuntu24\.04$", a) for i, a in preamble)
    package, final = built[0], built[-1]
    assert final[0] == ("FROM", "${BASE}")
    # stage 1 builds the zip with the package command and unpacks it, and the install's own files apart; stage 2
    # takes only those: the install's files, setup.sh over them, then the whole package and setup.sh over it
    assert any(i == "RUN" and "grader.deploy.gradescope build" in a and "--unpack /autograder/source" in a
               and "--unpack-install /autograder/install" in a for i, a in package)
    steps = [(i, a) for i, a in final if i in ("COPY", "RUN")]
    assert [i for i, _ in steps] == ["COPY", "RUN", "COPY", "RUN"]
    assert [a for i, a in steps if i == "COPY"] == ["--from=package /autograder/install /autograder/source",
                                                    "--from=package /autograder/source /autograder/source"]
    runs = [a for i, a in final if i == "RUN"]
    assert all(a.startswith("bash /autograder/source/setup.sh && ") for a in runs)
    install_words = ("apt-get install", "apt install", "pip install", "pip3 install", "useradd", "adduser",
                     "bootstrap.sh", "install.sh", "conda ")
    for a in runs:
        assert not any(w in a for w in install_words), f"install step outside the script: RUN {a}"
    assert any("cp /autograder/source/run_autograder /autograder/run_autograder" in a for a in runs)
    # ... and that script is the one Gradescope runs: setup.sh -> install.sh -> bootstrap.sh setup
    setup = (ROOT / "grader" / "deploy" / "gradescope" / "setup.sh").read_text()
    assert re.search(r'^exec bash ".*/grader/deploy/install\.sh" "\$@"$', setup, re.M)
    install = (ROOT / "grader" / "deploy" / "install.sh").read_text()
    assert re.search(r'bash "\$SOURCE/grader/bootstrap\.sh" setup', install)
    assert gbuild.ROOT_FILES["setup.sh"] == ROOT / "grader" / "deploy" / "gradescope" / "setup.sh"


def test_dockerignore_keeps_the_venv_out():
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored
    assert "solutions" not in ignored  # stage 1 needs it to refuse copies; stage 2 never gets it


# --------------------------------------------------------------------------------------------
# The no-GPU policy (pure)
# --------------------------------------------------------------------------------------------
def _results():
    def t(number, status, output, score=0.0, max_score=2.0, needs_gpu=False):
        return {"name": f"item {number}", "number": number, "score": score, "max_score": max_score,
                "status": "passed" if status == "passed" else "failed", "output": output,
                "output_format": "md", "visibility": "visible", "tags": [],
                "extra_data": {"status": status, "needs_gpu": needs_gpu}}
    reason = "no CUDA device (CuPy is not usable here)"
    return reason, Results.from_json({"score": 2.0, "output": "summary", "tests": [
        t("1.compiles", "passed", "compiled", 2.0),
        t("1.correct", "not_evaluated", f"not evaluated: {reason}", max_score=6.0, needs_gpu=True),
        t("1.fp32_only", "not_evaluated", "not evaluated: cuobjdump not found"),
        t("O.12", "not_evaluated", f"not evaluated: {reason}", max_score=1.0, needs_gpu=True),
    ]}).to_json()  # as results.json holds it: every key


def test_policy_pending_marks_only_gpu_items():
    reason, res = _results()
    detail = {"device": {"ok": False, "reason": reason}, "device_reason": reason}
    tests = Results.from_json(res).tests
    assert is_gpu_item(tests[1].extra_data) and not is_gpu_item(tests[2].extra_data)
    res = apply_no_gpu_policy(Results.from_json(res), detail, "pending").to_json()
    names = [t["name"] for t in res["tests"]]
    assert names == ["item 1.compiles", PENDING_PREFIX + "item 1.correct", "item 1.fp32_only",
                     PENDING_PREFIX + "item O.12"]
    assert res["extra_data"]["pending_gpu_items"] == 2 and res["extra_data"]["pending_gpu_points"] == 7
    assert res["output"].startswith("> **2 items (7 points)") and res["score"] == 2.0
    assert all(t["visibility"] == "visible" for t in res["tests"])


def test_policy_hide_and_keep_and_with_a_gpu():
    reason, res = _results()
    detail = {"device": None, "device_reason": reason}
    res = apply_no_gpu_policy(Results.from_json(res), detail, "hide").to_json()
    assert [t["visibility"] for t in res["tests"]] == ["visible", "after_published", "visible", "after_published"]
    reason, res = _results()
    before = json.dumps(res)
    res = apply_no_gpu_policy(Results.from_json(res), detail, "keep").to_json()
    assert json.dumps(res) == before
    for t in res["tests"]:  # a GPU run marks nothing as needing a GPU
        t["extra_data"]["needs_gpu"] = False
    before = json.dumps(res)
    res = apply_no_gpu_policy(Results.from_json(res), {"device": {"ok": True}, "device_reason": ""}, "pending").to_json()
    assert json.dumps(res) == before
    with pytest.raises(ValueError):
        res = apply_no_gpu_policy(Results.from_json(res), detail, "sometimes").to_json()


def test_policy_reads_the_typed_mark_not_the_words():
    reason, res = _results()
    detail = {"device": None, "device_reason": reason}
    gpu_words, other_words = res["tests"][1], res["tests"][2]
    # Worded as the missing device, but not evaluated for another reason (needs_gpu False): left alone.
    gpu_words["extra_data"]["needs_gpu"] = False
    # Worded as a missing tool, but marked as needing a GPU: pending.
    other_words["extra_data"]["needs_gpu"] = True
    # Marked, but not 'not evaluated' (a verdict was given after all): left alone.
    res["tests"][3]["extra_data"]["status"] = "failed"
    res = apply_no_gpu_policy(Results.from_json(res), detail, "pending").to_json()
    assert [t["name"].startswith(PENDING_PREFIX) for t in res["tests"]] == [False, False, True, False]
    assert res["extra_data"]["pending_gpu_items"] == 1 and res["extra_data"]["pending_gpu_points"] == 2
    assert not is_gpu_item(ResultsTestExtra(status="failed", needs_gpu=True)) and not is_gpu_item(ResultsTestExtra())


def test_policy_resolution_order(tmp_path):
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text("settings:\n  no_gpu_policy: keep\n")
    assert resolve_policy(tmp_path, rubric, {}) == ("keep", "rubric settings.no_gpu_policy")
    (tmp_path / "gradescope.env").write_text("# comment\nGRADER_NO_GPU_POLICY=hide\n")
    assert read_config(tmp_path / "gradescope.env") == {"GRADER_NO_GPU_POLICY": "hide"}
    assert resolve_policy(tmp_path, rubric, {})[0] == "hide"
    assert resolve_policy(tmp_path, rubric, {"GRADER_NO_GPU_POLICY": "pending"})[0] == "pending"
    assert resolve_policy(tmp_path / "none", None, {}) == ("pending", "default")
    with pytest.raises(ValueError):
        resolve_policy(None, None, {"GRADER_NO_GPU_POLICY": "x"})


def test_executable_bits_survive_unpack(package, tmp_path):
    gbuild.unpack(package, tmp_path / "u")
    mode = (tmp_path / "u" / "run_autograder").stat().st_mode
    assert mode & stat.S_IXUSR and not (tmp_path / "u" / "rubric.yaml").stat().st_mode & stat.S_IXUSR


def test_a_grading_that_ended_before_the_stop_stands_with_a_note(tmp_path):
    """SIGTERM (run_autograder's limit) after the grading child had finished: the grading is the result, with a
    note on top that the GPU service was not asked, and no error item."""
    import threading
    import time

    from grader.deploy.gradescope.run import ChildRun, results_of, settings
    from tests.gradings_helpers import fixture

    graded = fixture("starter")
    env = {"GRADER_USE_GPU": "0", "GRADER_AUTOGRADER_DIR": str(tmp_path)}
    s = settings(ROOT, env)
    stop = threading.Event()
    stop.set()
    run = ChildRun(proc=None, stopped=False, grading=graded, summary="the summary")  # results_of reads no proc
    res = results_of(run, tmp_path / "submission", tmp_path / "results", ROOT, s, env, stop, time.monotonic())
    assert res.output.startswith("> **GPU grading was not asked for**: this run was stopped (SIGTERM) after the "
                                 "static grading.")
    assert res.score == graded.score and not any("autograder_error" in t.tags for t in res.tests)
