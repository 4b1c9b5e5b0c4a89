"""Shared helpers for tests/test_fence*.py: hostile snippets run through the real bwrap."""
from __future__ import annotations

import os
import pwd
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from grader.evidence.sandbox import Confinement, Mode
from grader.sandbox import guard as sandbox

PY = sys.executable


def py(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


def need_bwrap() -> Mode:
    """Skip (with the mode's reason) where bwrap cannot make a sandbox: CI installs it (.ci/run)."""
    m = sandbox.mode()
    if m.confinement is not Confinement.BWRAP:
        pytest.skip(f"no bwrap sandbox on this machine: {m.reason}")
    return m


def marker() -> str:
    """A unique word to put in a process's command line, to find it in /proc afterwards."""
    return f"fence-test-{uuid.uuid4().hex}"


def live_with(word: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line contains ``word``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{name}/stat", "rb") as f:
                state = f.read().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if word.encode() in cmd and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def wait_none_with(word: str, within: float = 2.0) -> list[int]:
    deadline = time.monotonic() + within
    while (left := live_with(word)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def switch_user() -> pwd.struct_passwd:
    """An unprivileged account to switch to (nobody, else one made with useradd); skips if none."""
    if os.geteuid() != 0:
        pytest.skip("switching users needs the tests to run as root")
    for name in ("nobody", "gemm-fence-test"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    try:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "gemm-fence-test"],
                       check=True, capture_output=True, timeout=30)
        return pwd.getpwnam("gemm-fence-test")
    except (OSError, subprocess.SubprocessError, KeyError) as exc:
        pytest.skip(f"no unprivileged user to switch to, and useradd failed: {exc}")
