"""Copy hostile files without following a link or passing a limit: a folder, or a zip's members.

The low level of :mod:`grader.compile.intake` (one submission) and of the batch's export intake
(``grader.untrusted.export``, a whole class). Every entry that is not copied becomes a
:class:`Skipped` record naming it and saying why; a whole-copy limit raises :class:`Refused`.

- Links are never followed, at any depth: ``os.scandir`` entries are asked with
  ``follow_symlinks=False``, and a zip member's Unix mode (``external_attr``) marks a link. Files are
  opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked to be regular, so one swapped for a link or a
  FIFO between the listing and the copy is not followed and does not block.
- Zip members with an absolute path or ``..`` are never written; neither is a member that inflates
  past the ratio cap (a zip bomb), checked before a byte is written; sizes are counted while
  copying too, since a member's stored sizes can lie.
- Nothing deeper than ``Limits.max_depth`` folders is copied: a chain of thousands of nested folders
  (a few KiB of zip) would otherwise reach every later walk over the copy.

:func:`remove_tree` and :func:`tree_size` walk a folder at any depth without recursion and with one
open descriptor, for every folder the grader or the service deletes (a student's run can make a
deep chain inside a work folder whatever intake let in).
"""
from __future__ import annotations

import os
import re
import stat
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path, PurePosixPath

from grader.untrusted.quote import quote_code, show_name

MiB = 1024 * 1024
# A submission is about ten source files and a report (under 1 MiB in all). The caps leave room
# for a stray build folder, a .git folder or a few Nsight Compute reports, and keep a hostile
# upload from filling the grading machine's disk or its time.
MAX_ENTRIES = 2_000  # files and folders: a walk over millions of entries would use the time limit
MAX_TOTAL_BYTES = 64 * MiB
MAX_FILE_BYTES = 16 * MiB  # .ncu-rep reports are a few MiB; sources are far below compile's own cap
# A submission's folders are two or three deep (gemm/, answers/, a wrapping folder); a stray build or
# .git folder reaches about ten.
MAX_DEPTH = 32
# Deflate packs source text 3-10x and even a file of one repeated byte under ~1030x. A member
# inflating more than 100x its stored size (and to more than a MiB: tiny members may legitimately
# compress very well) is a zip bomb, refused before a byte is written.
MAX_RATIO = 100.0
RATIO_FLOOR_BYTES = 1 * MiB
_CHUNK = 256 * 1024
# Folders a zip tool adds (macOS resource forks) that are never part of a submission.
JUNK_NAMES = frozenset({"__MACOSX", ".DS_Store"})


@dataclass(frozen=True)
class Limits:
    max_entries: int = MAX_ENTRIES
    max_total_bytes: int = MAX_TOTAL_BYTES
    max_file_bytes: int = MAX_FILE_BYTES
    max_ratio: float = MAX_RATIO
    ratio_floor_bytes: int = RATIO_FLOOR_BYTES
    max_depth: int = MAX_DEPTH  # folders below the submission's root: a/b/c.cu is at depth 2


SUBMISSION_LIMITS = Limits()


class Skip(str, Enum):
    """Why one entry was left out of the copy."""

    SYMLINK = "symlink"
    SPECIAL = "special"  # a device, FIFO or socket
    TOO_LARGE = "too_large"
    UNSAFE_NAME = "unsafe_name"  # an absolute zip member path, or one with '..'
    ZIP_BOMB = "zip_bomb"  # a member's compression ratio is past Limits.max_ratio
    TOO_DEEP = "too_deep"  # under more than Limits.max_depth folders
    CONFLICT = "conflict"  # a file where a folder is needed, or a name given twice
    UNREADABLE = "unreadable"  # encrypted, corrupt or not readable
    OWN_OUTPUT = "own_output"  # the grader's own output folder, inside the submission


@dataclass(frozen=True)
class Skipped:
    path: str  # relative to the submission (a zip member's name as stored)
    why: Skip
    detail: str

    def message(self) -> str:
        return f"{show_name(self.path)} {self.detail}"


class Refused(Exception):
    """A whole-submission limit was passed: stop copying."""


