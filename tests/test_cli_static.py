"""The CLI end to end without a GPU: compile-level grading, bad input, exit codes.

These run nvcc (CI has it; a fresh machine gets it from NVIDIA's wheels through
grader/bootstrap.sh). `--no-gpu` makes them behave the same on a GPU machine.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.compile import toolchain

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
def test_solutions_compile_everywhere_and_gpu_items_say_why(static_graded):
    out = static_graded("solutions")  # the session's `grade solutions --no-gpu` (tests/conftest.py)
    res = json.loads((out / "results.json").read_text())
    tests = _by_number(res)
    for number in ("1", "2", "3", "4a", "4b", "5"):
        assert tests[f"{number}.compiles"]["status"] == "passed", tests[f"{number}.compiles"]["output"]
        correct = tests[f"{number}.correct"]
        assert correct["score"] == 0 and correct["extra_data"]["status"] == "not_evaluated"
        assert "not evaluated" in correct["output"]
    assert tests["4b.no_spills"]["status"] == "passed"
    assert res["score"] == sum(t.get("score", 0.0) for t in res["tests"])  # hand-graded tests carry none
    assert (out / "summary.md").exists() and (out / "grading.json").exists()


@needs_nvcc
def test_starter_compiles(static_graded):
    res = json.loads((static_graded("starter") / "results.json").read_text())
    tests = _by_number(res)
    # It compiles, but its empty kernels write no C, so the compile items earn nothing.
    for n in ("1", "2", "3", "4a", "4b", "5"):
        compiles = tests[f"{n}.compiles"]
        assert compiles["status"] == "failed" and compiles["output"].startswith("compiled;"), compiles["output"]
        assert "never writes C" in compiles["output"]
    assert res["score"] == 0


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
    assert "expected `mmCoalesced` in gemm/coalesced.cu; found: `mmCoalesce" in out


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
    assert proc.returncode == 0 and "valid; 7 stages" in proc.stderr


@needs_nvcc
@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() != 0,
                    reason="switching users needs root")
def test_nvcc_runs_as_the_unprivileged_student_user():
    import os
    import pwd
    import tempfile

    from grader.compile.stage import compile_stage
    from grader.rubric.load import load_rubric

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


# --------------------------------------------------------------------------------------------
# python -m grader: subcommands, the older run_local.py flags, intake of hostile submissions
# --------------------------------------------------------------------------------------------
def run_m(*args, cwd=ROOT, timeout=600):
    return subprocess.run([sys.executable, "-m", "grader", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def test_legacy_flags_map_onto_subcommands():
    from grader.run_local import parse_args, to_command

    def cmd(*argv):
        return to_command(parse_args(list(argv)))

    assert cmd("sub", "--out", "o", "--no-gpu", "--stages", "naive") == \
        ["grade", "--out", "o", "--stages", "naive", "--no-gpu", "--", "sub"]
    assert cmd("exp.zip", "--batch", "--workers", "2", "--shard", "0/2", "--trusted-submissions") == \
        ["batch", "--workers", "2", "--shard", "0/2", "--trusted-submissions", "--", "exp.zip"]
    assert cmd("--calibrate") == ["calibrate", "--repeats", "3"]
    assert cmd("sol", "--calibrate", "5", "--out", "c") == ["calibrate", "--repeats", "5", "--out", "c", "--", "sol"]
    assert cmd("--check-rubric", "--rubric", "r.yaml") == ["check-rubric", "--rubric", "r.yaml"]
    assert cmd("--", "-weird-name") == ["grade", "--", "-weird-name"]  # a name starting with '-' stays a name
    assert cmd("sub", "--gpu-lock", "gpu0.lock") == ["grade", "--gpu-lock", "gpu0.lock", "--", "sub"]


def test_batch_only_flag_without_batch_is_a_usage_error(tmp_path):
    proc, res = run_cli(ROOT / "solutions", "--workers", "2", out=tmp_path)
    assert proc.returncode == 2 and "--workers is an option of --batch" in proc.stderr and res["score"] == 0


def test_subcommands_are_listed_and_check_rubric_runs():
    proc = run_m("--help")
    assert proc.returncode == 0
    for command in ("grade", "batch", "merge", "check-rubric", "calibrate", "handout", "gradescope"):
        assert command in proc.stdout
    proc = run_m("check-rubric")
    assert proc.returncode == 0 and "valid;" in proc.stderr
    proc = run_m("grade", "--no-such-flag")
    assert proc.returncode == 2  # argparse's usage error


def test_handout_and_gradescope_subcommands_are_the_same_tools(tmp_path):
    direct = subprocess.run([sys.executable, "-m", "grader.instructor.handout", "--check"], cwd=ROOT,
                            capture_output=True, text=True)
    assert run_m("handout", "--check").returncode == direct.returncode
    proc = run_m("gradescope", "build", "--out", tmp_path / "ag.zip")
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and (tmp_path / "ag.zip").is_file()


@needs_nvcc
def test_grade_a_zip_and_the_work_folder_goes_unless_kept(tmp_path):
    import zipfile

    z = tmp_path / "sub.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.write(ROOT / "solutions" / "gemm" / "naive.cu", "my-sub/gemm/naive.cu")
    proc = run_m("grade", z, "--no-gpu", "--stages", "naive", "--quiet", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert _by_number(res)["1.compiles"]["status"] == "passed" and "one folder down" in res["output"]
    assert not (tmp_path / "out" / "work").exists()
    assert json.loads((tmp_path / "out" / "intake.json").read_text())["refused"] is False
    proc = run_m("grade", z, "--no-gpu", "--stages", "naive", "--quiet", "--keep-work", "--out", tmp_path / "kept")
    assert proc.returncode == 0 and (tmp_path / "kept" / "work" / "submission" / "my-sub" / "gemm" / "naive.cu").is_file()


@needs_nvcc
def test_links_to_the_solutions_earn_nothing_and_a_self_link_does_not_crash(tmp_path):
    sub = tmp_path / "sub"
    (sub / "gemm").mkdir(parents=True)
    (sub / "gemm" / "naive.cu").symlink_to(ROOT / "solutions" / "gemm" / "naive.cu")
    (sub / "gemm" / "tiled.cu").symlink_to("tiled.cu")  # linked to itself
    (sub / "occupancy").symlink_to(ROOT / "solutions" / "occupancy", target_is_directory=True)
    proc, res = run_cli(sub, "--no-gpu", "--stages", "naive,tiled", out=tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    tests = _by_number(res)
    assert tests["1.compiles"]["status"] == "failed"
    assert tests["3.compiles"]["status"] == "failed" and res["score"] == 0
    assert "gemm/naive.cu is a symbolic link" in res["output"]
    assert "gemm/naive.cu is a symbolic link" in tests["1.compiles"]["output"]  # the item names the link
    wrapped = tmp_path / "wrapped"
    wrapped.mkdir()
    (wrapped / "my-project").symlink_to(ROOT / "solutions", target_is_directory=True)  # "one folder down"
    proc, res = run_cli(wrapped, "--no-gpu", "--stages", "naive", out=tmp_path / "out2")
    assert proc.returncode == 0 and res["score"] == 0 and "one folder down" not in res["output"]
    link = tmp_path / "link"
    link.symlink_to(ROOT / "solutions", target_is_directory=True)
    proc, res = run_cli(link, "--no-gpu", "--stages", "naive", out=tmp_path / "out3")
    assert proc.returncode == 0 and res["score"] == 0 and "Submission refused" in res["output"]


def test_removing_the_work_folder_follows_no_link(tmp_path):
    from grader.cli import remove_work

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.png").write_bytes(b"not the grader's")
    work = tmp_path / "out" / "work" / "occupancy"
    work.mkdir(parents=True)
    (work / "sweep.png").write_bytes(b"a student's file")
    (work / "link").symlink_to(outside, target_is_directory=True)
    remove_work(tmp_path / "out")
    assert not (tmp_path / "out" / "work").exists()
    assert (outside / "keep.png").read_bytes() == b"not the grader's"
    # A work folder that is itself a link is left alone (never followed, never deleted through).
    (tmp_path / "out2").mkdir()
    (tmp_path / "out2" / "work").symlink_to(outside, target_is_directory=True)
    remove_work(tmp_path / "out2")
    assert (outside / "keep.png").exists()


@needs_nvcc
def test_without_a_gpu_the_console_says_so_once_and_shows_the_whole_table(tmp_path):
    """A grade on a machine with no GPU at all: no CuPy hint (there is no GPU to use it with), one line
    for the GPU and every item that waits on it, the whole stage names in an 80-column terminal, the
    bonus line, and the cuBLAS column named as such."""
    from grader.children.probe import nvidia_gpu_visible

    if nvidia_gpu_visible():
        pytest.skip("this machine shows an NVIDIA GPU")
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(ROOT / "solutions"), "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "80", "TERM": "xterm"})
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr
    assert "CuPy" not in text and "cupy" not in text
    gpu_lines = [ln for ln in text.splitlines() if "GPU" in ln and not ln.startswith("grading: ")]  # not progress
    assert len(gpu_lines) == 1 and "this machine has no NVIDIA GPU" in gpu_lines[0], gpu_lines
    assert "items wait for a GPU run" in gpu_lines[0]
    assert "4a blocktiling_1d" in text and "4b blocktiling_2d" in text
    assert "% of cuBLAS" in text and "% baseline" not in text
    assert "Bonus: " in text


@needs_nvcc
def test_a_zip_of_a_1500_deep_folder_chain_is_graded_and_names_the_depth_limit(tmp_path):
    import zipfile

    z = tmp_path / "deep.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(ROOT / "solutions" / "gemm" / "naive.cu", "gemm/naive.cu")
        zf.writestr("d/" * 1500 + "x.txt", "1500 folders down")  # ~3 KiB of name: the zip is a few KiB
    assert z.stat().st_size < 40_000
    proc = run_m("grade", z, "--no-gpu", "--stages", "naive", "--quiet", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert "lies under more than 32 nested folders (the limit is 32)" in res["output"]
    assert _by_number(res)["1.compiles"]["status"] == "passed"  # only what lies too deep is left out
    assert not (tmp_path / "out" / "work").exists()


@needs_nvcc
def test_compiler_text_and_file_names_in_feedback_are_shown_never_rendered(tmp_path):
    """An ``#error`` carrying HTML, and a linked file whose name and target are HTML: every Markdown text of
    results.json and summary.md, rendered as a feedback page may render it (raw HTML on), holds no element
    of the student's, and the compiler's words are still there to read."""
    from markdown_it import MarkdownIt

    evil = '<img src=x onerror=alert(1)> <h1>Score: 179 / 179</h1>'
    sub = tmp_path / "sub"
    (sub / "gemm").mkdir(parents=True)
    (sub / "gemm" / "naive.cu").write_text(f'#error "{evil}"\n__global__ void mmNaive() {{}}\n')
    (sub / "gemm" / "<img src=y onerror=alert(2)>.cu").symlink_to("<h1>link</h1>")
    proc, res = run_cli(sub, "--no-gpu", "--stages", "naive", out=tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    compiled = _by_number(res)["1.compiles"]
    assert compiled["status"] == "failed" and compiled["output"].startswith("nvcc failed (exit code 1):")
    assert evil in compiled["output"]  # shown in full, inside its code block
    render = MarkdownIt("commonmark", {"html": True}).render
    texts = {"output": res["output"], "summary.md": (tmp_path / "out" / "summary.md").read_text(),
             **{t["number"]: t["output"] for t in res["tests"]}}
    for where, text in texts.items():
        html = render(text)
        assert "<img" not in html and "<h1" not in html, (where, html)
    assert "&lt;img src=x onerror=alert(1)&gt; &lt;h1&gt;Score: 179 / 179&lt;/h1&gt;" in render(compiled["output"])
    assert "&lt;img src=y onerror=alert(2)&gt;.cu" in render(res["output"])  # the intake note names it, quoted


def test_a_grading_of_no_gemm_stage_prints_its_table(tmp_path):
    """The occupancy exercises alone (no stage row in the ladder table): the console still renders."""
    proc = run_m("grade", ROOT / "solutions", "--no-gpu", "--stages", "occupancy", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    assert "automatic points" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
