"""Command line: ``python -m grader COMMAND ...``, a thin layer over library functions.

    python -m grader grade SUBMISSION [--out DIR] [--stages a,b] [--no-gpu] [--keep-work] ...
    python -m grader batch EXPORT [--out DIR] [--workers N] [--shard I/N] ...   (grader/deploy/batch)
    python -m grader merge OUT1 OUT2 ... --out grades.csv                       (grader/deploy/batch)
    python -m grader check-rubric [--rubric PATH]
    python -m grader calibrate [SOLUTIONS] [--repeats N] [--out DIR]            (grader/instructor/calibrate.py)
    python -m grader calibrate --from-gradings DIR [--rubric R] [--out DIR]     (its analysis alone, no GPU)
    python -m grader handout --write|--check                                    (grader/instructor/handout.py)
    python -m grader rescore GRADING_OR_BATCH --rubric NEW.yaml [--out DIR]     (grader/instructor/rescore.py)
    python -m grader whatif BATCH_OR_GRADINGS [--rubric PROPOSED.yaml] --out DIR (grader/instructor/whatif.py)
    python -m grader gradescope build|unpack|run ...                            (grader/deploy/gradescope)
    python -m grader check [SUBMISSION] / kit build [--out ZIP]                 (grader/deploy/kit)
    python -m grader similarity CLASS [--against DIR ...] --out DIR            (grader/similarity)
    python -m grader variant --student ID                                       (grader/occupancy/variants.py)

``python grader/run_local.py`` keeps the older flags (``--batch``, ``--calibrate``, ``--check-rubric``)
and maps them onto these commands.

Exit codes:
  0  graded (whatever the score); results.json written
  2  bad usage or an invalid rubric; results.json written with the message
  3  the grader itself failed; results.json written with an "autograder error" item
  78 the grader's packages are not set up for this Python: one line names the set-up (grader/setup_check.py)
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from grader import DEFAULT_RUBRIC, REPO_ROOT
from grader.outputs.results import error_results, write_results
from grader.rubric.errors import ConfigError

if TYPE_CHECKING:
    from grader.sandbox.process import Terminated

EXIT_OK, EXIT_USAGE, EXIT_INTERNAL = 0, 2, 3
DEFAULT_OUT = "grading-out"


def fail(out: Path, message: str, code: int, started: float, stderr: TextIO | None = None) -> int:
    """Say what is wrong, leave a results.json that says it too, and return ``code``."""
    stderr = stderr or sys.stderr
    print(f"error: {message}", file=stderr)
    try:
        write_results(out / "results.json", error_results(message, time.monotonic() - started))
    except OSError as exc:
        print(f"error: could not write {out / 'results.json'}: {exc}", file=stderr)
    return code


def internal_error(out: Path, started: float) -> int:
    """The grader's own failure (call it in an ``except``): print the traceback, still leave a
    results.json behind (an "autograder error" item), and return EXIT_INTERNAL."""
    tb = traceback.format_exc()
    print(tb, file=sys.stderr)
    try:
        write_results(out / "results.json", error_results(tb, time.monotonic() - started))
    except Exception as exc:  # pragma: no cover - disk full or similar
        print(f"error: could not write results.json: {exc}", file=sys.stderr)
    return EXIT_INTERNAL


def _console(quiet: bool):
    from rich.console import Console

    console = Console(stderr=True, quiet=quiet)
    if not console.is_terminal:  # logs and CI: do not squeeze the table into 80 columns
        console = Console(stderr=True, quiet=quiet, width=150)
    return console


def _stage_list(text: str | None, rubric) -> list[str] | None:
    """--stages as a list; ConfigError naming the first unknown id."""
    if not text:
        return None
    stages = [s.strip() for s in text.split(",") if s.strip()]
    known = rubric.part_ids
    unknown = [s for s in stages if s not in known]
    if unknown:
        raise ConfigError("--stages", f"unknown stage {unknown[0]!r}", "one of " + ", ".join(known))
    return stages


# --------------------------------------------------------------------------------------------
# grade
# --------------------------------------------------------------------------------------------
@contextmanager
def _grading_progress(quiet: bool, steps: int, started: float) -> Iterator[Callable[[str], None]]:
    """What a grading calls at each step: a bar on a terminal, a line per step elsewhere (a log, a pipe, CI), and
    nothing with --quiet, which imports no terminal UI at all (batches, the service and Gradescope grade --quiet,
    one process per submission)."""
    if quiet:
        yield lambda _msg: None
        return
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = _console(False)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    # Not a terminal: a bar draws nothing there, so each step is a line of its own.
    lines = not console.is_terminal
    with Progress(*columns, console=console, transient=True, disable=lines) as bar:
        task = bar.add_task("grading", total=steps)

        def progress(msg: str) -> None:
            bar.update(task, description=f"grading: {msg}", advance=1)
            if lines:
                print(f"grading: {msg} ({time.monotonic() - started:.1f} s)", file=sys.stderr, flush=True)

        yield progress
        bar.update(task, completed=steps)


def grade_command(args: argparse.Namespace) -> int:
    """Grade one submission (a folder or a zip of one) into --out."""
    started = time.monotonic()
    out = Path(args.out).resolve()
    from grader.sandbox.process import Terminated, stop_at_once_on, sweep_after_steps
    sweep_after_steps()  # a daemon a step leaves dies at that step's end (python -m grader only)
    stop_at_once_on(signal.SIGINT)  # Ctrl-C: its steps killed now, and a results.json that says so
    try:
        from grader.rubric.load import load_rubric

        rubric = load_rubric(args.rubric)
        if not args.submission:
            return fail(out, "no submission given (usage: python -m grader grade SUBMISSION)", EXIT_USAGE, started)
        sub = Path(args.submission)
        if not os.path.lexists(sub):
            return fail(out, f"submission folder {sub} does not exist", EXIT_USAGE, started)
        stages = _stage_list(args.stages, rubric)
        cited = _stored_gradings(getattr(args, "citations_from", []))
    except ConfigError as exc:
        return fail(out, str(exc), EXIT_USAGE, started)
    except Terminated as stop:
        return _stopped(out, stop, started)
    except Exception:  # the grader's own bug
        return internal_error(out, started)

    try:
        from grader import pipeline
        from grader.outputs.write import write_outputs

        graded = [st for st in rubric.stages if stages is None or st.id in stages]
        # Steps: probe, compile and run each stage, then check, sanitize, profile, the other sections.
        steps = 1 + 2 * len(graded) + 5
        with _grading_progress(args.quiet, steps, started) as progress:
            grading = pipeline.grade(sub, rubric, out, stages=stages, use_gpu=not args.no_gpu,
                                     keep_outputs=args.keep_outputs, progress=progress,
                                     gpu_lock=Path(args.gpu_lock) if getattr(args, "gpu_lock", None) else None,
                                     device_file=Path(args.device) if getattr(args, "device", None) else None,
                                     student=args.student, citations_from=cited,
                                     no_gpu_reason=args.no_gpu_because or pipeline.NO_GPU_FLAG)
        write_outputs(grading, out)
        mode = grading.env.sandbox
        if mode is not None and mode.confinement.value == "weak":  # said once, even with --quiet
            print(f"warning: students' code ran without the bubblewrap sandbox: {mode.reason} "
                  "(recorded in grading.json and summary.md; docs/deployment.md, 'What is fenced')", file=sys.stderr)
        if not args.quiet:
            from grader.outputs.summary import render_terminal

            console = _console(False)
            render_terminal(grading, console)
            console.print(f"results: {out / 'results.json'} ({grading.seconds:.1f} s)", highlight=False)
        return EXIT_OK
    except Terminated as stop:  # its steps are killed already (grader/sandbox/process.py: run_holding_tree)
        return _stopped(out, stop, started)
    except Exception:  # the grader's own bug
        return internal_error(out, started)
    finally:
        if not args.keep_work:
            remove_work(out)


def _stored_gradings(paths: list[str]) -> list:
    """--citations-from's gradings; ConfigError naming the file and what is wrong with it."""
    from grader.grading import GradingFormatError, load_grading

    out = []
    for p in paths:
        try:
            out.append(load_grading(p))
        except GradingFormatError as exc:
            raise ConfigError(f"--citations-from {p}", str(exc), "a grading.json written by `python -m grader "
                              "grade` (this grader's version)") from None
    return out


