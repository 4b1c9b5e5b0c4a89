"""The install's own files (grader/deploy/gradescope/build.py: INSTALL_FILES): the Dockerfile runs setup.sh over
these alone first, so that its slow layer (apt-get, the .venv, the CUDA wheels) depends on nothing else. Here:
the list holds every grader module the install's Python steps import, and setup.sh runs to its end over them.
tests/test_dockerfile_build.py builds the image that way for real."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grader.deploy.gradescope import build as gbuild

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("grader/deploy/gradescope/setup.sh", "grader/deploy/install.sh", "grader/bootstrap.sh")


def _module_file(name: str) -> str | None:
    """grader/x/y.py or grader/x/y/__init__.py for ``grader.x.y``, relative to ROOT; None if neither."""
    rel = Path(*name.split("."))
    for candidate in (rel.with_suffix(".py"), rel / "__init__.py"):
        if (ROOT / candidate).is_file():
            return candidate.as_posix()
    return None


def _imports(rel: str) -> set[str]:
    """The grader modules ``rel`` imports anywhere in it (functions' own imports too), with their packages."""
    tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
    package = ".".join(Path(rel).with_suffix("").parts[:-1]) if not rel.endswith("__init__.py") \
        else ".".join(Path(rel).parts[:-1])
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])])
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)  # `from grader.x import y`: y may be a module
    found = set()
    for name in names:
        if name == "grader" or name.startswith("grader."):
            parts = name.split(".")
            found.update(p for p in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if _module_file(p))
    return found


def _python_modules_run_by(script: str) -> set[str]:
    return set(re.findall(r"-m (grader(?:\.\w+)+)", (ROOT / script).read_text(encoding="utf-8")))


def test_the_install_files_hold_every_grader_module_its_python_steps_import():
    listed = set(gbuild.INSTALL_FILES)
    assert {"setup.sh", "pyproject.toml", "grader/deploy/install.sh", "grader/bootstrap.sh"} <= listed
    bootstrap = (ROOT / "grader" / "bootstrap.sh").read_text(encoding="utf-8")
    run = set().union(*(_python_modules_run_by(s) for s in SCRIPTS))
    assert "grader.compile.toolchain" in run
    # A module the scripts run that is not an install file: the script must run it only where its file is there.
    for name in sorted(run):
        if _module_file(name) not in listed:
            assert f"[[ -f {_module_file(name)} ]]" in bootstrap, f"{name}: not in INSTALL_FILES and run unguarded"
    todo = [_module_file(n) for n in run if _module_file(n) in listed]
    closure: set[str] = set()
    while todo:
        rel = todo.pop()
        if rel in closure:
            continue
        closure.add(rel)
        todo.extend(m for m in (_module_file(n) for n in _imports(rel)) if m)
    assert "grader/compile/tool_search.py" in closure and "grader/__init__.py" in closure
    assert closure <= listed, f"imported by the install's Python steps but not in INSTALL_FILES: {sorted(closure - listed)}"
    # every listed file is one the zip has (its root's setup.sh, or the repository's)
    assert listed <= set(gbuild.package_files()) | set(gbuild.ROOT_FILES)


@pytest.fixture(scope="module")
def install_only(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("install-files")
    gbuild.build(tmp / "a.zip")
    names = gbuild.unpack(tmp / "a.zip", tmp / "source", only=gbuild.INSTALL_FILES)
    assert sorted(names) == sorted(gbuild.INSTALL_FILES)
    return tmp / "source"


def test_the_toolchain_probe_answers_the_same_from_the_install_files_alone(install_only):
    # -S: no site-packages, so no installed grader can stand in for a missing file
    probe = [sys.executable, "-S", "-m", "grader.compile.toolchain", "--pip-extras"]
    alone = subprocess.run(probe, cwd=install_only, capture_output=True, text=True, timeout=120)
    whole = subprocess.run(probe, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert alone.returncode == 0 == whole.returncode, alone.stderr + whole.stderr
    assert alone.stdout == whole.stdout


def test_setup_runs_to_its_end_over_the_install_files_alone(install_only):
    # reuse: the test's own interpreter as it is (no apt-get, no user, no pip); the Dockerfile's build does the rest
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GRADER_")},
           "GRADER_INSTALL_MODE": "reuse", "GRADER_PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(install_only / "setup.sh")], cwd=install_only, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "install: done" in proc.stderr and "No module named" not in proc.stderr, proc.stderr
    assert (install_only / ".grader-python").read_text().strip() == sys.executable


def test_unpacking_only_some_members_names_a_missing_one(tmp_path):
    gbuild.build(tmp_path / "a.zip")
    with pytest.raises(gbuild.BuildError, match="no grader/not_there.py"):
        gbuild.unpack(tmp_path / "a.zip", tmp_path / "out", only=("setup.sh", "grader/not_there.py"))
