"""A student through the kit, with only the commands the kit's README prints: build the kit as an
instructor does, then, in a folder of the student's own, every shell block of the README that is in the
zip (unzip, set up, copy the starter, `check` it, grade it), then the README's `check` line on the
solutions and on a submission with typical mistakes (a kernel's name misspelt, a file missing, answers and
citations mistyped). The set-up finds a .venv that sees this interpreter's packages (tests/doc_blocks.py:
seed_venv); everything else runs as written. These are the kit's checks that compile (tests/test_kit.py
checks the rest with --no-compile): each is read here, from the README's own line in the unpacked kit,
with the kit's own grader."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

import pytest

from grader.compile import toolchain
from grader.deploy.kit.build import FOLDER
from tests.doc_blocks import ROOT, Reader, seed_venv, shell_blocks, shell_env

HAS_NVCC = toolchain.find_nvcc().path is not None


@pytest.fixture(scope="module")
def walk(tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("student")
    zip_path = home / "student-kit.zip"
    proc = subprocess.run([sys.executable, "-m", "grader", "kit", "build", "--out", str(zip_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    with zipfile.ZipFile(zip_path) as zf:
        readme = zf.read(f"{FOLDER}/README.md").decode()
    (home / "kit-README.md").write_text(readme)
    blocks = shell_blocks(home / "kit-README.md", "the kit's README.md")
    reader = Reader(home, shell_env(home))
    kit = home / FOLDER
    ran: list[tuple] = []
    for block in blocks:
        if block.skip_why:
            continue
        if "bootstrap.sh setup" in block.code:
            seed_venv(kit)  # the .venv the set-up would make; the set-up itself runs below, as written
        ran.append((block, reader.run(block.code)))
    return {"kit": kit, "blocks": blocks, "ran": ran, "reader": reader}


def _check_line(walk) -> str:
    """The README's `check` command line, as printed (without its comment)."""
    line = next(ln for b in walk["blocks"] for ln in b.code.splitlines() if " -m grader check " in ln)
    return line.split("#")[0].strip()


def test_every_command_the_readme_prints_runs_as_promised(walk):
    assert [b.where for b in walk["blocks"] if b.skip_why] == [walk["blocks"][-1].where]  # submit: a service
    assert len(walk["ran"]) == len(walk["blocks"]) - 1
    for block, proc in walk["ran"]:
        assert proc.returncode in block.promised_exits(), \
            f"{block.where} exited {proc.returncode}:\n{block.code}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        assert "Traceback" not in proc.stdout + proc.stderr


def test_setup_says_what_it_made_and_how_to_use_it(walk):
    setup = next(p for b, p in walk["ran"] if "bootstrap.sh setup" in b.code)
    assert "ready: .venv/" in setup.stderr and "run the grader with .venv/bin/python" in setup.stderr
    assert (walk["kit"] / "my-submission" / "gemm" / "naive.cu").is_file()  # the README's copy of the starter


def test_check_on_the_starter_says_what_to_fix(walk):
    """The README's `check` of its copy of the starter, with the kit's own grader (not this checkout's)."""
    probe = walk["reader"].run('.venv/bin/python -c "import grader; print(grader.PACKAGE_DIR)"')
    assert probe.stdout.strip() == str((walk["kit"] / "grader").resolve()), probe.stdout + probe.stderr
    block, proc = next((b, p) for b, p in walk["ran"] if " -m grader check " in b.code)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # well-formed files, but nothing answered yet
    assert "Traceback" not in proc.stderr
    out = proc.stdout
    assert "ok    gemm/naive.cu" in out and "ok    report.md" in out
    assert "FIX   occupancy answers" in out and "fields have no answer yet: gpu.name" in out
    assert "FIX   report naive -> coalesced" in out and "0 words (at least 40 expected)" in out
    if HAS_NVCC:
        assert "ok    kernel 1 naive" in out and "`mmNaive` compiles; launch: block 32x32, tile 32x32" in out
    else:
        assert "not compiled: no CUDA compiler found" in out


def test_grading_the_starter_prints_the_table(walk):
    block, proc = next((b, p) for b, p in walk["ran"] if "run_local.py" in b.code)
    assert proc.returncode == 0
    assert (walk["kit"] / "grading-out" / "results.json").is_file()


def test_check_on_the_solutions_and_on_a_typical_mistake(walk):
    kit, reader = walk["kit"], walk["reader"]
    line = _check_line(walk)
    shutil.copytree(ROOT / "solutions", kit / "reference")
    proc = reader.run(line.replace("my-submission/", "reference/"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FIX" not in proc.stdout and "all well-formed" in proc.stdout
    # a clean submission: one line a row; what was read back only on request
    cited = "line 65: `launch__registers_per_thread = 128`: ok"  # ncu reports it of every launch
    assert cited not in proc.stdout and "--details shows them" in proc.stdout
    assert all(not ln.startswith(" ") for ln in proc.stdout.splitlines())
    detailed = reader.run(line.replace("my-submission/", "reference/ --details --no-compile"))
    assert detailed.returncode == 0 and cited in detailed.stdout and "--details shows them" not in detailed.stdout

    sub = kit / "broken"
    shutil.copytree(ROOT / "solutions", sub)
    naive = sub / "gemm" / "naive.cu"
    naive.write_text(naive.read_text().replace("void mmNaive(", "void mmNaiv("))
    (sub / "gemm" / "tiled.cu").unlink()
    answers = sub / "occupancy" / "answers.yaml"
    answers.write_text(answers.read_text().replace("  warps_per_block: 1 ", "  warps_per_block: about one "))
    report = sub / "report.md"
    text = report.read_text().replace("`sectors_per_request = 2.5`", "`sectors_per_reqest = 2.5`")
    report.write_text(text.replace("mio_throttle_per_warp_active.pct = 53.9", "mio_throtle_per_warp_active.pct = 53.9"))
    proc = reader.run(line.replace("my-submission/", "broken/"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    out = proc.stdout
    assert "FIX   gemm/tiled.cu" in out and "gemm/tiled.cu is not in the submission" in out
    assert "skip  kernel 3 tiled" in out
    if HAS_NVCC:
        assert "FIX   kernel 1 naive" in out and "expected `mmNaive` in gemm/naive.cu; found: `mmNaiv" in out
    else:
        assert "gemm/naive.cu never names `mmNaive`" in out
    assert "line 12: ex1.warps_per_block: expected an integer, got `about one`" in out
    assert "line 19: `sectors_per_reqest = 2.5`: `sectors_per_reqest` is not a name the grader knows: did you mean " \
           "`sectors_per_request`?" in out
    assert ("line 38: `smsp__warp_issue_stalled_mio_throtle_per_warp_active.pct = 53.9`: no Nsight Compute metric "
            "has this name; closest: smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct") in out
    assert out.count("FIX ") == 5  # tiled.cu, the naive kernel, the answers, two report sections
    assert "5 to fix" in out
