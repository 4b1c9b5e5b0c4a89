"""The JSON the API answers with: a job, the queue, the leaderboard, and the wait estimates.

An estimate is the mean of recent grading times (``settings.estimate_default_s`` before any) over
the live workers: a queued job at position p waits for what the running jobs have left plus the
p - 1 jobs ahead of it, shared among the workers, and then its own grading. It is computed here only
(:meth:`Snapshot.estimate`) and said one way only (:func:`about`; static/common.js ``duration`` is the
same rule): the job page, the queue page, ``submit``'s progress line and a refusal's "try again in"
all give the same number for the same job.
"""
from __future__ import annotations

import datetime as dt
import math
import time
from dataclasses import dataclass

from markdown_it import MarkdownIt

from grader.serve.settings import Settings
from grader.serve.store import Job, JobStore, State, WorkerInfo

RECENT = 20  # finished jobs the mean grading time is taken over
SUMMARY_CHARS = 512 * 1024  # of summary.md rendered (a whole grading's is some 20 KB)
# summary.md as HTML, on the server (markdown-it-py: CommonMark in linear time, already the report's parser).
# No raw HTML passes (html False: it is escaped as text), no image is fetched, and links keep markdown-it's
# own check (no javascript: or data: URL), so a student's text quoted in the summary cannot become markup.
_SUMMARY_MD = MarkdownIt("commonmark", {"html": False}).enable("table").disable("image")


def summary_html(markdown: str) -> str:
    """summary.md rendered for the job page (see _SUMMARY_MD); a huge one is cut, and says so."""
    cut = len(markdown) > SUMMARY_CHARS
    html = _SUMMARY_MD.render(markdown[:SUMMARY_CHARS])
    return html + ("<p><em>(the summary is cut here: summary.md has it whole)</em></p>\n" if cut else "")


def about(seconds: float) -> str:
    """An estimate as people read it: "~12 s" under 90 s, else "~2 min" (static/common.js: duration)."""
    return f"~{max(seconds, 0.0):.0f} s" if seconds < 90 else f"~{seconds / 60:.0f} min"


def iso(t: float | None) -> str | None:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if t else None


@dataclass
class Snapshot:
    """The queue as one estimate sees it (read once per request)."""
    queued: list[Job]
    running: list[Job]
    workers: list[WorkerInfo]
    mean_s: float
    now: float

    @property
    def live_workers(self) -> int:
        return len(self.workers)

    def position(self, job: Job) -> int | None:
        for i, j in enumerate(self.queued):
            if j.id == job.id:
                return i + 1
        return None

    def remaining(self, job: Job) -> float:
        return max(self.mean_s - (self.now - (job.started or self.now)), 0.0)

    def estimate(self, job: Job) -> float | None:
        if job.state is State.RUNNING:
            return round(self.remaining(job), 1)
        pos = self.position(job)
        if pos is None:
            return None
        slots = max(self.live_workers, 1)
        ahead = sum(self.remaining(j) for j in self.running) + (pos - 1) * self.mean_s
        return round(ahead / slots + self.mean_s, 1)

    def first_done(self, jobs: list[Job]) -> float:
        """Seconds until the first of ``jobs`` still queued or running is done (each one's estimate)."""
        waits = [w for j in jobs if j.state in (State.QUEUED, State.RUNNING) and (w := self.estimate(j)) is not None]
        return min(waits) if waits else self.mean_s


def snapshot(store: JobStore, settings: Settings, now: float | None = None) -> Snapshot:
    t = time.time() if now is None else now
    recent = [j.grade_s for j in store.finished_since(0.0, limit=RECENT * 3)
              if j.state is State.DONE and j.gradings and j.grade_s]
    mean = sum(recent[:RECENT]) / len(recent[:RECENT]) if recent else settings.estimate_default_s
    live = [w for w in store.workers() if t - w.last_seen <= settings.lease_s]
    return Snapshot(store.jobs_in(State.QUEUED), store.jobs_in(State.RUNNING), live, round(mean, 1), t)


def job_view(job: Job, snap: Snapshot) -> dict:
    view = {"id": job.id, "state": job.state.value, "kind": job.kind.value, "estimate_s": snap.estimate(job),
            "created": iso(job.created), "started": iso(job.started), "finished": iso(job.finished),
            "score": job.score, "max_score": job.max_score, "files": list(job.files)}
    if job.state is State.QUEUED:
        view["position"] = snap.position(job)
    if job.state is State.FAILED:
        view["error"] = job.error
    if job.superseded_by:  # failed only because the same student's newer submission replaced it
        view["superseded_by"] = job.superseded_by
    if job.without_gpu:  # a grading without a GPU: its GPU items were not evaluated (the bridge keeps them pending)
        view["without_gpu"] = job.without_gpu
    return view


def queue_view(snap: Snapshot, store: JobStore) -> dict:
    done = [j for j in store.finished_since(snap.now - 3600) if j.state is State.DONE]
    return {
        "workers": [{"name": w.name, "gpu": w.gpu, "state": w.state, "job_started": iso(w.job_started)}
                    for w in snap.workers],
        "queued": [{"position": i + 1, "kind": j.kind.value, "created": iso(j.created), "estimate_s": snap.estimate(j)}
                   for i, j in enumerate(snap.queued)],
        "running": len(snap.running),
        "done_last_hour": len(done),
        "mean_grade_s": snap.mean_s,
    }


def _stages(entries: list[dict]) -> dict[str, dict]:
    """``{"<stage title>": {"tflops": x, "pct_of_baseline": y}}`` from results.json leaderboard entries."""
    out: dict[str, dict] = {}
    for e in entries:
        name, value = e.get("name"), e.get("value")
        if not isinstance(name, str) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        for suffix, field in ((": TFLOP/s", "tflops"), (": % of cuBLAS", "pct_of_baseline")):
            if name.endswith(suffix):
                out.setdefault(name[: -len(suffix)], {})[field] = value
    return out


def leaderboard_view(store: JobStore) -> dict:
    """The best graded self-check per token: most stages on the board, then the highest mean % of cuBLAS."""
    best: dict[str, tuple[tuple, str, dict]] = {}
    order: list[str] = []
    for job in store.leaderboard_jobs():
        stages = _stages(job.leaderboard)
        if not stages:
            continue
        for s in stages:
            if s not in order:
                order.append(s)
        pcts = [v.get("pct_of_baseline", 0.0) for v in stages.values()]
        rank = (len(stages), sum(pcts) / len(pcts))
        if job.owner not in best or rank > best[job.owner][0]:
            best[job.owner] = (rank, job.label, stages)
    rows = [{"name": label, **stages} for _, label, stages in sorted(best.values(), key=lambda b: b[0], reverse=True)]
    return {"stages": order, "rows": rows}