def _stopped(out: Path, stop: Terminated, started: float) -> int:
    """A grading a signal stopped: its results.json says so, as an error result (nothing was graded)."""
    return fail(out, f"the grading was stopped by {stop.name} after {time.monotonic() - started:.1f} s, before "
                "it finished: nothing was graded; grade again", 128 + stop.signum, started)


def remove_work(out: Path) -> None:
    """Remove OUT/work (the submission's copy, builds, spec files). Links inside it (students' runs
    write there) are removed, never followed; nothing the feedback names lives there (plots are drawn
    into OUT itself)."""
    from grader.untrusted.safe_copy import remove_tree

    work = out / "work"
    if work.is_dir() and not work.is_symlink():
        remove_tree(work, ignore_errors=True)  # at any depth: a student's run may nest folders


def _add_grade_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("submission", nargs="?", help="a folder holding gemm/*.cu (e.g. solutions/), or a zip of one")
    p.add_argument("--out", default=DEFAULT_OUT, help="output folder for results.json (default: %(default)s)")
    p.add_argument("--rubric", default=str(DEFAULT_RUBRIC), help="rubric file (default: the repo's rubric.yaml)")
    p.add_argument("--stages", help="comma-separated stage ids to grade (default: all)")
    p.add_argument("--no-gpu", action="store_true", help="grade statically even if a GPU is present")
    p.add_argument("--no-gpu-because", help=argparse.SUPPRESS)  # with --no-gpu: why, in the student's words
    p.add_argument("--keep-outputs", action="store_true", help="keep the kernels' output matrices (.npy)")
    p.add_argument("--gpu-lock", metavar="FILE", help="a lock file shared by every grading on this GPU: the GPU "
                   "steps wait for it, so two gradings never time kernels on one GPU at once (batches, the service)")
    p.add_argument("--device", metavar="FILE", help="the GPU's description as its probe wrote it (a batch probes "
                   "each GPU once); unusable, the GPU is probed again and the notes say why")
    p.add_argument("--keep-work", action="store_true",
                   help="keep OUT/work (the submission's copy, builds, ncu's profile_spec.json); removed by default")
    p.add_argument("--student", metavar="ID", help="who submitted (an SID or email): with rubric occupancy.variants, "
                   "the occupancy exercises are graded for this student's own numbers")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    p.add_argument("--citations-from", action="append", default=[], metavar="GRADING_JSON",
                   help="a stored grading of the same kernels (its grading.json), e.g. the student's self-check on "
                   "the course's GPU service: the report's values are compared with the one on the GPU its `GPU:` "
                   "line names when this grading runs on another (repeatable)")
    p.set_defaults(func=grade_command)


