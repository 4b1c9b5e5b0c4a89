"""``python -m grader similarity CLASS [--against DIR ...] --out DIR``: the similarity report, no GPU."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader import DEFAULT_RUBRIC

EXIT_OK, EXIT_USAGE, EXIT_INTERNAL = 0, 2, 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    from grader.similarity.defaults import DEFAULT_FLAG_AT, DEFAULT_TOP  # not report: it imports copydetect
    top: int | None = DEFAULT_TOP
    flag_at: float | None = DEFAULT_FLAG_AT

    p.add_argument("source", help="the class: a Gradescope export (zip or folder), a batch's output folder, or a "
                                  "folder of submission folders")
    p.add_argument("--against", action="append", default=[], metavar="DIR",
                   help="a reference folder (a public ladder's clone, last term's class, the course's solutions): "
                        "one submission-shaped folder or a folder of them; repeatable")
    p.add_argument("--out", required=True, help="where similarity.json, .md and .html go")
    p.add_argument("--stages", help="comma-separated stage ids (default: all)")
    p.add_argument("--starter", help="the starter code excluded from matching (default: the repo's starter/)")
    p.add_argument("--rubric", default=str(DEFAULT_RUBRIC), help="rubric file (default: the repo's rubric.yaml)")
    p.add_argument("--no-sass", action="store_true", help="compare sources only (no compile)")
    p.add_argument("--top", type=int, default=top, help="pairs per stage shown (default: %(default)s)")
    p.add_argument("--flag-at", type=float, default=flag_at,
                   help="list a reference match at or above this combined score (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=command)


def run(source: Path, against: list[Path], out: Path, *, rubric_path: str = str(DEFAULT_RUBRIC),
        stages: str | None = None, starter: str | None = None, use_sass: bool = True, top: int | None = None,
        flag_at: float | None = None, quiet: bool = False) -> int:
    """The command's work, for the command line and a batch's ``--similarity``; exit code."""
    from grader.compile.toolchain import find_cuobjdump, find_nvcc
    from grader.rubric.errors import ConfigError
    from grader.rubric.load import load_rubric
    from grader.similarity.report import DEFAULT_FLAG_AT, DEFAULT_TOP, similarity
    from grader.untrusted.export import BatchError

    def say(msg: str) -> None:
        if not quiet:
            print(f"similarity: {msg}", file=sys.stderr)

    try:
        rubric = load_rubric(rubric_path)
        chosen = [s.strip() for s in stages.split(",") if s.strip()] if stages else None
        unknown = [s for s in chosen or [] if s not in rubric.part_ids]
        if unknown:
            raise ConfigError("--stages", f"unknown stage {unknown[0]!r}", "one of " + ", ".join(rubric.part_ids))
        flag = DEFAULT_FLAG_AT if flag_at is None else flag_at
        if not 0 <= flag <= 1:
            raise ConfigError("--flag-at", f"is {flag:g}", "a score between 0 and 1")
        if starter and not Path(starter).is_dir():
            raise ConfigError("--starter", f"{starter} is not a folder", "the starter code's folder")
        report = similarity(Path(source), [Path(a) for a in against], Path(out).resolve(), rubric, stages=chosen,
                            starter=Path(starter) if starter else None,
                            nvcc=find_nvcc() if use_sass else None, cuobjdump=find_cuobjdump() if use_sass else None,
                            use_sass=use_sass, top=DEFAULT_TOP if top is None else max(1, top), flag_at=flag,
                            progress=say)
    except (ConfigError, BatchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    say(f"{len(report.entries)} submissions, {len(report.pairs)} pairs, {len(report.flagged())} reference "
        f"match(es) listed; report: {Path(out) / 'similarity.html'} ({report.seconds:.1f} s)")
    return EXIT_OK


def command(args: argparse.Namespace) -> int:
    return run(Path(args.source), [Path(a) for a in args.against], Path(args.out), rubric_path=args.rubric,
               stages=args.stages, starter=args.starter, use_sass=not args.no_sass, top=args.top,
               flag_at=args.flag_at, quiet=args.quiet)