@dataclass
class CopyState:
    """Counts while copying, against the limits."""

    limits: Limits
    entries: int = 0
    bytes: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    deep_cuts: set[str] = field(default_factory=set)  # the folders past max_depth, each recorded once

    def count_entry(self, rel: str) -> None:
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise Refused(f"it has more than {self.limits.max_entries:,} files and folders (at {rel}); "
                          "submit only your sources, answers and report")

    def skip(self, rel: str, why: Skip, detail: str) -> None:
        self.skipped.append(Skipped(rel, why, detail))

    def too_deep(self, parts: tuple[str, ...]) -> bool:
        """True when an entry at ``parts`` lies under more than ``max_depth`` folders. The first folder
        past the limit is recorded once (everything under it goes with it), not every entry below it."""
        depth = self.limits.max_depth
        if len(parts) <= depth + 1:
            return False
        cut = "/".join(parts[:depth + 1])
        if cut not in self.deep_cuts:
            self.deep_cuts.add(cut)
            self.skip(cut, Skip.TOO_DEEP, f"lies under more than {depth} nested folders (the limit is {depth}); "
                                          "it and everything below it are left out")
        return True

    def stream(self, src, target: Path, rel: str) -> bool:
        """Copy the open binary stream ``src`` to ``target`` (created), within the limits.
        False (nothing left behind) when the file alone is too large."""
        written = 0
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            with os.fdopen(fd, "wb") as out:
                while True:
                    chunk = src.read(_CHUNK)
                    if not chunk:
                        break
                    written += len(chunk)
                    if written > self.limits.max_file_bytes:
                        break
                    if self.bytes + written > self.limits.max_total_bytes:
                        raise Refused(f"its files add up to more than {_size(self.limits.max_total_bytes)} "
                                      f"(reached at {rel})")
                    out.write(chunk)
        except BaseException:
            target.unlink(missing_ok=True)
            raise
        if written > self.limits.max_file_bytes:
            target.unlink(missing_ok=True)
            self.skip(rel, Skip.TOO_LARGE, f"is larger than {_size(self.limits.max_file_bytes)}; left out")
            return False
        self.bytes += written
        return True


def _size(n: int) -> str:
    return f"{n / MiB:g} MiB"


def fresh_folder(dest: Path) -> Path:
    """``dest``, emptied (or made): a copy never mixes with what an earlier run left."""
    dest = Path(dest)
    if os.path.lexists(dest):
        if dest.is_symlink() or not dest.is_dir():
            dest.unlink()
        else:
            remove_tree(dest)
    dest.mkdir(parents=True)
    return dest


