"""A missing set-up (grader/setup_check.py): every entry point says in one line what to run, with an exit
code of its own, and no traceback. ``python -S`` is an interpreter without site-packages, the state of a
student's ``python3`` before ``bash grader/bootstrap.sh setup``."""
import subprocess
import sys
from pathlib import Path

import pytest

from grader.setup_check import EXIT_SETUP, REQUIRED, SETUP_COMMAND, missing_modules, setup_message

ROOT = Path(__file__).resolve().parent.parent

ENTRY_POINTS = [
    ["-m", "grader", "check", "starter/"],
    ["-m", "grader", "kit", "build", "--out", "KIT"],
    ["-m", "grader", "grade", "starter/", "--out", "OUT"],
    ["grader/run_local.py", "starter/", "--out", "OUT"],
    ["-m", "grader.deploy.gradescope", "run", "--submission", "starter", "--results", "OUT"],
    ["-m", "grader.deploy.batch", "grade", "EXPORT", "--out", "OUT"],
]


@pytest.mark.parametrize("args", ENTRY_POINTS, ids=lambda a: " ".join(a[:3]))
def test_every_entry_point_names_the_set_up_without_a_traceback(args, tmp_path):
    args = [str(tmp_path / a) if a in ("KIT", "OUT", "EXPORT") else a for a in args]
    proc = subprocess.run([sys.executable, "-S", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == EXIT_SETUP, proc.stderr
    assert EXIT_SETUP not in (0, 1, 2, 3)  # ok, rows to fix, usage, the grader's own failure
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"`{SETUP_COMMAND}`" in lines[0] and "cannot import numpy" in lines[0]
    assert proc.stdout == ""


def test_this_interpreter_has_every_package_the_check_asks_for():
    assert missing_modules() == []
    assert missing_modules(("numpy", "no_such_module_xyz")) == ["no_such_module_xyz"]


def test_the_message_names_the_interpreter_the_set_up_made_when_there_is_one(tmp_path):
    line = setup_message(["dacite"], executable="/usr/bin/python3")
    assert "/usr/bin/python3" in line and "cannot import dacite" in line
    if (ROOT / ".venv" / "bin" / "python").is_file():
        assert ".venv/bin/python -m grader" in line


def test_the_list_matches_pyproject_dependencies():
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {d.split(">")[0].split("=")[0].split("[")[0].strip().lower() for d in deps}
    as_imported = {"pyyaml": "yaml", "markdown-it-py": "markdown_it"}
    assert {as_imported.get(n, n) for n in names} - {"httpx"} == set(REQUIRED)
    bootstrap = (ROOT / "grader" / "bootstrap.sh").read_text()
    assert all(f" {m}" in bootstrap.split("mods=(")[1].split(")")[0] or bootstrap.split("mods=(")[1].startswith(m)
               for m in REQUIRED)


def test_a_command_that_needs_an_extra_names_it(tmp_path):
    """`similarity` needs the similarity extra (copydetect); every other command parses without it."""
    hide = ("import runpy, sys\n"
            "class No:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'copydetect':\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, No())\n"
            "sys.argv[0] = 'grader'\n"
            "runpy.run_module('grader', run_name='__main__', alter_sys=True)\n")
    sub = tmp_path / "class"
    sub.mkdir()
    proc = subprocess.run([sys.executable, "-c", hide, "similarity", str(sub), "--out", str(tmp_path / "o")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_SETUP and "Traceback" not in proc.stderr, proc.stderr
    assert "needs the 'similarity' extra (copydetect cannot be imported)" in proc.stderr
    proc = subprocess.run([sys.executable, "-c", hide, "check", "starter/", "--no-compile"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr  # the starter: rows to fix


def test_the_gradescope_build_needs_no_package(tmp_path):
    """The Dockerfile builds the autograder zip in python:slim: standard library only, no set-up asked for."""
    proc = subprocess.run([sys.executable, "-S", "-m", "grader.deploy.gradescope", "build", "--out",
                           str(tmp_path / "a.zip")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