# --------------------------------------------------------------------------------------------
# check-rubric, calibrate, handout
# --------------------------------------------------------------------------------------------
def rubric_title_problems(path: Path, rubric) -> list[str]:
    """One line per item whose title states another threshold than it grades by, told by line and ids."""
    from grader.rubric.titles import title_problems
    from grader.rubric.where import describe_path

    problems = title_problems(rubric)
    text = path.read_text(encoding="utf-8") if problems else ""
    return [f"{describe_path(text, rubric.source, p.path) or p.path}: {p.message}" for p in problems]


def check_rubric_command(args: argparse.Namespace) -> int:
    from grader.rubric.load import load_rubric

    started = time.monotonic()
    try:
        rubric = load_rubric(args.rubric)
    except ConfigError as exc:
        return fail(Path(args.out).resolve(), str(exc), EXIT_USAGE, started)
    titles = rubric_title_problems(Path(args.rubric), rubric)
    if titles:
        return fail(Path(args.out).resolve(), "\n".join(titles), EXIT_USAGE, started)
    _console(False).print(f"{args.rubric}: valid; {len(rubric.stages)} stages, {rubric.max_points:g} points",
                          highlight=False)
    return EXIT_OK


def calibrate_command(args: argparse.Namespace) -> int:
    """Thresholds against the reference and its predecessors (grader/instructor/calibrate.py): graded on this
    GPU, or (``--from-gradings``) only the analysis of gradings stored by an earlier run."""
    started = time.monotonic()
    out = Path(args.out).resolve()
    console = _console(args.quiet)
    try:
        from grader.rubric.load import load_rubric

        rubric = load_rubric(args.rubric or DEFAULT_RUBRIC) if args.rubric or not args.from_gradings else None
    except ConfigError as exc:
        return fail(out, str(exc), EXIT_USAGE, started)
    if args.from_gradings:
        return _calibrate_from_gradings(args, rubric, out, console, started)
    assert rubric is not None
    if args.repeats < 1:
        return fail(out, f"--repeats {args.repeats}: it must be at least 1", EXIT_USAGE, started)
    sub = Path(args.solutions) if args.solutions else REPO_ROOT / "solutions"
    if not sub.is_dir():
        return fail(out, f"solutions folder {sub} does not exist", EXIT_USAGE, started)
    try:
        from grader.instructor.calibrate import DEFAULT_TEXTBOOK, run_calibration

        textbook = None if args.no_textbook else Path(args.textbook) if args.textbook else REPO_ROOT / DEFAULT_TEXTBOOK
        if textbook is not None and not textbook.is_dir():
            if args.textbook:
                return fail(out, f"textbook folder {textbook} does not exist", EXIT_USAGE, started)
            console.print(f"calibration: no textbook population at {textbook}; speed and technique items are "
                          "checked against the reference and its predecessor only", highlight=False)
            textbook = None
        cal = run_calibration(rubric, sub, out, args.repeats, progress=lambda msg: console.print(msg),
                              textbook_dir=textbook)
    except Exception:  # the grader's own bug
        return internal_error(out, started)
    _said_calibration(console, cal, out)
    return EXIT_OK


