"""One batch run: the export's submissions (export), what to grade (stale) in which order on which
GPUs (plan), the children (pool), then grades.csv (table) and batch.json. Library entry point:
:func:`grade_export`.

Each GPU is probed once, before the first grading (pool.probe_gpus): its gradings read that
description instead of each starting a probe child.

batch.json reports each GPU's busy share over the run: the seconds its gradings held its lock (the
GPU steps: grading.json's ``gpu_held`` phases) over the batch's wall time; with two gradings per GPU, one
compiles while the other holds the GPU, so the share nears 1."""
from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.deploy.batch.plan import PER_GPU, known_times, longest_first, plan_workers, select_shard, visible_gpus
from grader.deploy.batch.pool import (
    ChildCommand,
    Options,
    child_command,
    probe_gpus,
    run_pool,
)
from grader.deploy.batch.stale import (
    GradedBy,
    Todo,
    Why,
    describe,
    kept_gpu_gradings,
    only_the_rubric_changed,
    plan_todo,
    stage_list,
)
from grader.outputs.class_summary import write_class_summary
from grader.outputs.grades_csv import RowStatus, automatic_points, csv_rows, write_csv
from grader.rubric.types import Rubric
from grader.untrusted.export import load_export


@dataclass
class BatchSummary:
    out: Path
    total: int = 0
    graded: int = 0
    skipped: int = 0
    failed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    workers: list[str | None] = field(default_factory=list)
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    csv: Path | None = None
    regraded: dict[str, int] = field(default_factory=dict)  # {why: how many} of the submissions graded again
    gpu_busy: dict[str, float] = field(default_factory=dict)  # {GPU: share of the wall time its lock was held}
    rescored: list[str] = field(default_factory=list)  # folders re-scored, not re-graded: a score-only rubric change


def _console(quiet: bool):
    from rich.console import Console

    console = Console(stderr=True, quiet=quiet)
    if not console.is_terminal:  # logs (Slurm, CI): no squeezing into 80 columns
        console = Console(stderr=True, quiet=quiet, width=150)
    return console


def busy_shares(records: list[dict], gpus: list[str], wall_s: float) -> dict[str, float]:
    """{GPU: seconds its gradings held its lock / the batch's wall time}."""
    held = {g: 0.0 for g in gpus}
    for r in records:
        if r.get("gpu") in held and isinstance(r.get("gpu_held_s"), (int, float)):
            held[r["gpu"]] += r["gpu_held_s"]
    return {g: round(h / wall_s, 3) if wall_s > 0 else 0.0 for g, h in held.items()}


def _busy_text(busy: dict[str, float]) -> str:
    return ", ".join(f"GPU {g} {100 * share:.0f}%" for g, share in busy.items())


def rescore_score_only(plan: Todo, subs_dir: Path, rubric: Rubric, now: GradedBy) -> list[str]:
    """Re-score, where they are, the gradings stale only for a score-only rubric change; they move from ``plan``'s
    gradings to its kept ones. Returns their folders."""
    from grader.instructor.rescore import rescore_in_place

    done = []
    for sub, why in list(plan.grade):
        folder = subs_dir / sub.folder
        if why is Why.RUBRIC and only_the_rubric_changed(folder, now) and rescore_in_place(folder, rubric) == []:
            plan.grade.remove((sub, why))
            plan.kept.append(sub)
            done.append(sub.folder)
    return done


