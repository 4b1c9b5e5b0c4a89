"""The class and the reference folders, as :class:`Entry` records.

The class is a Gradescope export (its zip or folder, names from submission_metadata.yml), a batch's
output folder (its batch.json names the export it graded) or a plain folder of submission folders.
A reference is one submission-shaped folder (``gemm/*.cu``: a clone of a public ladder, the course's
solutions) or a folder of them (last term's class).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from grader.compile.locate import submission_root
from grader.untrusted.export import METADATA_NAME, BatchError, load_export


@dataclass(frozen=True)
class Entry:
    name: str   # unique in its group: the export's folder name, or the folder's name
    label: str  # who: the submitters' names and ids from the export's metadata, else the name
    root: Path


def _rooted(name: str, label: str, path: Path, markers: list[str]) -> Entry:
    return Entry(name, label, submission_root(path, markers)[0])


def _holds_stage(path: Path, markers: list[str]) -> bool:
    return any((path / m).exists() for m in markers) or submission_root(path, markers)[0] != path


def load_class(source: Path, work: Path, markers: list[str]) -> tuple[list[Entry], list[str]]:
    """(the class's submissions, notes). Raises BatchError for a source that is none of the three."""
    source = Path(source)
    if source.is_dir() and (source / "batch.json").is_file():
        try:
            export = Path(json.loads((source / "batch.json").read_text(encoding="utf-8"))["export"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise BatchError(f"{source / 'batch.json'}: no export named in it ({exc})") from exc
        if not export.exists():
            raise BatchError(f"{source}: the export its batch graded ({export}) is no longer there")
        source = export
    if not source.exists():
        raise BatchError(f"{source} does not exist (expected a Gradescope export, a batch's output folder or "
                         "a folder of submission folders)")
    if source.is_file() or (source / METADATA_NAME).is_file() or any(
            d.name.startswith("submission_") for d in source.iterdir() if d.is_dir()):
        _root, subs, notes = load_export(source, work)
        entries = []
        for s in subs:
            if s.path is None:
                continue
            who = "; ".join(" ".join(x for x in (p["name"], f"({p['sid']})" if p["sid"] else "") if x)
                            for p in s.submitters())
            entries.append(_rooted(s.folder, who or s.folder, s.path, markers))
        return entries, notes
    entries = [_rooted(d.name, d.name, d, markers) for d in sorted(source.iterdir())
               if d.is_dir() and not d.name.startswith(".")]
    return entries, []


def load_references(folders: list[Path], markers: list[str]) -> list[Entry]:
    """Each ``--against`` folder: itself when it holds stage files, else each of its subfolders that does."""
    out: list[Entry] = []
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            raise BatchError(f"--against {folder}: not a folder")
        if _holds_stage(folder, markers):
            out.append(Entry(folder.name, str(folder), submission_root(folder, markers)[0]))
            continue
        subs = [d for d in sorted(folder.iterdir()) if d.is_dir() and _holds_stage(d, markers)]
        if not subs:
            raise BatchError(f"--against {folder}: holds none of the stage files ({', '.join(markers[:3])}, ...)")
        out += [Entry(f"{folder.name}/{d.name}", str(d), submission_root(d, markers)[0]) for d in subs]
    return out