def _calibrate_from_gradings(args: argparse.Namespace, rubric, out: Path, console, started: float) -> int:
    """The calibration's analysis over stored gradings (no GPU), under ``--rubric`` or the rubric they kept."""
    from grader.instructor.calibrate import analyse, load_populations
    from grader.rubric.load import rubric_from_text

    src = Path(args.from_gradings)
    if not src.is_dir():
        return fail(out, f"--from-gradings {src}: not a folder", EXIT_USAGE, started)
    pops = load_populations(src)
    if not pops.reference:
        return fail(out, f"--from-gradings {src}: holds no reference gradings (reference/ or reference_<k>/ with a "
                         "grading.json, as calibrate writes them)", EXIT_USAGE, started)
    if rubric is None:
        kept = {g.rubric_text for g in pops.reference}
        if len(kept) != 1 or not next(iter(kept)):
            return fail(out, f"--from-gradings {src}: the reference gradings keep no one rubric; give --rubric",
                        EXIT_USAGE, started)
        try:
            rubric = rubric_from_text(next(iter(kept)), f"{src}: the reference grading's rubric")
        except ConfigError as exc:
            return fail(out, str(exc), EXIT_USAGE, started)
    try:
        cal = analyse(rubric, pops, out)
    except Exception:  # the grader's own bug
        return internal_error(out, started)
    _said_calibration(console, cal, out)
    return EXIT_OK


def _said_calibration(console, cal, out: Path) -> None:
    bad = [f"{r.number}.{r.item}: {r.verdict} {r.why}".strip() for r in cal.rows if r.verdict != "OK"]
    console.print(f"calibration: {len(cal.rows) - len(bad)} of {len(cal.rows)} threshold and technique items OK; "
                  f"report in {out / 'calibration.md'}", highlight=False)
    for line in bad:
        console.print(f"  {line}", highlight=False)
    for note in cal.meta.get("notes", []):
        console.print(f"  note: {note}", highlight=False)
    entry = next((f for f in cal.files if f.suffix == ".yaml"), None)
    console.print(f"calibration entry for this GPU: {entry} (commit it beside rubric.yaml as calibration/"
                  f"{entry.name} to use it)" if entry else "no calibration entry: the reference measured nothing on a GPU",
                  highlight=False)


def handout_command(args: argparse.Namespace) -> int:
    from grader.instructor import handout

    argv = ["--write" if args.write else "--check"]
    argv += ["--rubric", args.rubric] if args.rubric else []
    argv += ["--handout", args.handout] if args.handout else []
    return handout.main(argv)


