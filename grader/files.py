"""Replace a file whole: a reader sees the old file or the whole new one, never half of either; read a JSON record
the grader wrote, never more than a bound."""
from __future__ import annotations

import json
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

# The JSON records the grader writes and reads back (a grading.json is 100-300 KB, a results.json or a batch's
# status less): a file past this is not one of them, and is not read into memory.
MAX_JSON_BYTES = 64 * 1024 * 1024


def replace_whole(path: str | os.PathLike[str], text: str, *, mode: int = 0o600, durable: bool = False) -> None:
    """Write ``text`` to ``path`` through a temporary file of its own beside it (two writers at once each
    rename a whole file), then rename it over ``path``, whose folder must exist. ``mode``: the file's
    permissions. ``durable``: fsync the file and its folder, so the rename survives a crash."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if mode != 0o600:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        _sync_folder(target.parent)


def _sync_folder(folder: Path) -> None:
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


@dataclass(frozen=True)
class JsonRead:
    """What :func:`read_json_file` found: the data, or None with the problem that kept it from being read."""

    data: object
    problem: str = ""  # "" when read; else "is missing", "is not a regular file", "is over N bytes", "is not JSON"
    too_big: bool = False


def read_json_file(path: str | os.PathLike[str], limit: int = MAX_JSON_BYTES) -> JsonRead:
    """The JSON in ``path``, read only when it is a regular file of at most ``limit`` bytes (a file that grows
    past ``limit`` while it is read is refused too)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return JsonRead(None, "is not a regular file")
        if st.st_size > limit:
            return JsonRead(None, f"is over {limit} bytes ({st.st_size})", too_big=True)
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except FileNotFoundError:
        return JsonRead(None, "is missing")
    except OSError as exc:
        return JsonRead(None, f"cannot be read ({exc.strerror or exc})")
    if len(raw) > limit:
        return JsonRead(None, f"is over {limit} bytes", too_big=True)
    try:
        return JsonRead(json.loads(raw.decode("utf-8")))
    except ValueError:  # not UTF-8 (UnicodeDecodeError) or not JSON
        return JsonRead(None, "is not JSON")


def read_json(path: str | os.PathLike[str], limit: int = MAX_JSON_BYTES) -> object:
    """The JSON in ``path``; None when it is missing, not a regular file, over ``limit`` bytes or not JSON."""
    return read_json_file(path, limit).data
