"""pytest-xdist's controller writes pytest's rewritten test modules before its workers start (tests/rewrite_ahead.py):
a worker finds a current one, and a changed test is rewritten again."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.rewrite_ahead import is_xdist_controller, write_ahead

def pytest_configure(config):
    if is_xdist_controller(config):
        write_ahead(config)
"""
TEST = """
import os
from pathlib import Path

from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc

def test_this_module_was_rewritten_and_its_pyc_is_current():
    pyc = Path(__file__).parent / "__pycache__" / ("test_sample" + PYC_TAIL)
    assert os.environ.get("PYTEST_XDIST_WORKER")  # a worker, which may not write bytecode here
    assert _read_pyc(Path(__file__), pyc) is not None  # what pytest's import reads instead of rewriting
    assert "@py_builtins" in globals()  # pytest's rewritten asserts

def test_a_failing_assert_explains_itself():
    left, right = [1, 2], [1, {right}]
    assert left == right
"""


def _run(project: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # the workers write nothing: only the controller can
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1",
                           "--rootdir", str(project), "-c", os.devnull, "--ignore", str(project / "test_a_broken.py"),
                           str(project)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_the_controller_writes_the_rewritten_modules_and_a_changed_test_is_rewritten_again(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    # a file that cannot be rewritten, before the others: left to the workers (here not collected), the rest written
    (tmp_path / "test_a_broken.py").write_text("def test_(:\n")
    test = tmp_path / "test_sample.py"
    pyc = tmp_path / "__pycache__" / ("test_sample" + PYC_TAIL)
    for right in (2, 3):  # a passing run, then the test changed so that its second test fails
        test.write_text(TEST.format(right=right))
        proc = _run(tmp_path)
        assert _read_pyc(test, pyc) is not None, "no current rewritten pyc after the run"
        assert (tmp_path / "__pycache__" / ("conftest" + PYC_TAIL)).is_file()
        if right == 2:
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "2 passed" in proc.stdout
        else:
            # the rewritten module of the changed source: its assert shows both sides, as pytest's own would
            assert proc.returncode == 1, proc.stdout + proc.stderr
            assert "1 failed, 1 passed" in proc.stdout
            assert "assert [1, 2] == [1, 3]" in proc.stdout