# --------------------------------------------------------------------------------------------
# Removing and measuring a folder at any depth
# --------------------------------------------------------------------------------------------
_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class _Level:
    """One folder on the way down: its name in its parent, the parent's identity, its subfolders left."""

    name: str
    parent: tuple[int, int]
    pending: list[str]


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _walk(top: Path, on_entry: Callable[[int, os.DirEntry], None],
          on_leave: Callable[[int, str], None]) -> OSError | None:
    """Visit every folder under ``top`` (a folder; links never followed), deepest last, holding one
    descriptor: down by name (``dir_fd``), back up through ``..``, checked to be the folder it came
    from. No recursion and no path longer than one name, so a chain of any depth (past PATH_MAX too)
    is walked. ``on_entry(dir_fd, entry)`` gets every entry that is not a folder; ``on_leave(dir_fd,
    name)`` gets each folder below ``top`` once its contents were visited, ``dir_fd`` being its parent.
    The first OSError of a callback or of opening a folder is returned (the walk goes on past it); a
    folder moved while it was walked ends the walk with an OSError."""
    first: OSError | None = None
    fd = os.open(top, _DIR_OPEN)
    stack: list[_Level] = []
    try:
        pending, first = _visit(fd, on_entry)
        while True:
            if pending:
                name = pending.pop()
                try:
                    child = os.open(name, _DIR_OPEN, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    first = first or exc
                    continue
                stack.append(_Level(name, _identity(fd), pending))
                os.close(fd)
                fd = child
                pending, error = _visit(fd, on_entry)
                first = first or error
                continue
            if not stack:
                return first
            level = stack.pop()
            parent = os.open("..", _DIR_OPEN, dir_fd=fd)
            os.close(fd)
            fd = parent
            if _identity(fd) != level.parent:
                raise OSError(f"{top}: a folder under it was moved while it was walked")
            try:
                on_leave(fd, level.name)
            except FileNotFoundError:
                pass
            except OSError as exc:
                first = first or exc
            pending = level.pending
    finally:
        os.close(fd)


def _visit(fd: int, on_entry: Callable[[int, os.DirEntry], None]) -> tuple[list[str], OSError | None]:
    """The subfolders of the open folder ``fd`` (every other entry goes to ``on_entry``) and the first
    OSError met, if any."""
    try:
        with os.scandir(fd) as it:
            entries = list(it)
    except OSError as exc:
        return [], exc
    folders, first = [], None
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            else:
                on_entry(fd, entry)
        except FileNotFoundError:
            pass
        except OSError as exc:
            first = first or exc
    return folders, first


def remove_tree(path: Path, *, ignore_errors: bool = False) -> None:
    """Remove the folder ``path`` and everything under it, at any depth (see :func:`_walk`); a link is
    never followed (``path`` itself being a link is an error). What cannot be removed is left and,
    unless ``ignore_errors``, the first error is raised as an OSError once everything else is gone."""
    first: OSError | None = None
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise NotADirectoryError(f"{path} is a symbolic link, not a folder: not removed")
        first = _walk(Path(path), lambda fd, entry: os.unlink(entry.name, dir_fd=fd),
                      lambda fd, name: os.rmdir(name, dir_fd=fd))
        os.rmdir(path)
    except OSError as exc:
        first = first or exc
    if first is not None and not ignore_errors:
        raise first


def tree_size(path: Path) -> int:
    """Bytes of the files under the folder ``path`` (links counted as themselves), at any depth;
    what cannot be read counts 0."""
    total = 0

    def add(fd: int, entry: os.DirEntry) -> None:
        nonlocal total
        total += entry.stat(follow_symlinks=False).st_size

    try:
        _walk(Path(path), add, lambda fd, name: None)
    except OSError:
        pass
    return total


# --------------------------------------------------------------------------------------------
# A folder
# --------------------------------------------------------------------------------------------
def _avoided(dest: Path) -> set[tuple[int, int]]:
    """(device, inode) of the destination and the folders above it: when the grader's output folder
    lies inside the submission (``grade . --out grading-out``), it is not copied into itself."""
    out = set()
    for p in (dest, *dest.parents):
        try:
            st = os.stat(p)
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    return out


def _copy_file(entry: os.DirEntry, target: Path, rel: str, state: CopyState) -> None:
    try:
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:  # ELOOP: replaced by a link since it was listed
        state.skip(rel, Skip.UNREADABLE, f"could not be opened ({exc.strerror}); left out")
        return
    with os.fdopen(fd, "rb") as src:
        if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
            state.skip(rel, Skip.SPECIAL, "is not a regular file; left out")
            return
        try:
            state.stream(src, target, rel)
        except OSError as exc:
            state.skip(rel, Skip.UNREADABLE, f"could not be copied ({exc.strerror}); left out")


def copy_dir(src: Path, dest: Path, state: CopyState) -> None:
    avoid = _avoided(dest)
    stack: list[tuple[str, Path]] = [(os.fspath(src), dest)]
    while stack:
        folder, target_dir = stack.pop()
        prefix = os.path.relpath(folder, src)
        prefix = "" if prefix == "." else prefix + "/"
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            state.skip(prefix or ".", Skip.UNREADABLE, f"could not be listed ({exc.strerror}); left out")
            continue
        for entry in entries:
            rel = prefix + entry.name
            if entry.name in JUNK_NAMES:
                continue
            state.count_entry(rel)
            target = target_dir / entry.name
            try:
                if entry.is_symlink():
                    state.skip(rel, Skip.SYMLINK, f"is a symbolic link (to {_link_target(entry.path)}); links are "
                                                  "not followed: submit the file itself")
                elif entry.is_dir(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    if (st.st_dev, st.st_ino) in avoid:
                        state.skip(rel, Skip.OWN_OUTPUT, "holds the grader's own output folder; left out")
                        continue
                    if state.too_deep(tuple(rel.split("/")) + ("",)):
                        continue  # its files would be under more than max_depth folders
                    target.mkdir(mode=0o755)
                    stack.append((entry.path, target))
                elif entry.is_file(follow_symlinks=False):
                    _copy_file(entry, target, rel, state)
                else:
                    state.skip(rel, Skip.SPECIAL, "is not a regular file or folder; left out")
            except OSError as exc:
                state.skip(rel, Skip.UNREADABLE, f"could not be copied ({exc.strerror}); left out")


def _link_target(path: str) -> str:
    try:
        return quote_code(os.readlink(path), 200)
    except OSError:
        return "an unreadable target"


# --------------------------------------------------------------------------------------------
# A zip
# --------------------------------------------------------------------------------------------
_DRIVE = re.compile(r"^[A-Za-z]:")


def member_parts(name: str) -> tuple[str, ...] | None:
    """The path parts of a zip member name, or None when it is absolute or climbs with '..'.
    Backslashes count as separators (zips written on Windows use them)."""
    name = name.replace("\\", "/")
    if name.startswith("/") or _DRIVE.match(name):
        return None
    parts = tuple(p for p in PurePosixPath(name).parts if p not in ("", "."))
    if ".." in parts or "\x00" in name:
        return None
    return parts


def _is_symlink_member(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _mkdirs(dest: Path, parts: tuple[str, ...]) -> Path | None:
    """dest/parts..., made as needed; None when one of them is a file already."""
    here = dest
    for part in parts:
        here = here / part
        if here.is_dir():
            continue
        if os.path.lexists(here):
            return None
        here.mkdir(mode=0o755)
    return here


def extract_zip(zip_path: Path, dest: Path, limits: Limits = SUBMISSION_LIMITS) -> CopyState:
    """Extract the members of ``zip_path`` that are safe into ``dest`` (an existing folder).

    Every member that is not extracted is a :class:`Skipped` record naming it; a whole-zip
    limit raises ``Refused``; an unreadable archive raises ``zipfile.BadZipFile`` or ``OSError``.
    """
    state = CopyState(limits)
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            name = info.filename
            parts = member_parts(name)
            if parts is None:
                state.skip(name, Skip.UNSAFE_NAME, "has an absolute path or '..' in it")
                continue
            if not parts or any(p in JUNK_NAMES for p in parts):
                continue
            state.count_entry(name)
            if state.too_deep(parts + ("",) if info.is_dir() else parts):
                continue
            if _is_symlink_member(info):
                state.skip(name, Skip.SYMLINK, "is a symbolic link; links are not followed: submit the file itself")
                continue
            try:
                if info.is_dir():
                    if _mkdirs(dest, parts) is None:
                        state.skip(name, Skip.CONFLICT, "is a folder with the name of a file; left out")
                    continue
                _extract_member(zf, info, dest, parts, state)
            except OSError as exc:
                state.skip(name, Skip.UNREADABLE, f"could not be extracted ({exc.strerror or exc}); left out")
    return state


def _extract_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path, parts: tuple[str, ...],
                    state: CopyState) -> None:
    name, limits = info.filename, state.limits
    if info.flag_bits & 0x1:
        state.skip(name, Skip.UNREADABLE, "is encrypted; left out")
        return
    if info.file_size > limits.ratio_floor_bytes and info.file_size > limits.max_ratio * max(1, info.compress_size):
        state.skip(name, Skip.ZIP_BOMB, f"inflates {info.file_size:,} bytes from {info.compress_size:,} "
                                        f"(more than {limits.max_ratio:g}x: a zip bomb)")
        return
    if info.file_size > limits.max_file_bytes:
        state.skip(name, Skip.TOO_LARGE, f"is {info.file_size:,} bytes, larger than "
                                         f"{_size(limits.max_file_bytes)}; left out")
        return
    parent = _mkdirs(dest, parts[:-1])
    target = None if parent is None else parent / parts[-1]
    if target is None or os.path.lexists(target):
        state.skip(name, Skip.CONFLICT, "clashes with another member of the same name (a file where a folder "
                                        "is, or a name given twice); left out")
        return
    try:
        with zf.open(info) as src:
            state.stream(src, target, name)
    except (zipfile.BadZipFile, NotImplementedError, EOFError, ValueError) as exc:
        target.unlink(missing_ok=True)  # a bad CRC is found at the end of the member
        state.skip(name, Skip.UNREADABLE, f"is corrupt or unsupported ({exc}); left out")
