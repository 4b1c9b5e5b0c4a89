"""A non-editable install (`pip install .`) grades a submission from outside the repository.

The wheel must carry every subpackage and the default rubric (setup.py copies rubric.yaml into
grader/data/), and nothing may look for files beside the package that only a checkout has.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.compile import toolchain

ROOT = Path(__file__).resolve().parent.parent
needs_nvcc = pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("install") / "site"
    # --no-build-isolation: the test extra installs setuptools and wheel, so no index is needed here.
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--target", str(site), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return site


def test_the_wheel_holds_every_subpackage_and_the_rubric(installed):
    pkg = installed / "grader"
    source_pkgs = {p.parent.relative_to(ROOT) for p in (ROOT / "grader").rglob("__init__.py")}
    for rel in source_pkgs:
        assert (installed / rel / "__init__.py").is_file(), f"{rel} missing from the installed package"
    assert (pkg / "data" / "rubric.yaml").read_text() == (ROOT / "rubric.yaml").read_text()
    for script in ("bootstrap.sh", "deploy/install.sh", "deploy/gradescope/run_autograder", "rubric/ncu_metrics.txt.gz",
                   "deploy/kit/README-students.md"):
        assert (pkg / script).is_file(), script
    assert not (installed / "solutions").exists() and not (installed / "tests").exists()


@needs_nvcc
def test_installed_package_grades_solutions_from_outside(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(installed)
    out = tmp_path / "out"
    # -P: the current folder is not put on sys.path; the grader is imported from the install only.
    cmd = [sys.executable, "-P", "-m", "grader", "grade", str(ROOT / "solutions"), "--no-gpu", "--quiet",
           "--out", str(out)]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = subprocess.run([sys.executable, "-P", "-c", "import grader; print(grader.PACKAGE_DIR, grader.IN_CHECKOUT)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.split() == [str((installed / "grader").resolve()), "False"]
    results = json.loads((out / "results.json").read_text())
    tests = {t["number"]: t for t in results["tests"]}
    for number in ("1.compiles", "2.compiles", "3.compiles", "4a.compiles", "4b.compiles", "5.compiles"):
        assert tests[number]["status"] == "passed", (number, tests[number]["output"][:300])
    assert results["score"] > 0


def test_installed_package_is_masked_inside_the_fence(installed, tmp_path):
    """site-packages stays visible (numpy imports), the grader package inside it is empty."""
    if subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True).returncode != 0:
        pytest.skip("bwrap is not installed here")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(installed)
    pkg = (installed / "grader").resolve()
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from grader.sandbox import guard as sandbox\n"
        "from grader.sandbox.fence import Fence\n"
        "if sandbox.mode().confinement.value != 'bwrap': print('WEAK', sandbox.mode().reason); raise SystemExit\n"
        f"probe = \"import os, numpy; print(sorted(os.listdir({str(pkg)!r})), numpy.__name__)\"\n"
        "rec = sandbox.run([sys.executable, '-c', probe], timeout_s=60, fence=Fence(scratch=Path(sys.argv[1])))\n"
        "print(rec.returncode, rec.stdout.strip(), rec.stderr.strip()[-500:])\n"
    )
    proc = subprocess.run([sys.executable, "-P", "-c", code, str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if proc.stdout.startswith("WEAK"):
        pytest.skip(proc.stdout.strip())
    assert proc.stdout.strip().startswith("0 [] numpy"), proc.stdout
