"""A Gradescope "Download Submissions" export: its metadata, its folders, and a safe unzip.

The export (the zip or its unpacked folder) has ``submission_metadata.yml`` at its root
(``submission_<id>: {':submitters': [{':name', ':sid', ':email'}], ':created_at', ...}``) and one
folder ``submission_<id>/`` per submission. A zipped export is extracted once into the output
folder with :func:`grader.untrusted.safe_copy.extract_zip`: no link, no ``..``, no zip bomb; an entry
that is left out is charged to the submission folder it belongs to (its row says so), never to
the whole batch.
"""
from __future__ import annotations

import datetime as dt
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.untrusted.safe_copy import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_RATIO,
    Limits,
    Refused,
    Skip,
    Skipped,
    extract_zip,
    fresh_folder,
    member_parts,
)

METADATA_NAME = "submission_metadata.yml"
# A class is a few hundred submissions of a few files each. The export's caps bound what a forged
# export can write (each member is also capped in size and in compression ratio).
# Its folders are a submission's two below the submission's own: a wrapping folder and submission_<id>/.
EXPORT_LIMITS = Limits(max_entries=400_000, max_total_bytes=32 * 1024**3, max_file_bytes=MAX_FILE_BYTES,
                       max_ratio=MAX_RATIO, max_depth=MAX_DEPTH + 2)
_MARKER = ".extracted.json"  # written when an extraction finished: a resumed batch reuses it
_IGNORED = (".", "__MACOSX")


class BatchError(Exception):
    """Bad input for the whole batch (no export, bad --shard, an unsandboxed machine): exit code 2."""


@dataclass
class Submission:
    folder: str                   # submission_<id>: the export's folder name, unique
    path: Path | None             # None when the export has no folder for it
    meta: dict[str, Any] | None   # its metadata entry; None when the metadata does not list it
    problems: list[str] = field(default_factory=list)  # export entries of it that were left out

    @property
    def submission_id(self) -> str:
        return self.folder[len("submission_"):] if self.folder.startswith("submission_") else self.folder

    def submitters(self) -> list[dict[str, str]]:
        out = []
        for s in (self.meta or {}).get(":submitters") or (self.meta or {}).get("submitters") or []:
            if isinstance(s, dict):
                out.append({k: "" if _pick(s, k) is None else str(_pick(s, k)) for k in ("name", "sid", "email")})
        return out

    def created_at(self) -> str:
        value = _pick(self.meta or {}, "created_at")
        if isinstance(value, (dt.datetime, dt.date)):
            return value.isoformat()
        return "" if value is None else str(value)


def _pick(d: dict, key: str) -> Any:
    """Gradescope writes Ruby-symbol keys (':name'); accept plain ones too."""
    return d.get(f":{key}", d.get(key))


