"""``python -m grader check [SUBMISSION]``: is the submission well-formed? In seconds, without a GPU.

Like otter's ``check`` and nbgrader's ``validate``: no grading and no scores, only whether the
grader will be able to read everything (grader/deploy/kit/checks.py says what is checked). The
submission is a folder or a zip of one, taken in by the grader's own intake (a fresh copy, no link
followed, sizes capped) into a temporary folder. Prints a short table, then::

    exit 0  every file, kernel, answer, citation and table is well-formed (rows marked info say
            what optional part, such as a bonus section, is left out)
    exit 1  something needs fixing (the rows marked FIX say what and where)
    exit 2  bad usage: no such submission, an invalid rubric
    exit 3  the check itself failed (a bug: please report it)
    exit 78 the grader's packages are not set up for this Python (grader/setup_check.py names the set-up)

Compiling needs nvcc (the stages compile in parallel, as the grader compiles them); without it,
or with ``--no-compile``, the kernel rows say they were not compiled.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, TextIO

from grader import DEFAULT_RUBRIC
from grader.compile.intake import Intake, Skip, Skipped
from grader.deploy.kit.checks import Mark, Row, answers, expected_files, kernels, layout, report
from grader.rubric.errors import ConfigError
from grader.untrusted.safe_copy import member_parts

if TYPE_CHECKING:
    from grader.evidence.protocol import ProbeResult

EXIT_OK, EXIT_FIX, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
MAX_SKIPPED = 10  # entries the intake left out, one row each


def _not_expected(taken: Intake, rubric) -> list[Skipped]:
    """What the intake left out, except the files the rubric names (their rows say it)."""
    prefix = taken.root.relative_to(taken.copy).parts
    expected = {PurePosixPath(rel).parts for rel, _ in expected_files(rubric)}
    out = []
    for s in taken.skipped:
        parts = member_parts(s.path)
        if s.why is Skip.OWN_OUTPUT or (parts is not None and parts[:len(prefix)] == prefix
                                        and parts[len(prefix):] in expected):
            continue
        out.append(s)
    return out


def local_device(rubric) -> ProbeResult | None:
    """This machine's GPU as the grader's probe describes it (kept from an earlier grading, or probed
    now), when it shows an NVIDIA GPU at all; None otherwise (no CuPy start on a laptop)."""
    from grader.children.probe import nvidia_gpu_visible
    from grader.gpu.device import kept_probe

    if not nvidia_gpu_visible():
        return None
    device, _reason, _kept = kept_probe(rubric.timeouts.probe_s)
    return device if device is not None and device.ok else None


def arch_flags(rubric, device: ProbeResult | None) -> list[str]:
    """What the kernels are built for: this machine's GPU's architecture, else the rubric's."""
    from grader.compile import toolchain

    cc = device.capability if device is not None else None
    return toolchain.nvcc_arch_flags(cc, rubric.arch_without_device)


def gpu_line(rubric, device: ProbeResult | None) -> str:
    """The line above the table that says which GPU the kernels were built for ("" without one)."""
    from grader.compile import toolchain

    if device is None or not device.ok:
        return ""
    cc = device.cc or [0, 0]
    return (f"GPU: {device.name} (CC {cc[0]}.{cc[1]}): kernels built for "
            f"{toolchain.target_arch(arch_flags(rubric, device))}, as run_local.py builds them on this GPU")


