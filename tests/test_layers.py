"""The house's floors (pyproject.toml [tool.importlinter]; docs/design.md, "The house").

import-linter checks them in .ci/run's lint step; these tests run the same checker here: on the checkout
(both contracts kept), on a copy with one import running up a floor or closing a loop (refused, naming
it), and they check that docs/design.md lists the floors pyproject.toml declares, in the same order.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"

pytest.importorskip("importlinter")
tomllib = pytest.importorskip("tomllib")  # Python 3.11 on CI


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LINT, "--no-cache"], cwd=root, capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)})


def _floors() -> list[list[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    layers = next(c for c in data["tool"]["importlinter"]["contracts"] if c["type"] == "layers")["layers"]
    return [[name.strip() for name in re.split(r"[|:]", layer)] for layer in layers]


def _copy(tmp: Path) -> Path:
    shutil.copytree(ROOT / "grader", tmp / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return tmp


def test_the_checkout_keeps_both_contracts():
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in run.stdout


def test_an_import_up_a_floor_is_refused_and_named(tmp_path):
    root = _copy(tmp_path)
    model = root / "grader" / "model.py"  # the ground floor importing the command line
    model.write_text(model.read_text(encoding="utf-8") + "\nfrom grader import cli  # noqa: E402,F401\n")
    run = _lint(root)
    assert run.returncode != 0
    assert "grader.model is not allowed to import grader.cli" in run.stdout, run.stdout[-3000:]


def test_a_loop_between_siblings_of_one_floor_is_refused(tmp_path):
    """`:` siblings may import each other one way; both ways is a package loop."""
    root = _copy(tmp_path)
    cli = root / "grader" / "cli.py"
    cli.write_text(cli.read_text(encoding="utf-8") + "\nfrom grader import run_local  # noqa: E402,F401\n")
    run = _lint(root)
    assert run.returncode != 0
    assert "No cycles are allowed in grader." in run.stdout, run.stdout[-3000:]


def test_a_new_folder_needs_its_floor(tmp_path):
    root = _copy(tmp_path)
    (root / "grader" / "extras").mkdir()
    (root / "grader" / "extras" / "__init__.py").write_text('"""a folder given no floor"""\n')
    run = _lint(root)
    assert run.returncode != 0
    assert "extras" in run.stdout, run.stdout[-3000:]


def test_design_md_draws_the_floors_pyproject_declares():
    """The floors are declared once as data (pyproject.toml); docs/design.md's table of them follows it."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    table = text.split("<!-- floors -->")[1].split("<!-- /floors -->")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| floor")]
    drawn = [[name.strip(" `") for name in re.split(r",|\band\b", row.split("|")[2]) if name.strip(" `")]
             for row in rows]
    assert drawn == _floors()
