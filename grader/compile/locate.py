"""Find a submission's files: the stage sources, the occupancy program, its answers, the report.

One place decides where a file may be and what is refused, so every step reads the same file and
words a problem the same way. It works on the grader's own copy of the submission
(:mod:`grader.compile.intake` makes it, without links); a link found anyway is still only followed
when it stays inside the submission.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

MAX_SOURCE_BYTES = 1 << 20  # a GEMM kernel is a few KB; anything near 1 MB is not one
# Folders a zip tool adds that are never a submission's own.
_JUNK_PREFIXES = (".", "__MACOSX")


class Problem(str, Enum):
    """Why a file was not located (typed, so callers never read it back from the message)."""

    NONE = ""
    MISSING = "missing"
    LINK_OUTSIDE = "link_outside"
    BROKEN_LINK = "broken_link"
    EMPTY = "empty"
    TOO_LARGE = "too_large"


@dataclass(frozen=True)
class Located:
    """A submission file, or why there is none (``path`` None, ``problem`` set, ``message`` worded)."""

    rel: str
    path: Path | None
    problem: Problem = Problem.NONE
    message: str = ""

    @property
    def found(self) -> bool:
        return self.path is not None


def _subfolders(root: Path) -> list[Path]:
    try:
        return sorted(d for d in root.iterdir() if d.is_dir() and not d.is_symlink()
                      and not d.name.startswith(_JUNK_PREFIXES))
    except OSError:
        return []


def _candidates(root: Path, rel: str, nearby: bool) -> list[Path]:
    cands = [root / rel]
    if nearby:  # a submission that is the exercise folder itself, or one wrapped in a folder
        name = Path(rel).name
        cands += [root / name, *(d / name for d in _subfolders(root))]
    return list(dict.fromkeys(cands))


def locate(root: Path, rel: str, *, nearby: bool = False, limit: int = MAX_SOURCE_BYTES) -> Located:
    """The file ``rel`` of the submission at ``root``.

    ``nearby``: also look for its name directly under ``root`` and one folder down (the occupancy
    files and the report; stage files keep their exact place, since a stage's folder is compiled
    with it). Refuses a link that leaves the submission, an empty file and one over ``limit`` bytes.
    """
    root = Path(root)
    for path in _candidates(root, rel, nearby):
        if path.is_symlink():
            try:
                target = path.resolve(strict=True)
            except (OSError, RuntimeError):
                return Located(rel, None, Problem.BROKEN_LINK, f"{rel} is a broken symbolic link")
            if root.resolve() not in target.parents:
                return Located(rel, None, Problem.LINK_OUTSIDE,
                               f"{rel} is a symbolic link to a file outside the submission")
        if not path.is_file():
            continue
        size = path.stat().st_size
        if size == 0:
            return Located(rel, None, Problem.EMPTY, f"{rel} is empty")
        if size > limit:
            return Located(rel, None, Problem.TOO_LARGE, f"{rel} is {size:,} bytes; the limit is {limit:,}")
        return Located(rel, path)
    return Located(rel, None, Problem.MISSING, f"{rel} is not in the submission")


def submission_root(path: Path, markers: Sequence[str]) -> tuple[Path, str]:
    """Step into the one folder a zip or Gradescope wrapped the submission in, when its files
    (``markers``, e.g. the rubric's stage files) are only there. Returns (root, note for the TA)."""
    path = Path(path)

    def has_any(root: Path) -> bool:
        return any((root / m).exists() for m in markers)

    if not path.is_dir() or has_any(path):
        return path, ""
    subdirs = _subfolders(path)
    if len(subdirs) == 1 and has_any(subdirs[0]):
        return subdirs[0], f"files were found one folder down, in {subdirs[0].name}/; graded from there"
    return path, ""