def run_checks(submission: Path, rubric, compile_kernels: bool = True, device: ProbeResult | None = None) -> list[Row]:
    """Every row for one submission (a folder or a zip); never raises for its content. ``device``: this
    machine's GPU (the probe's description): the kernels are built for its architecture, as
    run_local.py builds them here; None: for the rubric's ``arch_without_device``."""
    from grader.compile import toolchain
    from grader.compile.intake import intake

    with tempfile.TemporaryDirectory(prefix="grader-check-") as tmp:
        work = Path(tmp)
        taken = intake(submission, work / "submission", markers=[st.file for st in rubric.stages])
        if taken.refused:
            return [Row(Mark.FIX, "submission", taken.refusal)]
        rows = [Row(Mark.FIX, "submission", f"left out (the grader would not read it): {s.message()}")
                for s in _not_expected(taken, rubric)][:MAX_SKIPPED]
        rows += layout(taken, rubric)  # an expected file left out is said on its own row
        nvcc = toolchain.find_nvcc() if compile_kernels else None
        why_not = ("not compiled (--no-compile)" if not compile_kernels else
                   "" if nvcc is not None and nvcc.path else
                   f"not compiled: no CUDA compiler found ({(nvcc.reason if nvcc is not None else '') or 'nvcc'})")
        rows += kernels(taken, rubric, work / "build", nvcc, arch_flags(rubric, device), why_not)
        rows += answers(taken, rubric)
        rows += report(taken, rubric)
    return rows


def print_table(rows: list[Row], out: TextIO, details: bool = False) -> int:
    """The table; a row's lines (each value read back, each citation) under a FIX row always, under the
    other rows only with ``details``, so that a row to fix is not buried. Returns the lines left out."""
    width = min(40, max((len(r.what) for r in rows), default=10))
    hidden = 0
    for r in rows:
        print(f"{r.mark.value:<5} {r.what:<{width}}  {r.detail}", file=out)
        if r.mark is not Mark.FIX and not details:
            hidden += len(r.lines)
            continue
        for line in r.lines:
            print(f"{'':<5} {'':<{width}}    {line}", file=out)
    return hidden


def check_command(args: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        from grader.rubric.load import load_rubric

        rubric = load_rubric(args.rubric)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    sub = Path(args.submission)
    if not os.path.lexists(sub):
        print(f"error: {sub} does not exist (give your submission folder, or a zip of it)", file=sys.stderr)
        return EXIT_USAGE
    try:
        device = local_device(rubric) if not args.no_compile else None
        rows = run_checks(sub, rubric, compile_kernels=not args.no_compile, device=device)
    except Exception:  # the check's own bug: said in one line, the traceback only on request
        print(f"error: the check itself failed (please report it): {sys.exc_info()[1]!r}", file=sys.stderr)
        if os.environ.get("GRADER_DEBUG"):
            traceback.print_exc()
        return EXIT_INTERNAL
    fix = sum(r.mark is Mark.FIX for r in rows)
    took = time.monotonic() - started
    try:
        if line := gpu_line(rubric, device):
            print(line + "\n", file=sys.stdout)
        hidden = print_table(rows, sys.stdout, details=args.details)
        if hidden:
            print(f"\n({hidden} more lines, each value as read and each citation of the rows above: "
                  "--details shows them)")
        if fix:
            names = ", ".join(r.what for r in rows if r.mark is Mark.FIX)
            print(f"\n{fix} to fix (rows marked FIX: {names}); checked in {took:.1f} s. No scores here: "
                  "grade on a GPU for those.")
        else:
            info = sum(r.mark is Mark.INFO for r in rows)
            optional = f" ({info} optional part{'s' if info != 1 else ''} left out: rows marked info)" if info else ""
            print(f"\nall well-formed{optional}; checked in {took:.1f} s. No scores here: grade on a GPU for those "
                  "(python grader/run_local.py SUBMISSION).")
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head`: the reader has seen enough
        sys.stdout = open(os.devnull, "w")  # so the interpreter's final flush stays quiet
    return EXIT_FIX if fix else EXIT_OK


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("submission", nargs="?", default=".", help="your submission: a folder or a zip of one "
                   "(default: the current folder)")
    p.add_argument("--rubric", default=str(DEFAULT_RUBRIC), help="rubric file (default: %(default)s)")
    p.add_argument("--no-compile", action="store_true", help="do not compile the kernels (faster, checks less)")
    p.add_argument("--details", action="store_true", help="under every row, each value as read and each "
                   "citation (by default only under the rows marked FIX)")
    p.set_defaults(func=check_command)
