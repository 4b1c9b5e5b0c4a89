"""grader/bootstrap.sh on a fresh machine without bubblewrap: as root with apt-get it installs it; otherwise it
prints the one command that would. The machine is made fresh by a PATH without bwrap, whose `id` and
`apt-get` are stand-ins that say who runs and record what was asked of the package manager."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOOTSTRAP = ROOT / "grader" / "bootstrap.sh"
STAND_INS = ("bwrap", "id", "apt-get", "dnf", "zypper", "pacman", "apk")

FAKE_ID = """#!/bin/sh
[ "$1" = -u ] && { echo "$FAKE_UID"; exit 0; }
echo "uid=$FAKE_UID"
"""
# Records its arguments; `install` puts a bwrap on PATH (one that cannot make a sandbox: no real install here).
FAKE_APT = """#!/bin/sh
echo "$*" >> "$APT_LOG"
case "$*" in *install*) printf '#!/bin/sh\\nexit 1\\n' > "$FAKE_BIN/bwrap"; chmod +x "$FAKE_BIN/bwrap" ;; esac
"""


def _path_without_bwrap(tmp_path: Path, apt: bool) -> tuple[str, Path]:
    """A PATH with every tool of this one but bwrap and the package managers; `id` (and `apt-get`) stand-ins first."""
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "id").write_text(FAKE_ID)
    if apt:
        (fake / "apt-get").write_text(FAKE_APT)
    for tool in fake.iterdir():
        tool.chmod(0o755)
    dirs = [str(fake)]
    for n, folder in enumerate(d for d in os.environ.get("PATH", "").split(os.pathsep) if d and Path(d).is_dir()):
        mirror = tmp_path / f"path-{n}"
        mirror.mkdir()
        for entry in Path(folder).iterdir():
            if entry.name not in STAND_INS and not (mirror / entry.name).exists():
                (mirror / entry.name).symlink_to(entry)
        dirs.append(str(mirror))
    return os.pathsep.join(dirs), fake


def _bootstrap(tmp_path: Path, uid: int, apt: bool, **env: str) -> tuple[subprocess.CompletedProcess, Path, Path]:
    path, fake = _path_without_bwrap(tmp_path, apt)
    log = tmp_path / "apt.log"
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRADER_NO_INSTALL", "GRADER_SANDBOX")}
    full.update(PATH=path, FAKE_UID=str(uid), APT_LOG=str(log), FAKE_BIN=str(fake), GRADER_PYTHON=sys.executable, **env)
    proc = subprocess.run(["bash", str(BOOTSTRAP), "setup"], cwd=tmp_path, env=full, capture_output=True, text=True,
                          timeout=300)
    return proc, log, fake


def _installs_nothing_else() -> None:
    """Skip where bootstrap would also make a .venv (this interpreter lacks a tool): the test installs nothing."""
    extras = subprocess.run([sys.executable, "-m", "grader.compile.toolchain", "--pip-extras"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120).stdout.split()
    if extras:
        pytest.skip(f"bootstrap would pip-install {extras} for this interpreter")


def test_as_root_with_apt_get_bootstrap_installs_bubblewrap(tmp_path):
    _installs_nothing_else()
    proc, log, fake = _bootstrap(tmp_path, uid=0, apt=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    asked = log.read_text().splitlines()
    assert asked[0] == "update -qq" and asked[1].endswith("install -y -qq --no-install-recommends bubblewrap"), asked
    assert "bootstrap: bubblewrap (bwrap, the sandbox for students' code) is missing: apt-get install bubblewrap" \
        in proc.stderr
    assert (fake / "bwrap").is_file() and "students' code will run unfenced" not in proc.stderr


@pytest.mark.parametrize("uid,apt,command", [
    (1000, True, "sudo apt-get install -y bubblewrap"),  # not root: apt-get is there, but only root may use it
    (0, False, "install bubblewrap (bwrap) with the system's package manager"),  # root without any known manager
])
def test_otherwise_bootstrap_prints_the_one_command_and_installs_nothing(tmp_path, uid, apt, command):
    proc, log, fake = _bootstrap(tmp_path, uid=uid, apt=apt, GRADER_NO_INSTALL="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not log.exists() and not (fake / "bwrap").exists()
    warning = [line for line in proc.stderr.splitlines() if "bubblewrap (bwrap) is missing" in line]
    assert warning == ["bootstrap: WARNING: bubblewrap (bwrap) is missing, so students' code will run unfenced; "
                       f"to fence it: {command}"]
    assert "weak sandbox (bwrap is not installed" in proc.stderr  # the sandbox line says the same, once set up


def test_no_install_means_no_apt_get_even_as_root(tmp_path):
    proc, log, _ = _bootstrap(tmp_path, uid=0, apt=True, GRADER_NO_INSTALL="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not log.exists()
    assert "to fence it: sudo apt-get install -y bubblewrap" in proc.stderr


def test_the_readme_names_the_system_packages_ci_installs():
    """The README's two commands: every system package .ci/run installs is named, and where the outputs go."""
    ci = (ROOT / ".ci" / "run").read_text()
    packages = re.search(r"ci_packages=\(([^)]*)\)", ci)
    assert packages is not None
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Two commands"):readme.index("## Grading one submission")]
    for pkg in packages.group(1).split():
        assert pkg in section, pkg
    assert "`bash .ci/run`" in section and "installs all five" in section and len(packages.group(1).split()) == 5
    assert "writes `grading-out/`" in section and "automatic points" in section
