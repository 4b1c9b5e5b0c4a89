"""Take a submission in: one fresh copy, no link followed, every size bounded.

A submission (a folder, or a zip of one) is hostile input. :func:`intake` copies it ONCE into a
fresh folder that the rest of the grading reads, so nothing later has to ask again:

- symbolic links are never followed, at any depth: ``os.lstat`` for folders, the Unix mode in a zip
  member's ``external_attr`` for zips. A link is left out of the copy with a note naming it (its
  stage then says its file is missing); a submission path that is itself a link is refused.
- devices, FIFOs and sockets are left out; files are opened with ``O_NOFOLLOW``, so a file swapped
  for a link between the listing and the copy is not followed either.
- the number of entries, the total size, one file's size and a zip member's compression ratio are
  capped (:class:`Limits`); zip members with an absolute path or ``..`` are refused.
- one wrapping folder (Gradescope's, or a zip's ``my-project/``) is stepped into ONCE, when the
  submission's own files (``markers``) are found only inside it.

A refused submission still yields a record (an empty copy and the refusal): the grading goes on
and every item says its file is missing, under the refusal's message.
"""
from __future__ import annotations

import json
import os
import stat
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from grader.compile.locate import submission_root
from grader.untrusted.quote import show_name
from grader.untrusted.safe_copy import (
    SUBMISSION_LIMITS,
    CopyState,
    Limits,
    Refused,
    Skip,
    Skipped,
    copy_dir,
    extract_zip,
    fresh_folder,
    member_parts,
)

# A zip holding one of these is a forged archive: the whole submission is refused.
REFUSING = frozenset({Skip.UNSAFE_NAME, Skip.ZIP_BOMB})
MAX_NOTES = 10  # skipped entries named in the feedback; intake.json lists every one
INTAKE_FILE = "intake.json"  # the record pipeline.grade() leaves next to results.json

__all__ = ["INTAKE_FILE", "Intake", "Limits", "SUBMISSION_LIMITS", "Skip", "Skipped", "intake"]


@dataclass
class Intake:
    """The fresh copy (``root``: where grading starts) and what happened on the way."""

    copy: Path  # the fresh folder everything was copied into
    root: Path  # the copy, or its one wrapping folder; an empty folder when refused
    refusal: str = ""  # why the submission was refused as a whole ('' when it was taken)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # for people: the refusal, skips, the wrapper
    entries: int = 0
    bytes: int = 0

    @property
    def refused(self) -> bool:
        return bool(self.refusal)

    def why_missing(self, rel: str) -> str:
        """Why ``rel`` (a path under ``root``) is not in the copy, when intake left it or a folder
        above it out ("gemm/naive.cu is a symbolic link ..."); '' otherwise."""
        prefix = self.root.relative_to(self.copy).parts
        wanted = PurePosixPath(rel).parts
        for s in self.skipped:
            parts = member_parts(s.path)
            if parts is None or parts[:len(prefix)] != prefix:
                continue
            parts = parts[len(prefix):]
            if parts and wanted[:len(parts)] == parts:
                return f"{show_name('/'.join(parts))} {s.detail}"
        return ""

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(copy=str(self.copy), root=str(self.root), refused=self.refused,
                 skipped=[{"path": s.path, "why": s.why.value, "detail": s.detail} for s in self.skipped])
        return d

    def write(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------
# intake()
# --------------------------------------------------------------------------------------------
def intake(path: Path, dest: Path, limits: Limits = SUBMISSION_LIMITS, markers: Sequence[str] = ()) -> Intake:
    """Copy the submission at ``path`` (a folder or a zip of one) into ``dest``, made fresh.

    ``markers``: paths a submission's root holds (the rubric's stage files), to recognise one
    wrapping folder. Never raises for the submission's content."""
    path, dest = Path(path), fresh_folder(Path(dest))
    state: CopyState | None = None
    refusal = ""
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            refusal = f"{path} is a symbolic link; links are not followed: give the folder itself"
        elif stat.S_ISDIR(st.st_mode):
            state = CopyState(limits)
            copy_dir(path, dest, state)
        elif stat.S_ISREG(st.st_mode) and zipfile.is_zipfile(path):
            state = extract_zip(path, dest, limits)
            forged = [s for s in state.skipped if s.why in REFUSING]
            if forged:
                refusal = f"zip member {forged[0].message()}"
        else:
            refusal = f"{path} is neither a folder nor a zip file"
    except FileNotFoundError:
        refusal = f"{path} does not exist"
    except Refused as exc:
        refusal = str(exc)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, NotImplementedError, ValueError) as exc:
        refusal = f"{path} could not be read as a zip ({exc})"
    skipped = [] if state is None else state.skipped
    if refusal:
        fresh_folder(dest)  # nothing of a refused submission is graded
        return Intake(dest, dest, refusal, skipped, [f"Submission refused: {refusal}."])
    root, note = submission_root(dest, markers)
    shown = [s for s in skipped if s.why is not Skip.OWN_OUTPUT]
    notes = [f"Left out of the grading: {s.message()}" for s in shown[:MAX_NOTES]]
    if len(shown) > MAX_NOTES:
        notes.append(f"... and {len(shown) - MAX_NOTES} more entries left out (intake.json lists them all)")
    notes += [note] if note else []
    assert state is not None
    return Intake(dest, root, "", skipped, notes, state.entries, state.bytes)
