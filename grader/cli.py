"""Command line for TAs and students: ``python grader/run_local.py SUBMISSION``.

Exit codes:
  0  graded (whatever the score); results.json written
  2  bad usage or an invalid rubric; results.json written with the message
  3  the grader itself failed; results.json written with an "autograder error" item
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from .errors import ConfigError
from .records import to_jsonable
from .results import build_results, error_results, write_results

EXIT_OK, EXIT_USAGE, EXIT_INTERNAL = 0, 2, 3
DEFAULT_RUBRIC = Path(__file__).resolve().parent.parent / "rubric.yaml"


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
    return p.parse_args(argv)


def _fail(out: Path, message: str, code: int, started: float, stderr) -> int:
    print(f"error: {message}", file=stderr)
    try:
        write_results(out / "results.json", error_results(message, time.monotonic() - started))
    except OSError as exc:
        print(f"error: could not write {out / 'results.json'}: {exc}", file=stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    args = parse_args(argv)
    out = Path(args.out)
    from rich.console import Console

    console = Console(stderr=True, quiet=args.quiet)
    if not console.is_terminal:  # logs and CI: do not squeeze the table into 80 columns
        console = Console(stderr=True, quiet=args.quiet, width=150)
    try:
        from .rubric import load_rubric

        rubric = load_rubric(args.rubric)
        if args.check_rubric:
            console.print(f"{args.rubric}: valid; {len(rubric.stages)} stages, {rubric.max_points:g} points")
            return EXIT_OK
        if not args.submission:
            return _fail(out, "no submission folder given (usage: run_local.py SUBMISSION)", EXIT_USAGE,
                         started, sys.stderr)
        sub = Path(args.submission)
        if not sub.is_dir():
            return _fail(out, f"submission folder {sub} does not exist", EXIT_USAGE, started, sys.stderr)
        stages = None
        if args.stages:
            stages = [s.strip() for s in args.stages.split(",") if s.strip()]
            known = [st.id for st in rubric.stages] + (["occupancy"] if "occupancy" in rubric.extra else [])
            unknown = [s for s in stages if s not in known]
            if unknown:
                return _fail(out, f"--stages: unknown stage {unknown[0]!r}; known: " + ", ".join(known),
                             EXIT_USAGE, started, sys.stderr)
    except ConfigError as exc:
        return _fail(out, str(exc), EXIT_USAGE, started, sys.stderr)

    try:
        from . import grade as grading_mod
        from .report import render_terminal, summary_markdown

        with console.status("grading") as status:
            grading = grading_mod.grade(sub, rubric, out, stages=stages, use_gpu=not args.no_gpu,
                                        keep_outputs=args.keep_outputs,
                                        progress=lambda msg: status.update(f"grading: {msg}"))
        summary = summary_markdown(grading)
        results = build_results(grading.items, execution_time=grading.seconds, output=summary,
                                extra={"device": grading.env.device, "peaks": grading.env.peaks})
        write_results(out / "results.json", results)
        (out / "summary.md").write_text(summary + "\n")
        detail = {"submission": grading.submission, "device": grading.env.device,
                  "device_reason": grading.env.device_reason, "arch_flags": grading.env.arch_flags,
                  "compiler": getattr(grading.env.nvcc, "to_json", lambda: None)(),
                  "peaks": grading.env.peaks, "seconds": grading.seconds, "notes": grading.notes,
                  "stages": {sid: {"compile": o.compile, "correct": o.correct,
                                   "correctness": o.correctness_message, "cases": o.cases,
                                   "timing": o.timing, "raw_timings": o.bench,
                                   "sass_reason": o.sass.reason if o.sass else None,
                                   "run_output": o.run_output[-4000:]}
                             for sid, o in grading.outcomes.items()},
                  "items": grading.items}
        (out / "grading.json").write_text(json.dumps(to_jsonable(detail), indent=1, default=str) + "\n")
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
