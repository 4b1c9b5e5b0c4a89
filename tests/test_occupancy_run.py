"""grader.occupancy.run: files, builds, the student's program, the grader's GPU child.

CPU-only tests use real nvcc where they need a compiler (skipped without one), shell
scripts in place of the student's program, and tests/fake_cupy (a stand-in for CuPy
that answers from the calculator) in place of a GPU for grader.children.occupancy.
The tests marked `gpu` grade solutions/ and starter/ for real.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from grader.compile.locate import locate
from grader.compile.toolchain import find_nvcc
from grader.evidence.protocol import OccupancyResult
from grader.model import Cause, Gap, ProcRecord, Status
from grader.occupancy import run as occ_run
from grader.occupancy.early import occupancy_fence
from grader.occupancy.exercises import api_points, simulated_api
from grader.occupancy.grading import NO_DEVICE, Measurements
from grader.records import from_jsonable, to_jsonable
from grader.rubric.load import load_default_occupancy
from grader.rubric.occupancy import ITEM_IDS, load_occupancy_config

ROOT = Path(__file__).resolve().parent.parent
FAKE_CUPY = ROOT / "tests" / "fake_cupy"
CFG = load_default_occupancy()
NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(not NVCC.ok, reason=f"nvcc not usable: {NVCC.reason or NVCC.problems}")
MANUAL_ITEMS = {"ex2.explanation", "ex3.explanation", "ex4.discussion", "ex5.reasoning", "ex6.explanation"}
GPU_ITEMS = {"ex2.device_props", "ex2.program_api_blocks", "ex2.program_occupancy",
             "ex2.program_best_block", "ex4.smem_sweep_occupancy", "ex4.block_sweep_occupancy",
             "ex4.equal_work", "ex4.smem_conclusion", "ex4.block_conclusion", "ex6.fastest_claim"}
PTXAS_ITEMS = {"ex6.ptxas_match", "ex6.register_pressure"}
ANSWER_ITEMS = set(ITEM_IDS) - GPU_ITEMS - {"host.checked_calls", "ex2.program_api_blocks"}


def _rubric(edit=lambda raw: None, **files) -> SimpleNamespace:
    """rubric.yaml's occupancy section, changed by ``edit`` (on the YAML) and ``files``, parsed as load_rubric does."""
    raw = yaml.safe_load((ROOT / "rubric.yaml").read_text())["occupancy"]
    raw["files"] = {"program": "occupancy/occ.cu", "answers": "occupancy/answers.yaml", **files}
    edit(raw)
    return SimpleNamespace(occupancy=load_occupancy_config(raw), source="rubric.yaml",
                           timeouts=SimpleNamespace(compile_s=300))


def _env(has_gpu: bool = False, nvcc=NVCC, reason: str = "") -> SimpleNamespace:
    return SimpleNamespace(has_gpu=has_gpu, device_reason=reason, nvcc=nvcc, arch_flags=["-arch=sm_90a"],
                           cuobjdump=None)  # None: the builds look for cuobjdump themselves


def _by_item(results) -> dict:
    assert [r.item for r in results] == list(ITEM_IDS)
    return {r.item: r for r in results}


def _submission(tmp_path: Path, which: str = "solutions", *, answers: bool = True,
                source: str | None = None) -> Path:
    sub = tmp_path / "sub"
    (sub / "occupancy").mkdir(parents=True)
    if source is None:
        shutil.copy(ROOT / which / "occupancy/occ.cu", sub / "occupancy/occ.cu")
    else:
        (sub / "occupancy/occ.cu").write_text(source)
    if answers:
        shutil.copy(ROOT / which / "occupancy/answers.yaml", sub / "occupancy/answers.yaml")
    return sub


