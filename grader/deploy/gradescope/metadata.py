"""Gradescope's ``submission_metadata.json`` in the autograder folder: the one reader of it.

Gradescope writes it for every submission; the grader reads who submitted (the occupancy variants are
drawn for them; the service hashes their ids) and the submission's id (the service records it). The
file is Gradescope's, not the student's, but nothing here trusts its shape: a missing or unreadable
file, or one that is not an object, reads as empty, and each reader checks the types of what it takes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

METADATA_FILE = "submission_metadata.json"


@dataclass(frozen=True)
class SubmissionMetadata:
    """What the grader reads of the file, its values as the file has them (checked by the readers)."""

    id: object = None  # Gradescope's id of the submission
    users: tuple[dict[str, object], ...] = ()  # the submitters' entries (name, sid, email, id), objects only

    @classmethod
    def read(cls, autograder_dir: Path) -> SubmissionMetadata:
        """The file in ``autograder_dir``; empty when it is missing, unreadable or not a JSON object."""
        try:
            data = json.loads((Path(autograder_dir) / METADATA_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls()
        if not isinstance(data, dict):
            return cls()
        users = data.get("users")
        return cls(data.get("id"), tuple(u for u in (users if isinstance(users, list) else []) if isinstance(u, dict)))
