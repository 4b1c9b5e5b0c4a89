"""The student kit (grader/deploy/kit/): a zip without solutions/ or tests/, and `python -m grader check`,
which says in seconds, without a GPU and without scores, whether a submission is well-formed.
The check runs from the unpacked kit, with the kit's own grader, in a subprocess. None of its runs here
compiles: the checks that compile (the starter, the solutions, a submission with typical mistakes) are the
README's own `check` line in tests/test_kit_walkthrough.py, from the kit that test unzips and sets up."""
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.deploy.gradescope.build import BuildError
from grader.deploy.kit.build import FOLDER, build_kit
from grader.deploy.kit.checks import key_lines
from grader.model import Status
from grader.occupancy.exercises import grade_occupancy
from grader.occupancy.run import load_answers
from grader.rubric.load import load_rubric
from grader.writeup.run import grade_report_submission

ROOT = Path(__file__).resolve().parent.parent


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """The kit zip, built by the command line as an instructor would."""
    out = tmp_path_factory.mktemp("kit") / "student-kit.zip"
    proc = subprocess.run([sys.executable, "-m", "grader", "kit", "build", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "no solutions/, no tests/" in proc.stdout
    return out


@pytest.fixture(scope="module")
def unpacked(kit, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(kit) as zf:
        zf.extractall(dest)
    return dest / FOLDER


# `python -m grader` in an interpreter where httpx cannot be imported (as on a machine without it).
WITHOUT_HTTPX = """
import runpy, sys
class NoHttpx:
    def find_spec(self, name, path=None, target=None):
        if name == "httpx" or name.startswith("httpx."):
            raise ModuleNotFoundError("No module named 'httpx'", name="httpx")
sys.meta_path.insert(0, NoHttpx())
sys.modules.pop("httpx", None)
sys.argv[0] = "grader"
runpy.run_module("grader", run_name="__main__", alter_sys=True)
"""


def check(kit_dir: Path, *args: str, timeout: int = 300, httpx: bool = True,
          command: str = "check") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRADER_DEBUG")}
    run = ["-m", "grader"] if httpx else ["-c", WITHOUT_HTTPX]
    return subprocess.run([sys.executable, *run, command, *args], cwd=kit_dir, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_kit_holds_what_students_need_and_nothing_of_the_answers(kit):
    with zipfile.ZipFile(kit) as zf:
        names = [n.removeprefix(FOLDER + "/") for n in zf.namelist()]
        data = {n.removeprefix(FOLDER + "/"): zf.read(n) for n in zf.namelist()}
    for needed in ("README.md", "assignment/README.md", "starter/gemm/naive.cu", "starter/report.md",
                   "grader/__init__.py", "grader/deploy/kit/check.py", "rubric.yaml", "pyproject.toml", "setup.py"):
        assert needed in names, needed
    assert not [n for n in names if n.split("/")[0] in ("solutions", "tests", ".git")]
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    solutions = {_sha(p.read_bytes()) for p in (ROOT / "solutions").rglob("*") if p.is_file() and p.stat().st_size}
    assert not [n for n, b in data.items() if b and _sha(b) in solutions]
    assert data["rubric.yaml"] == (ROOT / "rubric.yaml").read_bytes()
    assert b"python -m grader check" in data["README.md"]


def test_the_kit_is_reproducible(kit, tmp_path):
    again = tmp_path / "again.zip"
    build_kit(again)
    assert again.read_bytes() == kit.read_bytes()


def test_a_starter_file_equal_to_a_solution_is_refused(tmp_path):
    root = tmp_path / "repo"
    for rel, text in {"assignment/README.md": "handout", "starter/gemm/naive.cu": "// the answer\n",
                      "solutions/gemm/naive.cu": "// the answer\n", "grader/__init__.py": "",
                      "rubric.yaml": "version: 1\n", "pyproject.toml": "", "setup.py": ""}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    with pytest.raises(BuildError, match="refusing to pack starter/gemm/naive.cu: it is a copy of solutions/gemm/naive.cu"):
        build_kit(tmp_path / "kit.zip", root)
    assert not (tmp_path / "kit.zip").exists()


def test_a_missing_bonus_kernel_is_information_not_a_fix(unpacked, tmp_path):
    sub = _solutions_copy(tmp_path / "no-hopper")
    (sub / "gemm" / "hopper.cu").unlink()
    proc = check(unpacked, str(sub), "--no-compile")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "info  gemm/hopper.cu" in proc.stdout and "optional, for bonus points" in proc.stdout
    assert "FIX" not in proc.stdout


def test_rows_to_fix_are_named_again_under_the_table(unpacked, tmp_path):
    sub = _solutions_copy(tmp_path / "no-report")
    (sub / "report.md").unlink()
    proc = check(unpacked, str(sub), "--no-compile")
    assert proc.returncode == 1
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("1 to fix (rows marked FIX: report.md)") or "rows marked FIX: report.md" in last, last


def test_a_zip_is_checked_and_hostile_input_never_gives_a_traceback(unpacked, tmp_path):
    archive = shutil.make_archive(str(tmp_path / "sub"), "zip", ROOT / "solutions")
    proc = check(unpacked, archive, "--no-compile")
    assert proc.returncode == 0 and "not compiled (--no-compile)" in proc.stdout, proc.stdout + proc.stderr
    junk = tmp_path / "junk.zip"
    junk.write_bytes(b"PK\x03\x04 not really a zip" * 10)
    proc = check(unpacked, str(junk), "--no-compile")
    assert proc.returncode == 1 and "FIX   submission" in proc.stdout and "Traceback" not in proc.stderr
    proc = check(unpacked, str(tmp_path / "nothing-here"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    proc = check(unpacked, archive, "--rubric", str(junk))
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_key_lines():
    text = "gpu:\n  name: H200\nex1:\n  fix:\n    max_blocks: 3\n  # comment\n  occupancy_pct: 50\n"
    assert key_lines(text) == {"gpu": 1, "gpu.name": 2, "ex1": 3, "ex1.fix": 4, "ex1.fix.max_blocks": 5,
                               "ex1.occupancy_pct": 7}


def test_what_the_intake_leaves_out_is_said_once(unpacked, tmp_path):
    sub = tmp_path / "linky"
    shutil.copytree(ROOT / "solutions", sub)
    (sub / "gemm" / "naive.cu").unlink()
    (sub / "gemm" / "naive.cu").symlink_to(ROOT / "solutions" / "gemm" / "naive.cu")
    (sub / "gemm" / "common.cuh").symlink_to("/etc/hostname")
    proc = check(unpacked, str(sub), "--no-compile")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "FIX   submission" in out and "gemm/common.cuh is a symbolic link" in out
    naive = [line for line in out.splitlines() if "naive.cu is a symbolic link" in line]
    assert len(naive) == 1 and naive[0].startswith("FIX   gemm/naive.cu") and "starter/" not in naive[0]


def test_the_kit_unzips_into_one_folder_whose_readme_says_how_to_submit(kit, tmp_path):
    with zipfile.ZipFile(kit) as zf:
        outside = [n for n in zf.namelist() if not n.startswith(FOLDER + "/")]
        assert not outside, outside[:5]
        zf.extractall(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [FOLDER]
    readme = (tmp_path / FOLDER / "README.md").read_text()
    assert "python -m grader submit my-submission/ --server URL --token TOKEN" in readme
    assert f"cd {FOLDER}" in readme


def test_check_needs_no_http_client_and_submit_says_what_it_needs(unpacked, tmp_path):
    sub = tmp_path / "sub"
    shutil.copytree(ROOT / "solutions", sub)
    proc = check(unpacked, str(sub), "--no-compile", httpx=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all well-formed" in proc.stdout and "Traceback" not in proc.stderr
    proc = check(unpacked, str(sub), "--server", "http://127.0.0.1:9", "--token", "t", httpx=False, command="submit")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error: `submit` needs the httpx package" in proc.stderr and "Traceback" not in proc.stderr


def _solutions_copy(dest: Path) -> Path:
    shutil.copytree(ROOT / "solutions", dest)
    return dest


def test_a_missing_bonus_section_is_information_not_a_fix(unpacked, tmp_path):
    sub = _solutions_copy(tmp_path / "no-bonus")
    report = sub / "report.md"
    text = report.read_text()
    start, end = text.index("## WMMA -> Hopper"), text.index("## Results: CUDA-core")
    report.write_text(text[:start] + text[end:])
    proc = check(unpacked, str(sub), "--no-compile")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "info  report wmma -> hopper" in proc.stdout and "optional, for bonus points" in proc.stdout
    assert "FIX" not in proc.stdout and "(1 optional part left out: rows marked info)" in proc.stdout


def test_check_applies_what_grading_applies_without_a_gpu(unpacked, tmp_path):
    """A size in bytes where KiB is asked and a GFLOP/s that does not match its ms: check says what grading
    will say, in the same words, and echoes every value with the unit it was read in."""
    sub = _solutions_copy(tmp_path / "odd")
    answers = sub / "occupancy" / "answers.yaml"
    answers.write_text(answers.read_text().replace("    shared_mem_kib: 7\n", "    shared_mem_kib: 7168\n"))
    report = sub / "report.md"
    report.write_text(report.read_text().replace("| tiled | 15.349 | 8,954 |", "| tiled | 15.349 | 9,954 |"))
    rubric = load_rubric(ROOT / "rubric.yaml")
    assert rubric.occupancy is not None
    graded = {r.item: r for r in grade_occupancy(rubric.occupancy, load_answers(sub, rubric.occupancy)[0])}
    hint = graded["ex1.fix"].message.splitlines()[-1]
    assert hint.startswith("ex1.fix.shared_mem_kib is in KiB: 7168 KiB is more") and "write 7 (KiB)" in hint
    table = {r.item: r for r in grade_report_submission(sub, rubric, {})}["table.cuda_cores"]
    assert table.status == Status.FAILED
    wrong = "row tiled: GFLOP/s is 9,954, but 2 N^3 / time with N = 4096 and 15.349 ms gives 8,954"
    assert wrong in table.message

    proc = check(unpacked, str(sub), "--no-compile")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert "FIX   occupancy answers" in out and "79 of 79 answers read; 1 implausible" in out
    assert f"line 23: {hint}" in out
    assert "ex1.fix.shared_mem_kib: 7168 KiB" not in out  # the read-back, under an ok row: on request
    out = check(unpacked, str(sub), "--no-compile", "--details").stdout
    assert "ex1.fix.shared_mem_kib: 7168 KiB" in out and "ex1.occupancy_pct: 29.69%" in out
    assert "ex6.cap_32.time_ms: 2.5 ms" in out
    assert "FIX   report table cuda_cores" in out and "R.11: CUDA-core ladder table" in out and wrong in out
    assert "ok    report table tensor_cores" in out
    assert "2 to fix" in out