def _program_doc(api: dict) -> dict:
    """What the solution's program prints on the GPU the API results describe."""
    dev = dict(api["device"], name="NVIDIA H200")
    rows = {(r["block"], r["smem"]): r["blocks"] for r in api["occupancy"]}

    def point(block, smem):
        return {"block": block, "smem": smem, "grid": (1 << 20) // block, "iters": 256,
                "blocks": rows[(block, smem)], "occupancy": rows[(block, smem)] * -(-block // 32) / 64,
                "time_ms": 1.0}

    ex2 = point(CFG.ex2.block_size, CFG.ex2.dynamic_smem)
    return {"format": "occupancy-v1", "device": dev,
            "work": {"registers": api["work"]["registers"], "static_smem": 0, "local_bytes": 0},
            "ex2": {**{k: ex2[k] for k in ("block", "smem", "blocks", "occupancy")},
                    "best_block": api["potential"]["best_block"], "min_grid": api["potential"]["min_grid"]},
            "ex4": {"smem_sweep": [point(CFG.ex4.smem_block_size, s) for s in CFG.ex4.smem_points],
                    "block_sweep": [point(b, CFG.ex4.block_smem) for b in CFG.ex4.block_points]}}


# ---------------------------------------------------------------------------------------
# The child's spec
# ---------------------------------------------------------------------------------------
def test_child_spec_asks_every_api_point_and_keeps_the_work_equal():
    builds = {"default": occ_run.Build("default", None, Path("/b/occ_default.cubin"), ok=True)}
    for cap in CFG.ex6.register_caps:
        builds[f"r{cap}"] = occ_run.Build(f"r{cap}", cap, Path(f"/b/occ_r{cap}.cubin"), ok=True)
    builds["r64"].ok = False  # a cap that did not build is not timed
    spec = to_jsonable(occ_run.child_spec(CFG, builds))
    json.dumps(spec)  # it travels as JSON
    assert [tuple(p) for p in spec["api_points"]] == api_points(CFG)
    assert (CFG.ex2.block_size, CFG.ex2.dynamic_smem) in {tuple(p) for p in spec["api_points"]}
    assert spec["sweeps"]["smem"] == [[128, s * 1024] for s in (0, 2, 4, 8, 16, 32, 48)]
    assert spec["sweeps"]["block"] == [[b, 0] for b in (32, 64, 128, 256, 512, 1024)]
    assert spec["sweeps"]["total_threads"] % 1024 == 0  # grid * block is the same at every point
    assert spec["cubin"] == "/b/occ_default.cubin" and spec["potential_smem"] == 12 * 1024
    assert spec["work_problem"] is None
    assert spec["heavy"]["cubins"] == {"255": "/b/occ_r255.cubin", "32": "/b/occ_r32.cubin"}
    assert spec["heavy"]["block"] == CFG.ex6.block_size
    assert spec["sweeps"]["reps"] >= spec["sweeps"]["min_reps"] >= 3


# ---------------------------------------------------------------------------------------
# The program's output
# ---------------------------------------------------------------------------------------
def test_parse_program_output_reads_the_documented_format():
    api = simulated_api(CFG, "9.0", registers=32, sm_count=132)
    doc = _program_doc(api)
    got, problem = occ_run.parse_program_output(json.dumps(doc, indent=2))
    assert problem is None and got == doc


def test_parse_program_output_is_lenient_about_noise_and_c_nans():
    got, problem = occ_run.parse_program_output(
        'warming up\n{"format": "occupancy-v1", "ex2": {"occupancy": nan, "blocks": -inf, "x": [1, nan]}}\n')
    assert problem is None
    assert got["ex2"] == {"occupancy": None, "blocks": None, "x": [1, None]}


@pytest.mark.parametrize("text,needle", [
    ("", "printed nothing"),
    ("hello", "no JSON object"),
    ('{"format": "occupancy-v1", "ex2": {"blocks": 17,}', "not valid JSON (line 1"),
    ('{"a": 1\n"b": 2}', "line 2"),
    ("[1, 2]", "no JSON object"),
    ("[" * 50000 + "{" + "]" * 50000, "not valid JSON"),
])
def test_parse_program_output_says_what_is_wrong(text, needle):
    got, problem = occ_run.parse_program_output(text)
    assert got is None and needle in problem, problem


def _script(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "bin" / "occ"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(0o755)
    return exe


def test_run_program_parses_stdout_and_ignores_stderr(tmp_path):
    exe = _script(tmp_path, 'echo "table" >&2\necho \'{"format": "occupancy-v1", "ex2": {"blocks": 17}}\'')
    doc, problem, proc = occ_run.run_program(exe, tmp_path)
    assert problem is None and doc["ex2"] == {"blocks": 17} and proc.ok


@pytest.mark.parametrize("body,needle", [
    ("echo '{\"format\": \"occupancy-v1\"}'; echo 'x.cu:10: cudaMalloc failed' >&2; exit 1",
     "ended with exit code 1"),
    ("sleep 30", "did not finish within 1 s"),
    ("kill -SEGV $$", "killed by signal 11"),
    ("echo '{\"format\": \"v0\"}'", "expected \"occupancy-v1\""),
    ("yes '{}' | head -c 600000", "the grader reads at most"),
])
def test_run_program_failures_are_messages(tmp_path, body, needle):
    doc, problem, _ = occ_run.run_program(_script(tmp_path, body), tmp_path, timeout_s=1)
    assert doc is None and needle in problem, problem


# ---------------------------------------------------------------------------------------
# The submission's files
# ---------------------------------------------------------------------------------------
def _find(root: Path, rel: str):
    """How the occupancy files are found: the one locate, also one folder up or down."""
    found = locate(root, rel, nearby=True)
    return found.path, found.message


def test_occupancy_files_are_found_one_folder_up_and_down(tmp_path):
    (tmp_path / "a" / "occupancy").mkdir(parents=True)
    (tmp_path / "a" / "occupancy" / "occ.cu").write_text("x")
    assert _find(tmp_path / "a", "occupancy/occ.cu")[0] == tmp_path / "a" / "occupancy" / "occ.cu"
    # the exercise folder itself handed in
    assert _find(tmp_path / "a" / "occupancy", "occupancy/occ.cu")[0] == tmp_path / "a" / "occupancy" / "occ.cu"
    # the rubric's default (no folder) finds it one folder down
    assert _find(tmp_path / "a", "occ.cu")[0] is not None
    path, problem = _find(tmp_path / "a", "occupancy/answers.yaml")
    assert path is None and problem == "occupancy/answers.yaml is not in the submission"


def test_occupancy_files_refuse_links_out_and_empty_files(tmp_path):
    sub = tmp_path / "sub" / "occupancy"
    sub.mkdir(parents=True)
    (tmp_path / "secret").write_text("x")
    (sub / "occ.cu").symlink_to(tmp_path / "secret")
    assert "outside the submission" in _find(tmp_path / "sub", "occupancy/occ.cu")[1]
    (sub / "answers.yaml").write_text("")
    assert "is empty" in _find(tmp_path / "sub", "occupancy/answers.yaml")[1]


def test_missing_answers_file_fails_its_items_with_a_clear_message_and_nothing_else(tmp_path):
    sub = _submission(tmp_path, answers=False)
    res = _by_item(occ_run.grade_occupancy_submission(sub, _rubric(), _env(nvcc=SimpleNamespace(path=None, reason="")),
                                                      tmp_path / "work"))
    msg = "occupancy/answers.yaml is not in the submission (start from starter/occupancy/answers.yaml)"
    for item in ANSWER_ITEMS - PTXAS_ITEMS:
        want = Status.MANUAL if item in MANUAL_ITEMS else Status.FAILED  # hand-graded: never failed
        assert res[item].status == want and res[item].score == 0, item
        assert msg in res[item].message, (item, res[item].message)
    assert res["host.checked_calls"].status == Status.PASSED  # the program is there and checked
    assert all(res[i].status == Status.NOT_EVALUATED for i in GPU_ITEMS | PTXAS_ITEMS)


def test_bad_yaml_answers_name_the_line(tmp_path):
    sub = _submission(tmp_path, answers=False)
    (sub / "occupancy/answers.yaml").write_text("ex1:\n  max_blocks: 19\n bottleneck: x\n")
    res = _by_item(occ_run.grade_occupancy_submission(sub, _rubric(), _env(nvcc=SimpleNamespace(path=None, reason="")),
                                                      tmp_path / "work"))
    assert res["ex1.max_blocks"].message.startswith("occupancy/answers.yaml line 3: not valid YAML")


# ---------------------------------------------------------------------------------------
# Without a GPU: the static part (real nvcc) and not_evaluated
# ---------------------------------------------------------------------------------------
@needs_nvcc
def test_solution_without_gpu_grades_ptxas_statically_and_leaves_gpu_items_not_evaluated(tmp_path, monkeypatch):
    _compile_once(monkeypatch)
    sub = _submission(tmp_path)
    work = tmp_path / "work"
    # Fenced as a grading's builds are: the session's compile reuse serves the static gradings' same builds.
    res = _by_item(occ_run.grade_occupancy_submission(sub, _rubric(), _env(), work, fence=occupancy_fence(work)))
    for item, r in res.items():
        if item in GPU_ITEMS:
            assert (r.status, r.score, r.message) == (Status.NOT_EVALUATED, 0.0, NO_DEVICE), item
        elif item in MANUAL_ITEMS:
            assert r.status == Status.MANUAL
        else:
            assert (r.status, r.score) == (Status.PASSED, r.max_score), (item, r.message)
    log = json.loads((work / occ_run.MEASUREMENTS_FILE).read_text())
    assert set(log["builds"]) == {"r255", "r64", "r32"}  # no GPU: no default cubin, no program
    assert log["measurements"]["ptxas"]["255"]["registers"] >= 80


@needs_nvcc
def test_a_device_reason_is_passed_on(tmp_path, monkeypatch):
    _compile_once(monkeypatch)
    res = _by_item(occ_run.grade_occupancy_submission(
        _submission(tmp_path), _rubric(), _env(reason="GPU use switched off (--no-gpu)"), tmp_path / "w"))
    assert res["ex4.equal_work"].message == "not evaluated: GPU use switched off (--no-gpu)"


@needs_nvcc
def test_starter_without_gpu_scores_zero(tmp_path):
    work = tmp_path / "work"  # fenced as a grading's builds are (the session's compile reuse serves them)
    res = _by_item(occ_run.grade_occupancy_submission(_submission(tmp_path, "starter"), _rubric(), _env(), work,
                                                      fence=occupancy_fence(work)))
    assert sum(r.score for r in res.values()) == 0
    assert "at least 80 registers" in res["ex6.register_pressure"].message


@needs_nvcc
def test_compile_error_fails_the_ptxas_items_with_nvcc_output(tmp_path):
    src = (ROOT / "solutions/occupancy/occ.cu").read_text().replace("float total = 0.0f;", "float total = ;")
    res = _by_item(occ_run.grade_occupancy_submission(_submission(tmp_path, source=src), _rubric(), _env(),
                                                      tmp_path / "work"))
    for item in PTXAS_ITEMS:
        assert res[item].status == Status.FAILED
        assert "occupancy/occ.cu (-maxrregcount=" in res[item].message
        assert "did not compile" in res[item].message and "error" in res[item].message
    assert res["ex6.occupancy"].status == Status.PASSED  # uses the student's own register counts then


@needs_nvcc
@pytest.mark.parametrize("how", ["first_pass", "preprocessor"])
def test_an_include_outside_the_submission_is_refused_and_never_echoed(tmp_path, how):
    """occ.cu goes through the same guarded compile as the stages, include check
    included: the refusal names the path and no byte of the file reaches any message."""
    marker = "MARKER_occupancy_4f1c9e"
    secret = tmp_path / "outside.h"
    secret.write_text(marker + "\n")
    solution = (ROOT / "solutions/occupancy/occ.cu").read_text()
    if how == "first_pass":
        src = f'%:include "{secret}"\n' + solution
    else:  # a file the first pass does not read (not a source name): nvcc -M still sees the include
        src = '#include "notes.txt"\n' + solution
    sub = _submission(tmp_path, source=src)
    (sub / "occupancy" / "notes.txt").write_text(f'#if REGCAP == 32\n#include "{secret}"\n#endif\n')
    work = tmp_path / "work"
    res = _by_item(occ_run.grade_occupancy_submission(sub, _rubric(), _env(), work))
    for item in PTXAS_ITEMS:
        assert res[item].status == Status.FAILED, item
        msg = res[item].message
        assert ("is not allowed" if how == "first_pass" else "the compile would read `" + str(secret)) in msg, msg
    everything = "\n".join(r.message for r in res.values()) + (work / occ_run.MEASUREMENTS_FILE).read_text()
    assert marker not in everything
    if how == "preprocessor":  # only the -DREGCAP=32 build reads it; the other caps compiled
        log = json.loads((work / occ_run.MEASUREMENTS_FILE).read_text())
        assert log["builds"]["r255"]["ok"] and not log["builds"]["r32"]["ok"]


@needs_nvcc
def test_missing_heavy_kernel_is_named(tmp_path):
    src = (ROOT / "solutions/occupancy/occ.cu").read_text().replace('extern "C" __global__ void heavy',
                                                                    '__global__ void heavy')
    res = _by_item(occ_run.grade_occupancy_submission(_submission(tmp_path, source=src), _rubric(), _env(),
                                                      tmp_path / "work"))
    msg = res["ex6.ptxas_match"].message
    assert "has no kernel named `heavy`" in msg and "C++-mangled" in msg


def test_no_compiler_leaves_ptxas_items_not_evaluated(tmp_path):
    nvcc = SimpleNamespace(path=None, reason="nvcc not found")
    res = _by_item(occ_run.grade_occupancy_submission(_submission(tmp_path), _rubric(), _env(True, nvcc=nvcc),
                                                      tmp_path / "work"))
    for item in PTXAS_ITEMS | GPU_ITEMS:  # a GPU without a compiler can run nothing
        assert res[item].status == Status.NOT_EVALUATED, item
        assert "no CUDA compiler (nvcc not found)" in res[item].message


def test_missing_program_fails_its_items(tmp_path):
    sub = _submission(tmp_path)
    (sub / "occupancy/occ.cu").unlink()
    res = _by_item(occ_run.grade_occupancy_submission(sub, _rubric(), _env(True), tmp_path / "work"))
    for item in GPU_ITEMS | PTXAS_ITEMS | {"host.checked_calls"}:
        assert res[item].status == Status.FAILED and "occ.cu is not in the submission" in res[item].message, item


def test_no_section_or_a_grader_bug_crashes_nothing(tmp_path, monkeypatch):
    # A bad section never gets here: load_rubric stops on it (tests/test_occupancy_config.py).
    rubric = SimpleNamespace(occupancy=None, source="rubric.yaml")
    res = occ_run.grade_occupancy_submission(tmp_path, rubric, _env(), tmp_path / "w")
    assert len(res) == 1 and res[0].status == Status.NOT_EVALUATED and "no occupancy section" in res[0].message

    def boom(*a, **k):
        raise ZeroDivisionError("bug")
    monkeypatch.setattr(occ_run, "grade_occupancy", boom)
    res = _by_item(occ_run.grade_occupancy_submission(_submission(tmp_path), _rubric(),
                                                      _env(nvcc=SimpleNamespace(path=None, reason="")), tmp_path / "w"))
    assert all(r.status == (Status.MANUAL if r.item in MANUAL_ITEMS else Status.NOT_EVALUATED) and r.score == 0
               for r in res.values())
    assert "ZeroDivisionError" in res["ex1.occupancy"].values.traceback


def test_top_level_rubric_section_is_valid_and_points_at_the_exercise_folder():
    raw = yaml.safe_load((ROOT / "rubric.yaml").read_text())
    cfg = load_occupancy_config(raw["occupancy"], "rubric.yaml.occupancy")
    assert (cfg.program_file, cfg.answers_file) == ("occupancy/occ.cu", "occupancy/answers.yaml")
    assert cfg.items == CFG.items and cfg.ex4 == CFG.ex4


# ---------------------------------------------------------------------------------------
# The child's report
# ---------------------------------------------------------------------------------------
def _proc(rc=0, timed_out=False, stderr="") -> ProcRecord:
    return ProcRecord(command=["x"], returncode=rc, timed_out=timed_out, stderr=stderr, timeout_s=60.0)


def _report(data: dict) -> OccupancyResult:
    """The occupancy child's result record from its JSON form."""
    return from_jsonable(OccupancyResult, data)


def test_apply_child_report_finished():
    api = simulated_api(CFG, "9.0", registers=32, sm_count=132)
    meas = Measurements(device_available=True)
    occ_run.apply_child_report(meas, _report({"phase": "finished", "errors": [], "api": api,
                                      "sweep_times": {"smem": {"0": 1.0}, "block": {"32": 2.0}},
                                      "heavy_times_ms": {"255": 1.0, "32": 2.0}}), _proc())
    assert meas.api == api and meas.gpu_problems == {}
    assert meas.sweep_times == {"smem": {0: 1.0}, "block": {32: 2.0}}
    assert meas.heavy_times_ms == {255: 1.0, 32: 2.0}


def test_apply_child_report_student_and_grader_failures():
    meas = Measurements(device_available=True)
    occ_run.apply_child_report(meas, _report({"phase": "sweeps", "api": {"x": 1}, "errors": [
        {"phase": "sweeps", "student": True, "message": "`work` failed (block 128): CUDA_ERROR_LAUNCH_FAILED"},
        {"phase": "heavy", "student": True, "message": "not timed: the CUDA context was lost"}]}), _proc())
    assert "api" not in meas.gpu_problems
    assert meas.gpu_problems["sweeps"] == Gap(Cause.STUDENT, "`work` failed (block 128): CUDA_ERROR_LAUNCH_FAILED")
    assert meas.heavy_times_ms is None and "context was lost" in meas.gpu_problems["heavy"].message

    meas = Measurements(device_available=True)
    occ_run.apply_child_report(meas, _report({"phase": "setup", "errors": [
        {"phase": "setup", "student": False, "message": "CuPy or the device is not usable: X"}]}), _proc())
    assert all(g.cause is Cause.GRADER and g.message.startswith("not evaluated: the grader's GPU measurements failed")
               for g in meas.gpu_problems.values())
    assert set(meas.gpu_problems) == {"api", "sweeps", "heavy"}


def test_apply_child_report_timeout_and_crash():
    meas = Measurements(device_available=True)
    occ_run.apply_child_report(meas, _report({"phase": "sweeps", "errors": [], "api": {"x": 1}}),
                               _proc(rc=-9, timed_out=True))
    assert "did not finish within 60 s" in meas.gpu_problems["sweeps"].message
    assert meas.gpu_problems["heavy"].cause is Cause.STUDENT and "`work`" in meas.gpu_problems["heavy"].message
    meas = Measurements(device_available=True)
    occ_run.apply_child_report(meas, None, _proc(rc=1, stderr="Traceback: ImportError"))
    assert meas.gpu_problems["api"].cause is Cause.GRADER
    assert meas.gpu_problems["api"].message.startswith("not evaluated: the grader's GPU measurement process failed")


def test_apply_child_report_reads_the_student_flag_not_the_words():
    # The child's typed flag decides whose failure it is, however its message is worded.
    meas = Measurements(device_available=True)
    occ_run.apply_child_report(meas, _report({"phase": "sweeps", "api": {"x": 1}, "errors": [
        {"phase": "sweeps", "student": True, "message": "not evaluated: `work` failed (block 128)"},
        {"phase": "heavy", "student": False, "message": "your kernel `heavy` failed"}]}), _proc())
    assert meas.gpu_problems["sweeps"] == Gap(Cause.STUDENT, "not evaluated: `work` failed (block 128)")
    assert meas.gpu_problems["heavy"] == Gap(
        Cause.GRADER, "not evaluated: the grader's GPU measurements failed: your kernel `heavy` failed")
    # The student's failure and the grader's on one part: the student's decides (the items fail).
    meas = Measurements(device_available=True)
    occ_run.apply_child_report(meas, _report({"phase": "heavy", "api": {"x": 1}, "errors": [
        {"phase": "heavy", "student": False, "message": "timer broke"},
        {"phase": "heavy", "student": True, "message": "`heavy` failed at cap 32"}]}), _proc())
    assert meas.gpu_problems["heavy"] == Gap(Cause.STUDENT, "`heavy` failed at cap 32")


def test_no_gpu_items_need_a_gpu_and_no_compiler_items_do_not(tmp_path):
    nvcc = SimpleNamespace(path=None, reason="nvcc not found")
    res = _by_item(occ_run.grade_occupancy_submission(_submission(tmp_path), _rubric(),
                                                      _env(False, nvcc=nvcc, reason="switched off"), tmp_path / "w1"))
    assert all(res[i].needs_gpu and res[i].message == "not evaluated: switched off" for i in GPU_ITEMS)
    assert not any(res[i].needs_gpu for i in PTXAS_ITEMS)  # no compiler: a GPU would not help
    res = _by_item(occ_run.grade_occupancy_submission(_submission(tmp_path / "2"), _rubric(), _env(True, nvcc=nvcc),
                                                      tmp_path / "w2"))
    assert all(res[i].status == Status.NOT_EVALUATED and not res[i].needs_gpu for i in GPU_ITEMS | PTXAS_ITEMS)


# ---------------------------------------------------------------------------------------
# The whole GPU flow on CPU: real builds, a stand-in program, gpu_child on fake CuPy
# ---------------------------------------------------------------------------------------
# (source bytes, nvcc, flags, output name) -> (the compile's record, its output's bytes): the GPU-flow tests
# below and the static tests above that read the builds' results (not their compile) build the same program with
# the same flags; each distinct build is compiled for real once per session (by the first test that needs it,
# with the grader's own guarded compile) and the others get its record and a copy of its output. The SASS of
# each distinct cubin (its spills) is read once the same way. A build that fails, a refused include and every
# test of the compile itself compile for real.
_COMPILED: dict[tuple, tuple] = {}
_DUMPED: dict[bytes, object] = {}


def _compile_once(monkeypatch) -> None:
    from dataclasses import replace

    from grader.occupancy import build

    real = build.compile_student
    real_dump = build.dump_sass

    def dump_once(cubin, cuobjdump, **kw):
        data = Path(cubin).read_bytes()
        if data not in _DUMPED:
            sass = real_dump(cubin, cuobjdump, **kw)
            if not sass.available:
                return sass
            _DUMPED[data] = sass
        return _DUMPED[data]

    monkeypatch.setattr(build, "dump_sass", dump_once)

    def once(nvcc, scratch, output, flags, **kw):
        src = scratch.folder / scratch.source
        key = (src.read_bytes(), nvcc.path, tuple(flags), output)
        if key not in _COMPILED:
            record = real(nvcc, scratch, output, flags, **kw)
            if not record.ok:
                return record
            made = scratch.folder / output
            _COMPILED[key] = (record, made.read_bytes(), made.stat().st_mode)
        record, data, mode = _COMPILED[key]
        (scratch.folder / output).write_bytes(data)
        (scratch.folder / output).chmod(mode)
        return replace(record, output=scratch.folder / output)

    monkeypatch.setattr(build, "compile_student", once)


def _fake_gpu(monkeypatch, fake: dict | None = None, program: dict | None = None):
    _compile_once(monkeypatch)
    # Children get the grader's environment (grader.sandbox.launch.child_env), so the stand-in
    # CuPy on PYTHONPATH is what the measurement child imports.
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY) + (os.pathsep + old if old else ""))
    monkeypatch.setenv("FAKE_CUPY", json.dumps(fake or {}))
    doc = program if program is not None else _program_doc(simulated_api(CFG, "9.0", registers=32,
                                                                          sm_count=132))
    monkeypatch.setattr(occ_run, "run_program", lambda exe, work, **kw: (doc, None, None))


