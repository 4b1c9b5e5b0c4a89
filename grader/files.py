"""Replace a file whole: a reader sees the old file or the whole new one, never half of either."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
