"""A student through the kit, with only the commands the kit's README prints: build the kit as an
instructor does, then, in a folder of the student's own, every shell block of the README that is in the
zip (unzip, set up, copy the starter, `check` it, grade it), then the README's `check` line on the
solutions and on a typical mistake (a kernel's name misspelt). The set-up finds a .venv that sees this
interpreter's packages (tests/doc_blocks.py: seed_venv); everything else runs as written."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

import pytest

from grader.deploy.kit.build import FOLDER
from tests.doc_blocks import ROOT, Reader, seed_venv, shell_blocks, shell_env


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
    block, proc = next((b, p) for b, p in walk["ran"] if " -m grader check " in b.code)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # nothing answered yet
    assert "FIX   occupancy answers" in proc.stdout and "ok    gemm/naive.cu" in proc.stdout


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

    shutil.copytree(ROOT / "solutions", kit / "misspelt")
    tiled = kit / "misspelt" / "gemm" / "tiled.cu"
    tiled.write_text(tiled.read_text().replace("mmTiled", "mmTile"))
    proc = reader.run(line.replace("my-submission/", "misspelt/"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FIX" in proc.stdout and "mmTiled" in proc.stdout and "Traceback" not in proc.stderr