@needs_nvcc
def test_solution_gets_full_marks_through_the_gpu_flow_on_fake_cupy(tmp_path, monkeypatch):
    _fake_gpu(monkeypatch)
    work = tmp_path / "work"
    res = _by_item(occ_run.grade_occupancy_submission(_submission(tmp_path), _rubric(), _env(True), work))
    for item, r in res.items():
        if item in MANUAL_ITEMS:
            assert r.status == Status.MANUAL, item
        else:
            assert (r.status, r.score) == (Status.PASSED, r.max_score), (item, r.message)
    log = json.loads((work / occ_run.MEASUREMENTS_FILE).read_text())
    rep = log["gpu_report"]
    assert rep["phase"] == "finished" and rep["errors"] == [], rep["errors"]
    assert {r["blocks"] for r in rep["api"]["occupancy"] if (r["block"], r["smem"]) == (32, 12288)} == {17}
    assert rep["sweep_times"]["smem"]["16384"] == pytest.approx(0.9)
    assert set(rep["heavy_times_ms"]) == {"255", "64", "32"}
    assert set(log["builds"]) == {"default", "exe", "r255", "r64", "r32"}
    assert (work / "build_exe" / "occ").is_file()
    plot_line = res["ex4.smem_conclusion"].message.splitlines()[-1]
    assert plot_line.startswith(("Plot of occupancy", "(no plot: matplotlib"))


