"""A job's results folder as one .tar.gz blob (how it travels through the store), and back.

Only the folder's top-level files whose names are plain (no separators, a known suffix) are
packed: results.json, summary.md, grading.json, the plots and the profile pages. The blob is read
back one member at a time for ``GET /api/v1/jobs/{id}/files/{name}``, as :func:`public` makes it:
a grading names the server's absolute paths (its work folder under --data, which carries the job's
id; the toolchain's folders), and a job whose results were copied serves another job's files, so
every such path is cut to its last component. That is done when a file is served, not when it is
packed, so results stored before this rule are served the same way.
"""
from __future__ import annotations

import io
import json
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from grader.evidence.results import Results
from grader.grading import GradingFormatError, load_grading
from grader.records import to_jsonable
from grader.serve.child import ChildOutcome
from grader.serve.store import State

FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,120}\.(json|md|png|html|svg|csv|txt)$")
FIRST = ("results.json", "summary.md", "grading.json")
FILE_LIMIT = 32 * 1024 * 1024
# An absolute path of two components or more, not inside a word, a URL (``//host/...``), an HTML end
# tag (``</td>``) or base64 text (``...+/ab/cd``, ``base64,/9j/...``).
SERVER_PATH = re.compile(r"(?<![\w.~/<+=,:-])(?:/[\w.+@%-]+){2,}")
TEXT_SUFFIXES = (".json", ".md", ".html", ".txt", ".csv")
TOTAL_LIMIT = 96 * 1024 * 1024


@dataclass
class Packed:
    state: State
    blob: bytes | None
    error: str = ""
    score: float | None = None
    max_score: float | None = None
    files: list[str] = field(default_factory=list)
    leaderboard: list[dict] = field(default_factory=list)
    without_gpu: str = ""  # grading.json's reason when it was not graded on a GPU (store.Job.without_gpu)


def _names(out: Path) -> list[str]:
    if not out.is_dir():
        return []
    names = [p.name for p in out.iterdir()
             if FILE_NAME.match(p.name) and p.is_file() and not p.is_symlink() and p.stat().st_size <= FILE_LIMIT]
    return sorted(names, key=lambda n: (FIRST.index(n) if n in FIRST else len(FIRST), n))


def pack(out: Path, names: list[str]) -> tuple[bytes, list[str]]:
    buf, kept, total = io.BytesIO(), [], 0
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in names:
            size = (out / name).stat().st_size
            if total + size > TOTAL_LIMIT:
                continue
            tar.add(out / name, arcname=name, recursive=False)
            kept.append(name)
            total += size
    return buf.getvalue(), kept


def public(name: str, data: bytes) -> bytes:
    """``data`` of the results file ``name`` with every server path cut to its last component
    (``/srv/grader/work/host-gpu0/<job>-1/out/work/naive/build/naive.cubin`` → ``naive.cubin``)."""
    if not name.endswith(TEXT_SUFFIXES):
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    return SERVER_PATH.sub(lambda m: m.group(0).rsplit("/", 1)[1], text).encode("utf-8")


def member(blob: bytes, name: str) -> bytes | None:
    """The results file ``name`` of ``blob``, as it is served (:func:`public`)."""
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        try:
            info = tar.getmember(name)
        except KeyError:
            return None
        f = tar.extractfile(info) if info.isfile() else None
        return public(name, f.read()) if f is not None else None


def read_results(out: Path) -> Results | None:
    """The grading's results.json as its record (grader/outputs/results.py), or None when there is none or it
    is not that record."""
    try:
        return Results.from_json(json.loads((out / "results.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, RecursionError):  # RecordError is a ValueError
        return None


def without_gpu(out: Path) -> str:
    """Why the grading in ``out`` had no GPU, from its grading.json ("" when it had one or there is none)."""
    try:
        grading = load_grading(out / "grading.json")
    except GradingFormatError:
        return ""
    return "" if grading.gpu_graded else (grading.env.device_reason or "no CUDA device")[:300]


def collect(out: Path, outcome: ChildOutcome, timeout_s: float) -> Packed:
    """The job's outcome from the grading child's folder and exit."""
    names = _names(out)
    blob, names = pack(out, names) if names else (None, [])
    parsed = read_results(out)
    score = parsed.score if parsed is not None else None
    max_score = sum(t.max_score or 0.0 for t in parsed.tests) if parsed is not None else None
    packed = Packed(State.FAILED, blob, score=score, max_score=max_score, files=names, without_gpu=without_gpu(out))
    if outcome.timed_out:
        packed.error = f"the grading took longer than {timeout_s:g} s and was stopped"
    elif outcome.returncode == 0 and parsed is not None:
        packed.state, packed.leaderboard = State.DONE, [to_jsonable(e) for e in parsed.leaderboard or []]
    else:
        last = [line for line in outcome.log_tail.splitlines() if line.strip()][-1:] or ["(no output)"]
        why = f"exit code {outcome.returncode}" if outcome.returncode is not None else "it could not start"
        packed.error = f"the grader ended with {why}: {last[0][:300]}"
    return packed