def _yaml_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that reads unknown tags (e.g. Ruby's !ruby/object:BigDecimal) as plain data."""

    def unknown(loader, suffix, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("!", unknown)
    Loader.add_multi_constructor("tag:", unknown)
    return Loader


def read_metadata(path: Path) -> dict[str, dict]:
    import yaml

    data = yaml.load(path.read_text(encoding="utf-8", errors="replace"), Loader=_yaml_loader())
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BatchError(f"{path}: expected a mapping of submission folders to their metadata")
    return {str(k): (v if isinstance(v, dict) else {}) for k, v in data.items()}


# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------
def extract_export(zip_path: Path, dest: Path) -> list[Skipped]:
    """Extract the export once into ``dest``; the members left out (also on a resumed run)."""
    marker = dest / _MARKER
    if marker.is_file():
        try:
            done = json.loads(marker.read_text(encoding="utf-8"))
            if done.get("zip") == str(zip_path):
                return [Skipped(s["path"], Skip(s["why"]), s["detail"]) for s in done["skipped"]]
        except (ValueError, KeyError, TypeError):
            pass  # an older or damaged marker: extract again
    fresh_folder(dest)
    try:
        state = extract_zip(zip_path, dest, EXPORT_LIMITS)
    except Refused as exc:
        raise BatchError(f"export {zip_path} refused: {exc}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise BatchError(f"export {zip_path} could not be read as a zip ({exc})") from None
    skipped = [{"path": s.path, "why": s.why.value, "detail": s.detail} for s in state.skipped]
    marker.write_text(json.dumps({"zip": str(zip_path), "skipped": skipped}, indent=1) + "\n", encoding="utf-8")
    return state.skipped


def _charge(skipped: list[Skipped], extracted: Path, root: Path) -> tuple[dict[str, list[str]], list[str]]:
    """({submission folder: its entries left out}, notes about entries outside any folder)."""
    try:
        prefix = root.relative_to(extracted).parts
    except ValueError:
        prefix = ()
    per: dict[str, list[str]] = {}
    general = []
    for s in skipped:
        parts = member_parts(s.path)
        if parts is not None and len(parts) > len(prefix) + 1 and parts[:len(prefix)] == prefix:
            inside = "/".join(parts[len(prefix) + 1:])
            per.setdefault(parts[len(prefix)], []).append(f"export entry {inside}: {s.detail}")
        else:
            general.append(f"export entry {s.path!r} left out: {s.detail}")
    return per, general


# --------------------------------------------------------------------------------------------
# The export's submissions
# --------------------------------------------------------------------------------------------
def find_export_root(path: Path) -> Path:
    """The folder holding submission_metadata.yml: ``path`` itself or one folder down."""
    if (path / METADATA_NAME).is_file():
        return path
    subdirs = [d for d in path.iterdir() if d.is_dir() and not d.name.startswith(_IGNORED)]
    with_meta = [d for d in subdirs if (d / METADATA_NAME).is_file()]
    if len(with_meta) == 1:
        return with_meta[0]
    if len(subdirs) == 1 and any(c.is_dir() and c.name.startswith("submission_") for c in subdirs[0].iterdir()):
        return subdirs[0]
    return path


def _metadata(root: Path, notes: list[str]) -> dict[str, dict]:
    meta_path = root / METADATA_NAME
    if not meta_path.is_file():
        notes.append(f"no {METADATA_NAME} in {root}: graded without names")
        return {}
    try:
        return read_metadata(meta_path)
    except BatchError:
        raise
    except Exception as exc:  # a YAML error: grade the folders, without names
        notes.append(f"{METADATA_NAME} could not be read ({type(exc).__name__}: {exc}); graded without names")
        return {}


def load_export(export: Path, work: Path | None = None) -> tuple[Path, list[Submission], list[str]]:
    """(export root, submissions sorted by folder, notes). A zip is extracted into ``work/export``."""
    export = Path(export)
    notes: list[str] = []
    skipped: list[Skipped] = []
    extracted = export
    if export.is_file() and zipfile.is_zipfile(export):
        if work is None:
            raise BatchError("a zipped export needs an output folder to extract into")
        extracted = Path(work) / "export"
        skipped = extract_export(export.resolve(), extracted)
    if not extracted.is_dir():
        raise BatchError(f"export {export} does not exist (expected Gradescope's 'Download Submissions' "
                         "folder or zip)")
    root = find_export_root(extracted)
    charged, general = _charge(skipped, extracted, root)
    notes += general
    metadata = _metadata(root, notes)
    entries = [d for d in root.iterdir() if not d.name.startswith(_IGNORED) and d.name != METADATA_NAME]
    dirs = {d.name: d for d in entries if d.is_dir()}
    named = {n: d for n, d in dirs.items() if n.startswith("submission_")}
    folders = named if named else dirs
    for d in entries:  # a file where a submission's folder should be: that row says so
        if not d.is_dir() and (d.name.startswith("submission_") or d.name in metadata):
            charged.setdefault(d.name, []).append(f"export entry {d.name} is a file, not a submission folder")
    for name in [n for n in charged if n not in folders and n not in metadata and not n.startswith("submission_")]:
        notes += [f"{name}: {p}" for p in charged.pop(name)]  # not a submission: nobody's row
    subs = []
    for name in sorted(set(folders) | set(metadata) | set(charged)):
        path, meta = folders.get(name), metadata.get(name)
        subs.append(Submission(name, path, meta, charged.get(name, [])))
        if path is None and charged.get(name):
            notes.append(f"{name}: not graded (bad_entry): {'; '.join(charged[name])}")
        elif path is None:
            notes.append(f"{name}: in {METADATA_NAME} but the export has no folder for it: not graded "
                         "(missing_folder)")
        elif meta is None and metadata:
            notes.append(f"{name}: not in {METADATA_NAME}: graded, with no names, emails or SIDs in its row")
    return root, subs, notes