@needs_nvcc
@pytest.mark.parametrize("fake,item,needle", [
    ({"fail_launch": "work"}, "ex4.smem_conclusion", "failed in the grader's re-run of the sweeps"),
    ({"fail_launch": "heavy"}, "ex6.fastest_claim", "failed when the grader timed it"),
    ({"heavy_registers": 255}, "ex6.fastest_claim", "cannot be launched with 512 threads"),
])
def test_kernel_failures_in_the_grader_run_fail_their_items(tmp_path, monkeypatch, fake, item, needle):
    _fake_gpu(monkeypatch, fake)
    rubric = _rubric(lambda raw: raw["ex6"].update(block_size=512) if "heavy_registers" in fake else None)
    res = _by_item(occ_run.grade_occupancy_submission(_submission(tmp_path), rubric, _env(True),
                                                      tmp_path / "work"))
    assert res[item].status == Status.FAILED and needle in res[item].message, res[item].message
    assert res["ex2.program_api_blocks"].status == Status.PASSED  # the API part still counts


@needs_nvcc
def test_hanging_kernel_in_the_grader_run_times_out(tmp_path, monkeypatch):
    _fake_gpu(monkeypatch, {"hang": "work"})
    # The whole limit is waited out. The message below names the `work` kernel only when the child was stopped
    # in its sweeps (one stopped in the grader's own phases before them is reported as the grader's process
    # failing); 4 s is several times what the child takes to get there on a busy 2-core box
    # (docs/measurements/2026-12-07-suite-s49calib.md).
    monkeypatch.setattr(occ_run, "CHILD_TIMEOUT_S", 4.0)
    res = _by_item(occ_run.grade_occupancy_submission(_submission(tmp_path), _rubric(), _env(True),
                                                      tmp_path / "work"))
    assert res["ex4.block_conclusion"].status == Status.FAILED
    assert "your `work` kernel did not finish within 4 s" in res["ex4.block_conclusion"].message
    assert res["ex2.program_api_blocks"].status == Status.PASSED


