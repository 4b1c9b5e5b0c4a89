"""Which submissions a batch grades: the new ones, and the stale ones among those already graded.

A grading is stale when what graded it is not what this batch would grade with:

- another rubric (the sha256 of the rubric file's bytes, ``rubric_sha256`` in grading.json);
- another grader (:func:`grader.code_version`, ``grader_version``);
- other parts (``--stages``; recorded by the batch in ``batch_status.json``);
- no GPU (``gpu_graded`` false) while this batch has one.

A grading stale only for its rubric, whose rubric change is score-only (thresholds, points, titles), is
re-scored in place from its measurements instead of re-graded (:func:`only_the_rubric_changed`,
grader/instructor/rescore.py: rescore_in_place); one whose change reaches what was measured is re-graded.

A batch without a GPU (``--no-gpu``, or none visible) keeps GPU gradings of the same rubric and
grader: their static items are the same checks it would run, and re-grading would only turn their
judged GPU items into "not evaluated" (``--force`` re-grades them anyway).

What graded a submission is read from its grading.json (the child's own record: a GPU batch whose
probe failed graded without a GPU) and, where a grading wrote none (a crash, a time-out), from the
``graded_by`` the batch wrote into ``batch_status.json``. A folder with neither record (an older
batch's) is re-graded. Failed gradings of the current rubric and grader are re-graded only with
``--retry-failed``.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from grader.files import read_json
from grader.outputs.grades_csv import FAILED_STATUSES, STATUS_FILE, read_json_object
from grader.untrusted.export import Submission


class Why(str, Enum):
    """Why a submission is graded by this batch (said per row and counted in the totals)."""

    NEW = "not graded yet"
    FORCED = "--force"
    RETRY = "failed before (--retry-failed)"
    RUBRIC = "rubric changed"
    GRADER = "grader changed"
    STAGES = "other stages"
    NO_GPU = "graded without a GPU"
    UNRECORDED = "no record of what graded it"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class GradedBy:
    """What graded a submission, or what this batch grades with."""

    rubric_sha256: str
    grader_version: str
    gpu: bool
    stages: tuple[str, ...] | None  # None: every part of the rubric

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "stages": list(self.stages) if self.stages is not None else None}


def stage_list(text: str | None) -> tuple[str, ...] | None:
    """``--stages`` as a comparable value: the sorted ids, None for all."""
    if not text:
        return None
    return tuple(sorted({s.strip() for s in text.split(",") if s.strip()})) or None


def _recorded(folder_dir: Path) -> GradedBy | None:
    """What graded the submission in ``folder_dir``; None when nothing says."""
    status = read_json(folder_dir / STATUS_FILE)
    by = status.get("graded_by") if isinstance(status, dict) else None
    by = by if isinstance(by, dict) else {}
    grading = read_json(folder_dir / "grading.json")
    if isinstance(grading, dict) and grading.get("rubric_sha256") and grading.get("grader_version"):
        source = {"rubric_sha256": grading["rubric_sha256"], "grader_version": grading["grader_version"],
                  "gpu": bool(grading.get("gpu_graded"))}
    elif by.get("rubric_sha256") and by.get("grader_version"):
        source = by
    else:
        return None
    stages = by.get("stages") if isinstance(by.get("stages"), list) else None
    return GradedBy(str(source["rubric_sha256"]), str(source["grader_version"]), bool(source.get("gpu")),
                    tuple(sorted(str(s) for s in stages)) if stages is not None else None)


def why_grade(folder_dir: Path, now: GradedBy, *, force: bool = False, retry_failed: bool = False) -> Why | None:
    """Why this batch grades the submission whose output folder is ``folder_dir``; None: it is kept."""
    if not (folder_dir / "results.json").is_file():
        return Why.NEW
    if force:
        return Why.FORCED
    before = _recorded(folder_dir)
    if before is None:
        return Why.UNRECORDED
    if before.rubric_sha256 != now.rubric_sha256:
        return Why.RUBRIC
    if before.grader_version != now.grader_version:
        return Why.GRADER
    if before.stages != now.stages:
        return Why.STAGES
    if now.gpu and not before.gpu:
        return Why.NO_GPU
    if retry_failed and read_json_object(folder_dir / STATUS_FILE).get("status") in FAILED_STATUSES:
        return Why.RETRY
    return None


def only_the_rubric_changed(folder_dir: Path, now: GradedBy) -> bool:
    """Whether the grading in ``folder_dir`` is stale for its rubric alone (same grader, stages and GPU use): then
    a score-only rubric change is re-scored from its measurements instead (grader/instructor/rescore.py)."""
    before = _recorded(folder_dir)
    return (before is not None and before.rubric_sha256 != now.rubric_sha256
            and before.grader_version == now.grader_version and before.stages == now.stages
            and not (now.gpu and not before.gpu))


def kept_gpu_gradings(folder_dirs: list[Path], now: GradedBy) -> int:
    """How many of these kept gradings were made with a GPU while this batch has none (said once)."""
    if now.gpu:
        return 0
    return sum(1 for d in folder_dirs if (b := _recorded(d)) is not None and b.gpu)


@dataclass
class Todo:
    """The batch's work: each submission to grade with its reason, and the ones kept."""

    grade: list[tuple[Submission, Why]]
    kept: list[Submission]

    def regraded(self) -> Counter[Why]:
        """Reasons of the submissions graded again (not the new ones)."""
        return Counter(why for _, why in self.grade if why is not Why.NEW)


def plan_todo(subs: list[Submission], subs_dir: Path, now: GradedBy, *, force: bool = False,
              retry_failed: bool = False) -> Todo:
    todo = Todo([], [])
    for sub in subs:
        if sub.path is None:
            continue
        why = why_grade(subs_dir / sub.folder, now, force=force, retry_failed=retry_failed)
        if why is None:
            todo.kept.append(sub)
        else:
            todo.grade.append((sub, why))
    return todo


def describe(counts: Counter[Why]) -> str:
    """'3 re-graded: 2 rubric changed, 1 graded without a GPU' ('' when none)."""
    if not counts:
        return ""
    n = sum(counts.values())
    if len(counts) == 1:
        return f"{n} re-graded: {next(iter(counts))}"
    return f"{n} re-graded: " + ", ".join(f"{k} {why}" for why, k in counts.most_common())
