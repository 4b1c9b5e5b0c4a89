"""Per-machine folders the grader keeps between gradings (the warm CuPy cache, the GPU's kept
description): where they are, and when one may be trusted.

A kept folder is read by later gradings, so it is used only while nothing a student runs could have
written it: it is a real folder (no link) of the grader's own user that nobody else may write, and
no student code runs as the grader's own user unconfined (the bwrap fence, or a dedicated student
user). Otherwise there is none, and each grading makes what it needs for itself.
"""
from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from grader.evidence.sandbox import Confinement
from grader.sandbox import guard as sandbox

OFF = "off"  # a kept folder's variable set to this: none is kept


def _private(path: Path, is_kind: Callable[[int], bool]) -> bool:
    """``path`` itself (no link followed) is of that kind, the grader's user's, and nobody else may write it."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return is_kind(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def private_dir(path: Path) -> bool:
    """A real folder (no link) of the grader's user that nobody else may write."""
    return _private(path, stat.S_ISDIR)


def private_file(path: Path) -> bool:
    """A regular file (no link) of the grader's user that nobody else may write."""
    return _private(path, stat.S_ISREG)


def kept_root(variable: str, name: str) -> Path | None:
    """The kept folder ``name`` (``$variable``, default ``~/.cache/gemm-grader/<name>``), made if
    missing; None when ``$variable`` is ``off``, when it would not be safe (see the module docstring),
    or when it cannot be made private."""
    value = os.environ.get(variable, "").strip()
    if value.lower() == OFF:
        return None
    mode = sandbox.mode()
    if mode.confinement is not Confinement.BWRAP and mode.user is None:
        return None  # a student's program runs as the grader's own user, unconfined: it could write there
    root = Path(value) if value else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gemm-grader" / name
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return None
    return root if private_dir(root) else None


def file_hashes(folder: Path) -> dict[str, str] | None:
    """name -> SHA-256 of every entry of the flat folder ``folder`` (a kept folder's listing, held against
    its manifest); None if one is not a regular file."""
    files = {}
    for entry in os.scandir(folder):
        if not entry.is_file(follow_symlinks=False):
            return None
        files[entry.name] = hashlib.sha256(Path(entry.path).read_bytes()).hexdigest()
    return files