@needs_nvcc
def test_no_device_in_the_child_is_not_evaluated(tmp_path, monkeypatch):
    _fake_gpu(monkeypatch, {"no_device": True})
    res = _by_item(occ_run.grade_occupancy_submission(_submission(tmp_path), _rubric(), _env(True),
                                                      tmp_path / "work"))
    for item in ("ex2.device_props", "ex4.smem_sweep_occupancy", "ex4.smem_conclusion", "ex6.fastest_claim"):
        assert res[item].status == Status.NOT_EVALUATED, item
        assert "CuPy or the device is not usable" in res[item].message


def _program_built_from_the_solution(monkeypatch) -> None:
    """The host program's build compiles solutions/occupancy/occ.cu (in its own build folder), whatever the
    submission's occ.cu: for a test whose program run is the stand-in above (the solution's output), so its
    build is the one the GPU-flow tests already compiled (_compile_once). The cubins are the submission's."""
    from grader.occupancy import build

    served = build.compile_student

    def solution_program(nvcc, scratch, output, flags, **kw):
        if "-cubin" not in flags:
            shutil.copy(ROOT / "solutions/occupancy/occ.cu", scratch.folder / scratch.source)
        return served(nvcc, scratch, output, flags, **kw)

    monkeypatch.setattr(build, "compile_student", solution_program)