def variant_command(args: argparse.Namespace) -> int:
    """A student's own occupancy numbers (rubric occupancy.variants), as the grader will check them."""
    from grader.occupancy.variants import variant_for
    from grader.rubric.load import load_rubric

    try:
        rubric = load_rubric(args.rubric)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    cfg = rubric.occupancy
    student = (args.student or "").strip()
    if getattr(args, "token", None) and not student:
        from grader.serve.auth import TokenRecord, token_hash

        # The grading service draws a token's jobs for its owner (grader/serve/worker.py): the same identity.
        student = TokenRecord(token_hash(args.token.strip()), "", "", 0.0, None).owner
    if cfg is None:
        print(f"{args.rubric} has no occupancy exercises")
        return EXIT_OK
    if not cfg.variants:
        print("this course gives everyone the handout's numbers (rubric occupancy.variants is off)")
        return EXIT_OK
    if not student:
        print("error: --student: give your student ID as Gradescope has it (your email if the course has no IDs), "
              "or --token: your grading service token", file=sys.stderr)
        return EXIT_USAGE
    variant = variant_for(cfg, student)
    print(f"occupancy variant {variant.name} for {variant.student}:")
    for line in variant.lines():
        print(f"  {line}")
    print(f"  build occ.cu with: nvcc -O2 -arch=sm_90a {' '.join(variant.program_defines())} -o occ occ.cu")
    print("  Ex 3 to Ex 6 as in the handout.")
    return EXIT_OK


def _known_rubrics(was: list[str]) -> list:
    """The rubrics a stored grading may have been measured under: --was files, then the repository's."""
    from grader.rubric.load import load_rubric

    known = [load_rubric(p) for p in was]  # a bad --was is a usage error (ConfigError)
    try:
        known.append(load_rubric(DEFAULT_RUBRIC))
    except ConfigError:
        pass  # the repository's rubric is only a candidate
    return known


def _same_or_inside(a: Path, b: Path) -> bool:
    a, b = a.resolve(), b.resolve()
    return a == b or b in a.parents or a in b.parents


def rescore_command(args: argparse.Namespace) -> int:
    """Stored gradings under an edited rubric, without a GPU (grader/instructor/rescore.py)."""
    started = time.monotonic()
    out = Path(args.out).resolve()
    console = _console(args.quiet)
    try:
        from grader.instructor.rescore import REGRADE, Compared, rescore
        from grader.rubric.load import load_rubric

        if not os.path.lexists(args.source):
            return fail(out, f"{args.source} does not exist (expected a grading's folder, a batch's output folder "
                        "or a folder of grading folders)", EXIT_USAGE, started)
        if _same_or_inside(Path(args.source), out):
            # Said, and no results.json written there: it would replace a stored grading's own.
            print(f"error: --out {args.out}: it must be another folder than {args.source} (and neither inside the "
                  "other): the stored gradings are the measurements", file=sys.stderr)
            return EXIT_USAGE
        rubric = load_rubric(args.rubric)
        known = _known_rubrics(args.was)
        base = load_rubric(DEFAULT_RUBRIC)  # what the edit is an edit of
        run = rescore(Path(args.source), rubric, out, known, base)
    except ConfigError as exc:
        return fail(out, str(exc), EXIT_USAGE, started)
    except Exception:  # the grader's own bug
        return internal_error(out, started)
    unread = [r for r in run.gradings if r.problem]
    if run.layout == "grading" and unread:
        return fail(out, unread[0].problem, EXIT_USAGE, started)
    for r in run.gradings:
        g = r.grading
        if g is None:
            console.print(f"{r.name}: not re-scored: {r.problem}", highlight=False)
            continue
        c = r.compared or Compared(r.before or 0.0, g.score, g.score)
        console.print(f"{r.name}: as graded {c.graded:g}, under {DEFAULT_RUBRIC.name} {c.base:g} (differs from the rubric "
                      f"it was graded with: {c.drift:+g}), under {Path(args.rubric).name} {c.new:g} (changed by "
                      f"your edit: {c.edit:+g}), of {r.automatic:g} automatic points"
                      + (f"; {len(r.left_out)} item(s) {REGRADE}, left out of these scores" if r.left_out else ""),
                      highlight=False)
        for f in r.refused:
            console.print(f"  {f.number}: {REGRADE}: {f.why}", highlight=False)
    for note in run.notes:
        console.print(f"note: {note}", highlight=False)
    console.print(f"re-scored {len(run.gradings) - len(unread)} grading(s) into {out}"
                  + (f"; grades in {run.csv}" if run.csv else "") + f" ({time.monotonic() - started:.1f} s)",
                  highlight=False)
    return EXIT_OK


