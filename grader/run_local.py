#!/usr/bin/env python3
"""Grade on this machine with the older flags: ``python grader/run_local.py SUBMISSION [--out DIR]``.

The flags map onto ``python -m grader`` commands (grader/cli.py); the script also works without
installing the package (it puts the repository root on ``sys.path``):

    run_local.py SUB [--out D] [--stages a,b] [--no-gpu] ...   ->  grade SUB ...
    run_local.py EXPORT --batch [--workers N] [--shard I/N] ...  ->  batch EXPORT ...
    run_local.py [SOLUTIONS] --calibrate [REPEATS] [--out D]     ->  calibrate [SOLUTIONS] --repeats REPEATS ...
    run_local.py --check-rubric [--rubric R]                     ->  check-rubric --rubric R
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Imported after the path is set; process.py and what it imports are the standard library only (grader.cli is
# imported in main, after the set-up check).
from grader.sandbox.process import run_entry_point  # noqa: E402

DEFAULT_OUT = "grading-out"  # grader/cli.py's DEFAULT_OUT

# Options that only a batch takes, as (flag, attribute).
BATCH_ONLY = (("--workers", "workers"), ("--force", "force"), ("--retry-failed", "retry_failed"),
              ("--timeout", "timeout"), ("--shard", "shard"), ("--trusted-submissions", "trusted_submissions"))


class LegacyUsage(Exception):
    """Flags that do not go together."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="run_local.py", description="Grade a GEMM-ladder submission.")
    p.add_argument("submission", nargs="?", help="a folder holding gemm/*.cu (e.g. solutions/ or starter/), or a zip")
    p.add_argument("--out", help=f"output folder (default: {DEFAULT_OUT}; batch-out with --batch)")
    p.add_argument("--rubric", help="rubric file (default: the repo's rubric.yaml)")
    p.add_argument("--stages", help="comma-separated stage ids to grade (default: all)")
    p.add_argument("--no-gpu", action="store_true", help="grade statically even if a GPU is present")
    p.add_argument("--keep-outputs", action="store_true", help="keep the kernels' output matrices (.npy)")
    p.add_argument("--keep-work", action="store_true", help="keep OUT/work (the copy, builds, ncu's spec)")
    p.add_argument("--gpu-lock", metavar="FILE", help="a lock file shared by every grading on this GPU: the GPU "
                   "steps wait for it (several gradings at once on one GPU box)")
    p.add_argument("--check-rubric", action="store_true", help="only validate the rubric and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    p.add_argument("--batch", action="store_true",
                   help="SUBMISSION is a Gradescope 'Download Submissions' export: grade every submission in it "
                        "(python -m grader batch; also --workers N, --force, --retry-failed, --timeout S, "
                        "--shard I/N, --trusted-submissions)")
    p.add_argument("--calibrate", nargs="?", const=3, type=int, metavar="REPEATS",
                   help="instructors, on a GPU machine: grade the solutions (default: the repo's solutions/) "
                        "and the one-stage-shifted submission REPEATS times (default 3) and write "
                        "calibration.md / calibration.json into --out")
    p.add_argument("--workers", type=int, help=argparse.SUPPRESS)
    p.add_argument("--force", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--retry-failed", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=float, help=argparse.SUPPRESS)
    p.add_argument("--shard", help=argparse.SUPPRESS)
    p.add_argument("--trusted-submissions", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _pass(args: argparse.Namespace, *names: str) -> list[str]:
    """The given options, spelled for the subcommand (only those set)."""
    out: list[str] = []
    for name in names:
        value = getattr(args, name)
        flag = "--" + name.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value not in (None, False):
            out += [flag, str(value)]
    return out


def _positional(args: argparse.Namespace) -> list[str]:
    """The submission, after '--' so that a name starting with '-' stays a name."""
    return ["--", args.submission] if args.submission else []


def to_command(args: argparse.Namespace) -> list[str]:
    """The ``python -m grader`` command line these flags mean."""
    batch_flags = [flag for flag, attr in BATCH_ONLY if getattr(args, attr) not in (None, False)]
    if args.batch:
        if args.keep_work:
            raise LegacyUsage("--keep-work applies to one submission, not to --batch")
        return ["batch", *_pass(args, "out", "rubric", "stages", "no_gpu", "keep_outputs", "quiet"),
                *_pass(args, *(attr for _flag, attr in BATCH_ONLY)), *_positional(args)]
    if batch_flags:
        raise LegacyUsage(f"{batch_flags[0]} is an option of --batch")
    if args.check_rubric:
        return ["check-rubric", *_pass(args, "rubric", "out")]
    if args.calibrate is not None:
        return ["calibrate", "--repeats", str(args.calibrate), *_pass(args, "out", "rubric", "quiet"),
                *_positional(args)]
    return ["grade", *_pass(args, "out", "rubric", "stages", "no_gpu", "keep_outputs", "keep_work", "quiet", "gpu_lock"),
            *_positional(args)]


def main(argv: list[str] | None = None) -> int:
    from grader import cli

    args = parse_args(argv)
    try:
        command = to_command(args)
    except LegacyUsage as exc:
        return cli.fail(Path(args.out or cli.DEFAULT_OUT).resolve(), str(exc), cli.EXIT_USAGE, time.monotonic())
    return cli.main(command)


if __name__ == "__main__":
    sys.exit(run_entry_point(lambda: main))  # a TA's grading holds its tree too
