"""The batch's command line: ``python -m grader batch EXPORT`` / ``python -m grader merge ...``
(also ``python -m grader.deploy.batch grade|merge``). The arguments are defined once, here, and
attached to both parsers."""
from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

from grader.deploy.batch.plan import PER_GPU, parse_shard, require_sandbox
from grader.deploy.batch.pool import DEFAULT_RUBRIC, DEFAULT_TIMEOUT_S, Options
from grader.deploy.batch.run import grade_export
from grader.outputs.grades_csv import merge
from grader.untrusted.export import BatchError

EXIT_OK, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 2, 3, 130


def add_grade_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("export", help="Gradescope 'Download Submissions' export: the zip or its folder")
    p.add_argument("--out", default="batch-out", help="output folder (default: %(default)s)")
    p.add_argument("--workers", type=int,
                   help="parallel gradings (default: --per-gpu per visible GPU, dealt to the GPUs in turn; 1 without)")
    p.add_argument("--per-gpu", type=int, default=PER_GPU,
                   help="gradings sharing one GPU: one uses it while the others compile; never two on it at once "
                   "(default: %(default)s)")
    p.add_argument("--times-from", action="append", default=[], metavar="DIR",
                   help="an earlier batch's output folder: the submissions that took longest there start first "
                   "(this --out's own earlier times are always used); repeatable")
    p.add_argument("--force", action="store_true",
                   help="re-grade every submission that already has results (stale ones are re-graded anyway)")
    p.add_argument("--retry-failed", action="store_true",
                   help="also re-grade the submissions whose grading failed or timed out")
    p.add_argument("--no-gpu", action="store_true", help="grade statically even if GPUs are visible")
    p.add_argument("--rubric", default=str(DEFAULT_RUBRIC), help="rubric file (default: the repo's)")
    p.add_argument("--stages", help="comma-separated stage ids to grade (default: all)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="time limit per submission in seconds (default: %(default)g)")
    p.add_argument("--shard", help="grade only slice I of N (I/N, 0-based; Slurm array jobs)")
    p.add_argument("--keep-outputs", action="store_true", help="keep the kernels' output matrices")
    p.add_argument("--trusted-submissions", action="store_true",
                   help="grade even where the sandbox cannot fence students' code (only for code you trust)")
    p.add_argument("--similarity", action="store_true",
                   help="at the end, the class's similarity report into OUT/similarity (python -m grader similarity)")
    p.add_argument("--similarity-against", action="append", default=[], metavar="DIR",
                   help="with --similarity: a reference folder (as similarity's --against); repeatable")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_grade)


def add_merge_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", help="grades.csv files or batch output folders")
    p.add_argument("--out", required=True, help="the merged CSV")
    p.set_defaults(func=run_merge)


def run_merge(args: argparse.Namespace) -> int:
    n, warnings = merge([Path(x) for x in args.inputs], Path(args.out))
    for w in warnings:
        print(f"merge: warning: {w}", file=sys.stderr)
    print(f"merge: {n} submissions -> {args.out}", file=sys.stderr)
    return EXIT_OK


def _options(args: argparse.Namespace) -> Options:
    from grader.rubric.load import load_rubric

    if args.workers is not None and args.workers < 1:
        raise BatchError(f"--workers {args.workers}: at least 1")
    if args.per_gpu < 1:
        raise BatchError(f"--per-gpu {args.per_gpu}: at least 1")
    for folder in args.times_from:
        if not Path(folder).is_dir():
            raise BatchError(f"--times-from {folder}: not a folder (expected an earlier batch's --out)")
    if args.timeout <= 0:
        raise BatchError(f"--timeout {args.timeout:g}: a positive number of seconds")
    rubric = load_rubric(args.rubric)  # a bad rubric stops here, not in every child
    if args.stages:
        known = rubric.part_ids
        unknown = [s.strip() for s in args.stages.split(",") if s.strip() and s.strip() not in known]
        if unknown:
            raise BatchError(f"--stages: unknown stage {unknown[0]!r}; known: {', '.join(known)}")
    return Options(rubric=Path(args.rubric).resolve(), use_gpu=not args.no_gpu, stages=args.stages,
                   timeout_s=args.timeout, keep_outputs=args.keep_outputs)


def run_grade(args: argparse.Namespace) -> int:
    from grader.rubric.errors import ConfigError
    from grader.sandbox.process import sweep_after_steps

    sweep_after_steps()  # a grading that died abruptly leaves its steps to this subreaper: killed at its end

    try:
        opts = _options(args)
        shard = parse_shard(args.shard)
        if not Path(args.export).exists():
            raise BatchError(f"export {args.export} does not exist (expected Gradescope's 'Download "
                             "Submissions' folder or zip)")
        trust_note = require_sandbox(args.trusted_submissions)
        grade_export(Path(args.export), Path(args.out), workers=args.workers, force=args.force,
                     retry_failed=args.retry_failed, opts=opts, shard=shard, quiet=args.quiet,
                     notes=[trust_note] if trust_note else None, per_gpu=args.per_gpu,
                     times_from=[Path(d) for d in args.times_from])
        if getattr(args, "similarity", False):
            from grader.similarity.cli import run as similarity_report

            # The batch's own output names the export it graded (batch.json), zip or folder alike.
            return similarity_report(Path(args.out), [Path(d) for d in args.similarity_against],
                                     Path(args.out) / "similarity", rubric_path=args.rubric, stages=args.stages,
                                     quiet=args.quiet)
        return EXIT_OK
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except (BatchError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception:  # the batch's own bug
        traceback.print_exc()
        return EXIT_INTERNAL


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.deploy.batch",
                                description="Grade a Gradescope export; merge shards' grades.csv.")
    sub = p.add_subparsers(dest="cmd", required=True)
    add_grade_arguments(sub.add_parser("grade", help="grade every submission of an export"))
    add_merge_arguments(sub.add_parser("merge", help="merge grades.csv files (or batch output folders) into one CSV"))
    args = p.parse_args(argv)
    return args.func(args)
