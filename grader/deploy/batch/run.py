"""One batch run: the export's submissions (export), the plan (plan), the children (pool), then
grades.csv and batch.json (table). Library entry point: :func:`grade_export`."""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.deploy.batch.export import load_export
from grader.deploy.batch.plan import plan_workers, select_shard, visible_gpus
from grader.deploy.batch.pool import ChildCommand, Options, child_command, is_done, run_pool
from grader.deploy.batch.table import RowStatus, csv_rows, write_csv


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


def _console(quiet: bool):
    from rich.console import Console

    console = Console(stderr=True, quiet=quiet)
    if not console.is_terminal:  # logs (Slurm, CI): no squeezing into 80 columns
        console = Console(stderr=True, quiet=quiet, width=150)
    return console


def grade_export(export: Path, out: Path, *, workers: int | None = None, force: bool = False,
                 retry_failed: bool = False, opts: Options | None = None,
                 shard: tuple[int, int] | None = None, quiet: bool = False,
                 make_cmd: ChildCommand = child_command, gpus: list[str] | None = None,
                 log: Callable[[str], None] | None = None, notes: list[str] | None = None) -> BatchSummary:
    """Grade every submission of ``export`` into ``out``; a submission's failure is its row's status.

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
    slots = plan_workers(gpus, workers)
    if gpus and len(slots) > len(gpus):
        notes.append(f"{len(slots)} workers share {len(gpus)} GPUs: their timings disturb each other")
    summary = BatchSummary(out=out, total=len(subs), workers=slots, notes=notes)
    todo = [s for s in subs if s.path is not None and (force or not is_done(s, subs_dir, retry_failed))]
    summary.missing = [s.folder for s in subs if s.path is None]
    summary.skipped = len([s for s in subs if s.path is not None]) - len(todo)

    console = _console(quiet)
    say = log or (lambda msg: console.print(msg, highlight=False))
    where = f"{len(gpus)} GPU(s) {', '.join(gpus)}" if gpus else "no GPU (static grading)"
    say(f"batch: {len(subs)} submissions in {root}" + (f" (shard {shard[0]}/{shard[1]})" if shard else "")
        + f"; {len(todo)} to grade, {summary.skipped} already graded; {len(slots)} worker(s), {where}")
    for note in notes:
        say(f"batch: note: {note}")

    t0 = time.monotonic()
    progress = Progress(TextColumn("[bold]grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("eta"), TimeRemainingColumn(), console=console, disable=quiet)
    with progress:
        bar = progress.add_task("grading", total=len(todo))

        def on_done(rec: dict) -> None:
            progress.advance(bar)
            gpu = f"GPU {rec.get('gpu')}" if rec.get("gpu") is not None else "CPU"
            score = rec.get("score")
            progress.console.print(f"  {rec['folder']}: {rec['status']}"
                                   + (f", {score:g} points" if isinstance(score, (int, float)) else "")
                                   + f" ({rec.get('wall_s', 0):.1f} s, {gpu})", highlight=False)

        records, interrupted = run_pool(todo, slots, subs_dir, opts, make_cmd, on_done)
    if interrupted:
        say("batch: interrupted; the running submissions finished (run again to resume)")

    summary.wall_s = time.monotonic() - t0
    summary.graded = sum(1 for r in records if r["status"] == RowStatus.GRADED)
    summary.failed = sorted(r["folder"] for r in records if r["status"] != RowStatus.GRADED)
    columns, rows = csv_rows(subs, subs_dir)
    summary.csv = out / "grades.csv"
    write_csv(summary.csv, columns, rows)
    (out / "batch.json").write_text(json.dumps({
        "export": str(root), "shard": list(shard) if shard else None, "submissions": len(subs),
        "graded_now": len(records), "skipped": summary.skipped, "failed": summary.failed,
        "missing_folders": summary.missing, "workers": len(slots), "gpus": gpus,
        "use_gpu": opts.use_gpu, "wall_s": round(summary.wall_s, 2),
        "interrupted": interrupted, "notes": notes, "records": sorted(records, key=lambda r: r["folder"]),
    }, indent=1, default=str) + "\n")
    say(f"batch: {len(records)} graded in {summary.wall_s:.1f} s ({summary.graded} ok, "
        f"{len(summary.failed)} failed: {', '.join(summary.failed) or 'none'}); {summary.skipped} skipped; "
        f"grades in {summary.csv}")
    if interrupted:
        raise KeyboardInterrupt
    return summary
