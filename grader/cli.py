"""Command line for TAs and students: ``python grader/run_local.py SUBMISSION``.

Exit codes:
  0  graded (whatever the score); results.json written
  2  bad usage or an invalid rubric; results.json written with the message
  3  the grader itself failed; results.json written with an "autograder error" item
"""
from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

from grader import REPO_ROOT
from grader.errors import ConfigError
from grader.outputs.results import error_results, write_results

EXIT_OK, EXIT_USAGE, EXIT_INTERNAL = 0, 2, 3
DEFAULT_RUBRIC = REPO_ROOT / "rubric.yaml"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="run_local.py", description="Grade a GEMM-ladder submission.")
    p.add_argument("submission", nargs="?", help="folder holding gemm/*.cu (e.g. solutions/ or starter/)")
    p.add_argument("--out", default="grading-out", help="output folder for results.json (default: %(default)s)")
    p.add_argument("--rubric", default=str(DEFAULT_RUBRIC), help="rubric file (default: the repo's rubric.yaml)")
    p.add_argument("--stages", help="comma-separated stage ids to grade (default: all)")
    p.add_argument("--no-gpu", action="store_true", help="grade statically even if a GPU is present")
    p.add_argument("--keep-outputs", action="store_true", help="keep the kernels' output matrices (.npy)")
    p.add_argument("--check-rubric", action="store_true", help="only validate the rubric and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    p.add_argument("--batch", action="store_true",
                   help="SUBMISSION is a Gradescope 'Download Submissions' export: grade every submission "
                        "in it (grader/deploy/batch.py; also --workers N, --force, --timeout S, --shard I/N)")
    p.add_argument("--calibrate", nargs="?", const=3, type=int, metavar="REPEATS",
                   help="instructors, on a GPU machine: grade the solutions (default: the repo's solutions/) "
                        "and the one-stage-shifted submission REPEATS times (default 3) and write "
                        "calibration.md / calibration.json into --out")
    return p.parse_args(argv)


def _fail(out: Path, message: str, code: int, started: float, stderr) -> int:
    print(f"error: {message}", file=stderr)
    try:
        write_results(out / "results.json", error_results(message, time.monotonic() - started))
    except OSError as exc:
        print(f"error: could not write {out / 'results.json'}: {exc}", file=stderr)
    return code


def _calibrate(args, rubric, out: Path, console, started: float) -> int:
    """--calibrate [REPEATS]: thresholds against the reference and its predecessors (grader/instructor/calibrate.py)."""
    if args.calibrate < 1:
        return _fail(out, f"--calibrate: REPEATS is {args.calibrate}; it must be at least 1", EXIT_USAGE,
                     started, sys.stderr)
    sub = Path(args.submission) if args.submission else DEFAULT_RUBRIC.parent / "solutions"
    if not sub.is_dir():
        return _fail(out, f"solutions folder {sub} does not exist", EXIT_USAGE, started, sys.stderr)
    try:
        from grader.instructor.calibrate import run_calibration

        rows = run_calibration(rubric, sub, out, args.calibrate, progress=lambda msg: console.print(msg))
    except Exception:  # the grader's own bug
        print(traceback.format_exc(), file=sys.stderr)
        return EXIT_INTERNAL
    bad = [f"{r.number}.{r.item}: {r.verdict} {r.why}".strip() for r in rows if r.verdict != "OK"]
    console.print(f"calibration: {len(rows) - len(bad)} of {len(rows)} threshold items OK; "
                  f"report in {out / 'calibration.md'}", highlight=False)
    for line in bad:
        console.print(f"  {line}", highlight=False)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else list(argv)
    if "--batch" in raw:  # a whole Gradescope export: grader/deploy/batch.py grades each submission in a child
        from grader.deploy.batch import main as batch_main

        return batch_main(["grade"] + [a for a in raw if a != "--batch"])
    started = time.monotonic()
    args = parse_args(argv)
    out = Path(args.out).resolve()
    from rich.console import Console

    console = Console(stderr=True, quiet=args.quiet)
    if not console.is_terminal:  # logs and CI: do not squeeze the table into 80 columns
        console = Console(stderr=True, quiet=args.quiet, width=150)
    try:
        from grader.spec.rubric import load_rubric

        rubric = load_rubric(args.rubric)
        if args.check_rubric:
            console.print(f"{args.rubric}: valid; {len(rubric.stages)} stages, {rubric.max_points:g} points")
            return EXIT_OK
        if args.calibrate is not None:
            return _calibrate(args, rubric, out, console, started)
        if not args.submission:
            return _fail(out, "no submission folder given (usage: run_local.py SUBMISSION)", EXIT_USAGE,
                         started, sys.stderr)
        sub = Path(args.submission)
        if not sub.is_dir():
            return _fail(out, f"submission folder {sub} does not exist", EXIT_USAGE, started, sys.stderr)
        stages = None
        if args.stages:
            stages = [s.strip() for s in args.stages.split(",") if s.strip()]
            known = [st.id for st in rubric.stages] + [k for k in ("occupancy", "report") if k in rubric.extra]
            unknown = [s for s in stages if s not in known]
            if unknown:
                return _fail(out, f"--stages: unknown stage {unknown[0]!r}; known: " + ", ".join(known),
                             EXIT_USAGE, started, sys.stderr)
    except ConfigError as exc:
        return _fail(out, str(exc), EXIT_USAGE, started, sys.stderr)

    try:
        from grader import pipeline as grading_mod
        from grader.outputs.write import write_outputs
        from grader.outputs.summary import render_terminal

        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        graded = [st for st in rubric.stages if stages is None or st.id in stages]
        # Steps: probe, compile and run each stage, then check, sanitize, profile, the other sections.
        steps = 1 + 2 * len(graded) + 5
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("grading", total=steps)

            def progress(msg: str) -> None:
                bar.update(task, description=f"grading: {msg}", advance=1)

            grading = grading_mod.grade(sub, rubric, out, stages=stages, use_gpu=not args.no_gpu,
                                        keep_outputs=args.keep_outputs, progress=progress)
            bar.update(task, completed=steps)
        write_outputs(grading, out)
        render_terminal(grading, console)
        console.print(f"results: {out / 'results.json'} ({grading.seconds:.1f} s)", highlight=False)
        return EXIT_OK
    except Exception:  # the grader's own bug: still leave a results.json behind
        tb = traceback.format_exc()
        print(tb, file=sys.stderr)
        try:
            write_results(out / "results.json", error_results(tb, time.monotonic() - started))
        except Exception as exc:  # pragma: no cover - disk full or similar
            print(f"error: could not write results.json: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