@needs_nvcc
def test_missing_work_kernel_fails_the_api_items(tmp_path, monkeypatch):
    _fake_gpu(monkeypatch)
    _program_built_from_the_solution(monkeypatch)
    src = (ROOT / "solutions/occupancy/occ.cu").read_text().replace('extern "C" __global__ void work',
                                                                    '__global__ void work')
    res = _by_item(occ_run.grade_occupancy_submission(_submission(tmp_path, source=src), _rubric(),
                                                      _env(True), tmp_path / "work"))
    for item in ("ex2.device_props", "ex4.smem_sweep_occupancy", "ex4.block_conclusion"):
        assert res[item].status == Status.FAILED, item
        assert "has no kernel named `work`" in res[item].message
    # heavy is built and timed on its own
    assert res["ex6.ptxas_match"].status == Status.PASSED and res["ex6.fastest_claim"].status == Status.PASSED


def test_plot_is_drawn_when_matplotlib_is_there(tmp_path):
    pytest.importorskip("matplotlib")
    from grader.occupancy.plots import plot_sweeps, sweep_series

    api = simulated_api(CFG, "9.0", registers=32, sm_count=132)
    e4 = CFG.ex4
    series = sweep_series(api, {"smem": {s: 1.0 for s in e4.smem_points},
                                "block": {b: 1.0 for b in e4.block_points}}, _program_doc(api),
                          [(e4.smem_block_size, s) for s in e4.smem_points],
                          [(b, e4.block_smem) for b in e4.block_points])
    assert series["smem"]["occupancy_pct"] == [100.0, 100.0, 100.0, 100.0, 81.25, 37.5, 25.0]
    path, note = plot_sweeps(tmp_path / "p.png", series, "t")
    assert note == "" and path.read_bytes()[:4] == b"\x89PNG"