def whatif_command(args: argparse.Namespace) -> int:
    """The class's measured distributions against current and proposed thresholds (grader/instructor/whatif.py)."""
    started = time.monotonic()
    out = Path(args.out).resolve()
    console = _console(args.quiet)
    try:
        from grader.instructor.whatif import what_if
        from grader.rubric.load import load_rubric

        if not os.path.lexists(args.source):
            return fail(out, f"{args.source} does not exist (expected a batch's output folder, a folder of grading "
                        "folders or a grading's folder)", EXIT_USAGE, started)
        proposed = load_rubric(args.rubric) if args.rubric else None
        base = load_rubric(args.base or DEFAULT_RUBRIC)
        report = what_if(Path(args.source), proposed, out, _known_rubrics(args.was), base)
    except ConfigError as exc:
        return fail(out, str(exc), EXIT_USAGE, started)
    except Exception:  # the grader's own bug
        return internal_error(out, started)
    for problem in report.problems:
        console.print(f"not read: {problem}", highlight=False)
    console.print(f"what-if over {report.gradings} grading(s), {len(report.items)} threshold item(s): {report.path}",
                  highlight=False)
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# The parser
# --------------------------------------------------------------------------------------------
def _command_word(argv: list[str]) -> str | None:
    """The COMMAND of ``argv``: its first word that is not an option (the parser's own options take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser. ``command``: only that subcommand's own arguments are added, so only its
    module is imported (a grading child imports no service, kit or batch code); every subcommand is listed with
    its help all the same, so usage, ``--help`` and the errors read alike. None: every subcommand's arguments."""
    def wanted(*names: str) -> bool:
        return command is None or command in names

    p = argparse.ArgumentParser(prog="python -m grader", description="The GEMM-ladder autograder.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_grade_arguments(sub.add_parser("grade", help="grade one submission (a folder or a zip of one)"))
    batch = sub.add_parser("batch", help="grade every submission of a Gradescope export")
    merge = sub.add_parser("merge", help="merge batches' grades.csv files into one")
    if wanted("batch", "merge"):
        from grader.deploy.batch.cli import add_grade_arguments, add_merge_arguments

        add_grade_arguments(batch)
        add_merge_arguments(merge)

    c = sub.add_parser("check-rubric", help="validate a rubric and exit")
    c.add_argument("--rubric", default=str(DEFAULT_RUBRIC), help="rubric file (default: the repo's rubric.yaml)")
    c.add_argument("--out", default=DEFAULT_OUT, help="where results.json says why an invalid rubric is invalid")
    c.set_defaults(func=check_rubric_command)

    cal = sub.add_parser("calibrate", help="instructors, on a GPU machine: check the thresholds against "
                                           "the solutions and the one-stage-shifted submission")
    cal.add_argument("solutions", nargs="?", help="the reference submission (default: the repo's solutions/)")
    cal.add_argument("--repeats", type=int, default=3, help="gradings of each (default: %(default)s)")
    cal.add_argument("--out", default=DEFAULT_OUT, help="where calibration.md/.json go (default: %(default)s)")
    cal.add_argument("--rubric", help="rubric file (default: the repo's rubric.yaml; with --from-gradings, the "
                                      "rubric the reference gradings kept)")
    cal.add_argument("--from-gradings", metavar="DIR",
                     help="no GPU: only the analysis, of the gradings an earlier calibration stored in DIR "
                          "(reference_<k>/, shifted_<k>/, textbook_<k>/, textbook_shifted_<k>/; or reference/, ...)")
    cal.add_argument("--textbook", help="the textbook population: each stage's plainest faithful kernel "
                                        "(default: the checkout's tests/submissions/textbook/course)")
    cal.add_argument("--no-textbook", action="store_true", help="grade no textbook population")
    cal.add_argument("--quiet", action="store_true", help="no progress lines")
    cal.set_defaults(func=calibrate_command)

    h = sub.add_parser("handout", help="the handout's generated rubric tables")
    mode = h.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated blocks of the handout")
    mode.add_argument("--check", action="store_true", help="exit 1 when a generated block is stale")
    h.add_argument("--rubric", help="rubric file (default: the repo's rubric.yaml)")
    h.add_argument("--handout", help="the handout (default: assignment/README.md)")
    h.set_defaults(func=handout_command)

    v = sub.add_parser("variant", help="students: your own numbers for the occupancy exercises (when the course "
                                       "draws per-student variants)")
    v.add_argument("--student", help="your student ID as Gradescope has it (your email if the course has no IDs)")
    v.add_argument("--token", help="or: your token for the course's grading service (`python -m grader submit`)")
    v.add_argument("--rubric", default=str(DEFAULT_RUBRIC), help="rubric file (default: the repo's rubric.yaml)")
    v.set_defaults(func=variant_command)

    rs = sub.add_parser("rescore", help="instructors, no GPU: re-score stored gradings under an edited rubric")
    rs.add_argument("source", help="a grading's folder (or its grading.json), a batch's output folder, or a folder "
                                   "of grading folders")
    rs.add_argument("--rubric", required=True, help="the edited rubric")
    rs.add_argument("--out", default="rescore-out", help="where the re-scored outputs go (default: %(default)s)")
    rs.add_argument("--was", action="append", default=[], metavar="OLD.yaml",
                    help="a rubric the gradings may have been measured under (matched by sha256), for gradings "
                         "that kept no copy of theirs; repeatable")
    rs.add_argument("--quiet", action="store_true", help="no per-grading lines")
    rs.set_defaults(func=rescore_command)

    wi = sub.add_parser("whatif", help="instructors, no GPU: the class's measured values against current and "
                                       "proposed thresholds, histograms and a report")
    wi.add_argument("source", help="a batch's output folder, a folder of grading folders, or one grading's folder")
    wi.add_argument("--rubric", help="the proposed rubric (default: none, the current thresholds only)")
    wi.add_argument("--out", required=True, help="where report.md and its PNGs go")
    wi.add_argument("--was", action="append", default=[], metavar="OLD.yaml",
                    help="as for rescore: a rubric the gradings may have been measured under; repeatable")
    wi.add_argument("--base", metavar="BASE.yaml", help="the rubric the proposal edits (default: the repo's "
                    "rubric.yaml): scores changed by your edit are kept apart from those that differ from the rubric "
                    "each grading used")
    wi.add_argument("--quiet", action="store_true", help="no summary line")
    wi.set_defaults(func=whatif_command)

    similarity = sub.add_parser("similarity", help="instructors, no GPU: the class's similarity and provenance "
                                                   "report (source and SASS)")
    gradescope = sub.add_parser("gradescope", help="the Gradescope package: build, unpack, run")
    serve = sub.add_parser("serve", help="the GPU grading service: HTTP API, queue, workers, tokens")
    submit = sub.add_parser("submit", help="students: grade on the course GPU through the grading service")
    check = sub.add_parser("check", help="students: is a submission well-formed? seconds, no GPU, no scores")
    kit = sub.add_parser("kit", help="build the student kit zip (handout, starter, grader; no solutions)")
    if wanted("similarity"):
        from grader.similarity.cli import add_arguments as add_similarity_arguments

        add_similarity_arguments(similarity)
    if wanted("gradescope"):
        from grader.deploy.gradescope.build import add_arguments as add_gradescope_arguments

        add_gradescope_arguments(gradescope)
    if wanted("serve"):
        from grader.serve.cli import add_arguments as add_serve_arguments

        add_serve_arguments(serve)
    if wanted("submit"):
        from grader.serve.submit import add_arguments as add_submit_arguments

        add_submit_arguments(submit)
    if wanted("check"):
        from grader.deploy.kit.check import add_arguments as add_check_arguments

        add_check_arguments(check)
    if wanted("kit"):
        from grader.deploy.kit.build import add_arguments as add_kit_arguments

        add_kit_arguments(kit)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_command_word(argv)).parse_args(argv)
    return args.func(args)
