"""The one protocol of the grader's child processes (this file runs inside them: stdlib only).

Every child is started as ``python -m grader.children MODE SPEC.json RESULT.json``: it reads
its task from SPEC.json and writes what it found to RESULT.json, replacing the file whole
(write, then rename) each time it has something to keep, so a crash or a time-out still leaves
the last complete result. stdout and stderr are for people only; nothing parses them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# Mode -> the module (grader.children.<mode>) whose ``run(spec, result_path) -> int`` does it.
MODES = ("probe", "stage", "check", "profile", "occupancy", "warm")
USAGE = "usage: python -m grader.children {" + ",".join(MODES) + "} SPEC.json RESULT.json"


def read_spec(path: str | os.PathLike[str]) -> dict[str, Any]:
    spec = json.loads(Path(path).read_text())
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: the spec is a JSON {type(spec).__name__}, not an object")
    return spec


def write_result(path: str | os.PathLike[str], data: Any) -> None:
    """Replace RESULT.json whole: a reader never sees half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, default=float))
    os.replace(tmp, path)