def test_sweep_series_without_matplotlib_needs_nothing():
    from grader.occupancy.plots import sweep_series

    s = sweep_series(None, None, None, [(128, 0)], [(32, 0)])
    assert s["smem"] == {"x": [0], "occupancy_pct": [None], "grader_ms": [None], "program_ms": [None]}


# ---------------------------------------------------------------------------------------
# On a real GPU: the full gradings of solutions/ and starter/ that the GPU suite shares
# (tests/gpu_jobs.py), whose occupancy section is this module's code, fenced as in production.
# ---------------------------------------------------------------------------------------
def _graded_items(graded) -> dict:
    from grader.grading import load_grading

    assert graded.rc == 0, graded.stderr
    return _by_item([i for i in load_grading(graded.out / "grading.json").items if i.stage == "occupancy"])


@pytest.mark.gpu
def test_gpu_solution_gets_full_marks_on_every_automated_item(solutions_graded):
    res = _graded_items(solutions_graded)
    seconds = solutions_graded.phase("grade_occupancy")
    for item, r in res.items():
        if item in MANUAL_ITEMS:
            assert r.status == Status.MANUAL, (item, r.message)
        else:
            assert (r.status, r.score) == (Status.PASSED, r.max_score), (item, r.message)
    # The phase is recorded (it can round to 0.0 s: the measurements ran earlier, on the GPU schedule);
    # how long it takes is in docs/measurements/, not a threshold here.
    assert seconds is not None and seconds >= 0, seconds


@pytest.mark.gpu
def test_gpu_starter_gets_zero_and_nothing_crashes(starter_graded):
    res = _graded_items(starter_graded)
    assert sum(r.score for r in res.values()) == 0
    # Hand-graded items are never failed by the autograder (Status.MANUAL); every other one fails.
    assert all(r.status == (Status.MANUAL if r.item in MANUAL_ITEMS else Status.FAILED) for r in res.values()), \
        [(r.item, r.status, r.message) for r in res.values() if r.status != Status.FAILED]
    log = json.loads((starter_graded.out / "work" / "occupancy" / occ_run.MEASUREMENTS_FILE).read_text())
    assert log["gpu_report"]["phase"] == "finished", log["gpu_report"]["errors"]
