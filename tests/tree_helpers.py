"""Hostile folder trees for the tests: a chain of nested folders of any depth, and a folder that cannot
be removed."""
from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def deep_chain(top: Path, depth: int, name: str = "d", file_every: int = 0) -> Iterator[Path]:
    """``depth`` folders ``name`` nested under ``top`` (made), created one level at a time through a
    descriptor, so the chain may go past PATH_MAX; with ``file_every``, a small file and a link to /etc
    every that many levels. ``top`` is removed afterwards (if the test did not), so that pytest's own
    clean-up of old temporary folders, which recurses, never meets the chain; by rm, which does not
    recurse, so that the helper does not depend on the code under test."""
    _make_chain(top, depth, name, file_every)
    try:
        yield top
    finally:
        subprocess.run(["rm", "-rf", "--", str(top)], check=True)


def _make_chain(top: Path, depth: int, name: str, file_every: int) -> None:
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            if file_every and level % file_every == 0:
                with open(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as f:
                    f.write(b"x" * 10)
                os.symlink("/etc", "etc", dir_fd=fd)
            os.mkdir(name, dir_fd=fd)
            below = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
    finally:
        os.close(fd)


@contextmanager
def unremovable(folder: Path) -> Iterator[Path]:
    """``folder`` (made, holding one file) that nobody can empty while the block runs: immutable for
    root (chattr +i), read-only for anyone else; made removable again afterwards."""
    folder.mkdir(parents=True)
    (folder / "held").write_text("x")
    if os.geteuid() != 0:
        folder.chmod(0o500)
        undo = ["chmod", "700", str(folder)]
    else:
        chattr = shutil.which("chattr")
        made = chattr and subprocess.run([chattr, "+i", str(folder)], capture_output=True).returncode == 0
        if not made:
            pytest.skip("root here cannot make a folder immutable (no chattr or no CAP_LINUX_IMMUTABLE)")
        undo = [str(chattr), "-i", str(folder)]
    try:
        yield folder
    finally:
        subprocess.run(undo, check=True)
