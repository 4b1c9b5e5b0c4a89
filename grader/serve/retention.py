"""Retention: what a service running for months deletes, and what it keeps.

A finished (done or failed) job older than the cut-off loses its archive (the student's upload) and
any work folder a killed worker left under ``<data>/work/``; its results (results.json, summary.md,
grading.json, the plots) stay, so job pages, the leaderboard and a Gradescope Regrade still find
them. ``results_too`` forgets such a job whole: its results and its record go too, and the same
archive posted again is graded again. A queued or running job is never touched: only finished jobs
are listed, and the store deletes only while the job is still finished (:meth:`JobStore.forget`).

A work folder that cannot be removed costs only its own job: the failure is logged and said in the
job's line of the report, the other jobs are pruned, and the next prune tries it again.

``python -m grader serve prune`` runs it once; ``retention_days`` in serve.yaml has the running
service run it every hour (:data:`INTERVAL_S`).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from grader.serve.store import JobStore, State
from grader.untrusted.safe_copy import remove_tree, tree_size

log = logging.getLogger("grader.serve")

INTERVAL_S = 3600.0
DAY_S = 86400.0


@dataclass
class Pruned:
    """One job's share of a prune (bytes deleted, or that would be with ``dry_run``)."""

    job: str
    state: State
    finished: float
    archive_bytes: int
    results_bytes: int
    work_bytes: int
    problem: str = ""  # why a work folder of the job is still there ('' when all went)

    @property
    def total(self) -> int:
        return self.archive_bytes + self.results_bytes + self.work_bytes


def work_folders(data: Path, job_id: str) -> list[Path]:
    """``<data>/work/<worker>/<job id>-<attempt>``: what a worker killed mid-grading leaves."""
    work = Path(data) / "work"
    if not work.is_dir():
        return []
    return [p for w in work.iterdir() if w.is_dir() and not w.is_symlink()
            for p in w.iterdir() if p.name.rpartition("-")[0] == job_id]


def prune(store: JobStore, data: Path, older_than_days: float, *, results_too: bool = False,
          dry_run: bool = False, now: float | None = None) -> list[Pruned]:
    """Delete what retention deletes of the jobs finished more than ``older_than_days`` ago (see the
    module docstring); the jobs that had something to delete, oldest first."""
    cut = (time.time() if now is None else now) - older_than_days * DAY_S
    out = []
    for job in store.finished_before(cut):
        archive, results = store.blob_sizes(job.id)
        folders = work_folders(data, job.id)
        item = Pruned(job.id, job.state, job.finished or 0.0, archive, results if results_too else 0,
                      sum(tree_size(f) for f in folders))
        if item.total == 0 and not results_too:
            continue  # pruned before: only its results are left, and they stay
        if not dry_run:
            if not store.forget(job.id, whole=results_too):
                continue
            item.problem = "; ".join(filter(None, (_remove(job.id, folder) for folder in folders)))
        out.append(item)
    return out


def _remove(job_id: str, folder: Path) -> str:
    """Remove one work folder of ``job_id``: '' when it went, or why not (logged)."""
    try:
        if folder.is_symlink() or not folder.is_dir():
            folder.unlink()  # never followed
        else:
            remove_tree(folder)
    except OSError as exc:
        log.warning("retention: job %s: its work folder %s could not be removed (%s); the other jobs are pruned "
                    "and the next prune tries it again", job_id, folder, exc)
        return f"work folder {folder.name} not removed ({exc.strerror or exc})"
    return ""


def human(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


def report(pruned: list[Pruned], dry_run: bool) -> list[str]:
    """The lines ``serve prune`` prints: one per job, then the total."""
    from grader.serve.views import iso

    verb = "would delete" if dry_run else "deleted"
    lines = []
    for p in pruned:
        parts = [f"archive {human(p.archive_bytes)}"]
        if p.results_bytes:
            parts.append(f"results {human(p.results_bytes)}")
        if p.work_bytes:
            parts.append(f"work folder {human(p.work_bytes)}")
        if p.problem:
            parts.append(p.problem)
        lines.append(f"{verb} job {p.job} ({p.state.value} {iso(p.finished)}): {', '.join(parts)}")
    total = sum(p.total for p in pruned)
    lines.append(f"{len(pruned)} job(s); {human(total)} {'would be freed' if dry_run else 'freed'}")
    return lines