def grade_export(export: Path, out: Path, *, workers: int | None = None, force: bool = False,
                 retry_failed: bool = False, opts: Options | None = None,
                 shard: tuple[int, int] | None = None, quiet: bool = False,
                 make_cmd: ChildCommand = child_command, gpus: list[str] | None = None,
                 log: Callable[[str], None] | None = None, notes: list[str] | None = None,
                 per_gpu: int = PER_GPU, times_from: list[Path] | None = None) -> BatchSummary:
    """Grade every submission of ``export`` into ``out``; a submission's failure is its row's status.
    ``times_from``: earlier batches' output folders whose times order this one (longest first).

    Raises BatchError for bad input of the whole batch (no export); KeyboardInterrupt after the
    running children finished and grades.csv was written."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from grader import code_version
    from grader.rubric.load import load_rubric

    opts = opts or Options()
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    subs_dir = out / "submissions"
    subs_dir.mkdir(exist_ok=True)
    root, subs, export_notes = load_export(Path(export), out)
    notes = list(notes or []) + export_notes
    subs = select_shard(subs, shard)
    if gpus is None:
        gpus = visible_gpus() if opts.use_gpu else []
    if opts.use_gpu and not gpus:
        notes.append("no GPU visible: static grading (GPU items 'not evaluated')")
        opts = dataclasses.replace(opts, use_gpu=False)
    slots = plan_workers(gpus, workers, per_gpu)
    rubric = load_rubric(opts.rubric)
    now = GradedBy(rubric.sha256, code_version(), opts.use_gpu, stage_list(opts.stages))
    opts = dataclasses.replace(opts, lock_dir=out / "locks" if gpus else None, graded_by=now)
    summary = BatchSummary(out=out, total=len(subs), workers=slots, notes=notes)
    plan = plan_todo(subs, subs_dir, now, force=force, retry_failed=retry_failed)
    summary.rescored = rescore_score_only(plan, subs_dir, rubric, now)
    why = {sub.folder: reason for sub, reason in plan.grade}
    kept_gpu = kept_gpu_gradings([subs_dir / s.folder for s in plan.kept], now)
    if kept_gpu:
        notes.append(f"{kept_gpu} GPU grading(s) kept: this batch has no GPU, and grading them again would only "
                     "turn their GPU items into 'not evaluated' (--force grades them again)")
    times = known_times([out] + list(times_from or []))
    todo = longest_first([sub for sub, _ in plan.grade], times)
    ordered = any(s.folder in times for s in todo) and len(todo) > 1
    summary.missing = [s.folder for s in subs if s.path is None]
    summary.skipped = len(plan.kept)

    console = _console(quiet)
    say = log or (lambda msg: console.print(msg, highlight=False))
    where = f"{len(gpus)} GPU(s) {', '.join(gpus)}" if gpus else "no GPU (static grading)"
    new = sum(1 for w in why.values() if w is Why.NEW)
    again = describe(plan.regraded())
    say(f"batch: {len(subs)} submissions in {root}" + (f" (shard {shard[0]}/{shard[1]})" if shard else "")
        + f"; {len(todo)} to grade ({new} new" + (f", {again}" if again else "") + f"), {summary.skipped} "
        f"already graded and current"
        + (f" ({len(summary.rescored)} re-scored without a GPU: the rubric change is score-only)"
           if summary.rescored else "") + f"; {len(slots)} worker(s), {where}"
        + (f", {len(slots) // len(gpus)} per GPU sharing its lock" if gpus and len(slots) > len(gpus) else ""))
    if ordered:
        say(f"batch: longest first, by {sum(1 for s in todo if s.folder in times)} earlier grading time(s)")
    for note in notes:
        say(f"batch: note: {note}")

    t0 = time.monotonic()
    probed: dict[str, str] = {}
    if opts.use_gpu and gpus and todo and opts.lock_dir is not None:
        probed = probe_gpus(gpus, opts.lock_dir, rubric.timeouts.probe_s)
        for gpu, problem in probed.items():
            if problem:
                notes.append(f"GPU {gpu}: the batch's probe failed ({problem}); its gradings probe it themselves")
                say(f"batch: note: {notes[-1]}")
    probe_s = time.monotonic() - t0
    progress = Progress(TextColumn("[bold]grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("eta"), TimeRemainingColumn(), console=console, disable=quiet)
    with progress:
        bar = progress.add_task("grading", total=len(todo))

        def on_done(rec: dict) -> None:
            progress.advance(bar)
            reason = why.get(rec["folder"], Why.NEW)
            rec["why"] = str(reason)
            gpu = f"GPU {rec.get('gpu')} held {rec.get('gpu_held_s', 0):.1f} s" if rec.get("gpu") is not None else "CPU"
            score = rec.get("score")
            progress.console.print(f"  {rec['folder']}: {rec['status']}"
                                   + (f", {score:g} points" if isinstance(score, (int, float)) else "")
                                   + f" ({rec.get('wall_s', 0):.1f} s, {gpu})"
                                   + (f"; re-graded: {reason}" if reason is not Why.NEW else ""), highlight=False)

        records, interrupted = run_pool(todo, slots, subs_dir, opts, make_cmd, on_done)
    if isinstance(interrupted, KeyboardInterrupt):
        say("batch: interrupted; the running submissions finished (run again to resume)")
    elif interrupted is not None:
        say(f"batch: stopped by {interrupted.name}; the running submissions were stopped and left no row "
            "(run again to resume)")

    summary.wall_s = time.monotonic() - t0
    summary.graded = sum(1 for r in records if r["status"] == RowStatus.GRADED)
    summary.failed = sorted(r["folder"] for r in records if r["status"] != RowStatus.GRADED)
    summary.gpu_busy = busy_shares(records, gpus, summary.wall_s) if records else {}
    regraded = Counter(why[r["folder"]] for r in records if why.get(r["folder"], Why.NEW) is not Why.NEW)
    summary.regraded = {str(k): n for k, n in regraded.items()}
    max_total = automatic_points(rubric, now.stages)
    columns, rows = csv_rows(subs, subs_dir, max_total)
    summary.csv = out / "grades.csv"
    write_csv(summary.csv, columns, rows)
    write_class_summary(out, columns, rows, max_total)
    (out / "batch.json").write_text(json.dumps({
        "export": str(root), "shard": list(shard) if shard else None, "submissions": len(subs),
        "graded_now": len(records), "skipped": summary.skipped, "failed": summary.failed,
        "missing_folders": summary.missing, "workers": len(slots), "gpus": gpus,
        "use_gpu": opts.use_gpu, "wall_s": round(summary.wall_s, 2), "per_gpu": per_gpu,
        "device_probe_s": round(probe_s, 2),
        "devices_probed": sorted(g for g, problem in probed.items() if not problem),
        "gpu_busy": summary.gpu_busy, "graded_by": now.to_json(), "regraded": summary.regraded,
        "kept_gpu_gradings": kept_gpu, "longest_first": ordered, "rescored": summary.rescored,
        "interrupted": interrupted is not None, "notes": notes, "records": sorted(records, key=lambda r: r["folder"]),
    }, indent=1, default=str) + "\n")
    say(f"batch: {len(records)} graded in {summary.wall_s:.1f} s ({summary.graded} ok, "
        f"{len(summary.failed)} failed: {', '.join(summary.failed) or 'none'})"
        + (f"; {describe(regraded)}" if regraded else "") + f"; {summary.skipped} skipped"
        + (f"; busy: {_busy_text(summary.gpu_busy)}" if summary.gpu_busy else "") + f"; grades in {summary.csv}, "
        f"the class in {out / 'class-summary.md'}")
    if interrupted is not None:
        raise interrupted
    return summary
