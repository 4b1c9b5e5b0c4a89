"""The one guarded way to compile a student's source (stages, occ.cu, cubins, host programs).

Every build goes through :func:`prepare_scratch` once per source and :func:`compile_student`
once per output:

1. the plain files of the source's folder (no links, no subfolders, ordinary names, each at most
   :data:`~grader.compile.locate.MAX_SOURCE_BYTES`) are copied into a fresh build folder; the source
   and the files its ``#include`` lines reach are read by the first-pass check
   (:func:`grader.compile.includes.scan_includes`), and a file no build reads is left out (a note);
2. as root, the folder is handed to the unprivileged student user (``GRADER_STUDENT_USER``), and
   nvcc runs as that user, so it cannot read the grader, the rubric or the solutions whatever the
   source includes;
3. without bubblewrap (the weak fence, or no fence), nvcc's dependency listing (``-M``) with the
   build's own flags first says which files the compile would read; one outside the build folder
   and the include folders refuses the build, naming the path and echoing nothing of it;
4. the compile itself, with ``-MD`` so the files it really read are checked (again); its output is
   withheld, and the build refused, if one of them is outside, or if it failed with a diagnostic
   pointing into a file outside.

Inside bwrap step 3 is skipped: the compile sees only the build folder, the system and the
toolchain (grader.sandbox.fence), so it cannot read the grader, the rubric, the solutions or another
submission whatever it includes, and step 4 still refuses a build that read any file outside the
allowed folders and withholds all it printed. The listing is a second nvcc run over every
header, a large share of each stage's compile step (docs/measurements/2026-11-30-h200-speed-run21-23.md).

Every process runs through :func:`run_guarded`, the one place where the time and output limits
and the sandbox ``fence`` (:class:`grader.sandbox.fence.Fence`: bubblewrap, memory and process limits)
are applied; the callers thread ``fence`` down to it.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from grader.compile import reuse
from grader.compile.includes import (
    diagnostic_paths,
    header_dirs,
    outside_dependencies,
    parse_make_deps,
    scan_includes,
)
from grader.compile.locate import MAX_SOURCE_BYTES
from grader.evidence.tools import Tool
from grader.model import ProcRecord
from grader.sandbox import guard as sandbox
from grader.sandbox.fence import Fence, is_visible
from grader.sandbox.guard import STUDENT_USER_VAR, run_guarded, student_user
from grader.sandbox.process import usable_cpus
from grader.untrusted.quote import fence_block, quote_code, show_name
from grader.untrusted.safe_copy import remove_tree

__all__ = ["STUDENT_USER_VAR", "CompileRecord", "CompileStatus", "Deadline", "Fence", "Scratch", "compile_student",
           "compile_workers", "hand_over", "prepare_scratch", "student_user"]

DEPENDENCY_TIMEOUT_S = 60.0  # preprocessing only; a source that takes longer is reading something it should not
# Names a build folder may hold: what a header is called. Anything else (spaces, newlines, shell or
# make metacharacters) is left out of the copy, so nvcc's dependency listing cannot be confused.
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")
_WITHHELD = "[output withheld: the compile read a file outside the submission]"
# Files the first-pass text check reads: sources and headers. Others (answers.yaml, notes) may have
# `# include ...` comments; if one is #included anyway, the dependency listing still checks it.
_SOURCE_SUFFIXES = frozenset({".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx", ".c", ".cc", ".cpp", ".cxx", ".inc",
                              ".inl", ".ipp", ".tcc", ".tpp"})

def compile_workers() -> int:
    """How many guarded compiles may run at once: one per CPU this process may use. Each compile is a
    chain of processes (nvcc's dependency listing, then nvcc, whose cicc, ptxas and host compiler run
    one after another), so one per core keeps every core busy without oversubscribing them; every
    compile keeps its own fence, limits and scratch folder, so running them side by side changes
    nothing of what each one sees."""
    return usable_cpus()


@dataclass(frozen=True)
class Deadline:
    """When every compile of one submission must have ended (``settings.timeouts.static_total_s``,
    counted from the grading's start). Each compile's own limit is cut to what is left, and a compile
    that would start after it does not run, so a source that makes every compile slow (a header that
    includes itself 40 deep) costs this once, not once per build."""

    at: float  # time.monotonic() of the deadline
    total_s: float

    @classmethod
    def after(cls, start: float, total_s: float) -> Deadline:
        return cls(start + total_s, total_s)

    def left(self) -> float:
        return self.at - time.monotonic()

    def cut(self, limit_s: float) -> float:
        """A compile's own limit cut to what is left, that rest rounded up to a tenth of a second (never below
        0.1 s): a compile stopped at it has run to the deadline, so ``left()`` is spent when it ends and its
        message names the setting. Rounded down, it could end a few milliseconds early, saying only that it
        timed out after a limit no setting names."""
        return min(limit_s, max(0.1, math.ceil(self.left() * 10) / 10))

    def message(self) -> str:
        return (f"the submission's compiles together reached their limit of {self.total_s:g} s "
                "(settings.timeouts.static_total_s)")


class CompileStatus(str, Enum):
    OK = "ok"
    REFUSED = "refused"  # an #include reaches outside the submission; nothing of it is shown
    FAILED = "failed"  # nvcc ran and failed, timed out or wrote no output


@dataclass
class Scratch:
    """A build folder holding a copy of the source's folder, handed to the student user."""

    folder: Path
    source: str  # the file compiled, by its name inside ``folder``
    display: str  # how feedback names it, e.g. "gemm/naive.cu"
    user: str | None = None  # who nvcc runs as (None: the grader's own user)
    skipped: list[str] = field(default_factory=list)  # files of the folder not copied, and why
    unread: list[str] = field(default_factory=list)  # files no build reads whose #include the first pass refuses


@dataclass
class CompileRecord:
    status: CompileStatus
    problem: str = ""  # REFUSED: the refusal; FAILED: how nvcc ended and its output (safe to show)
    proc: ProcRecord | None = None  # the compile, or the dependency run when that is where it stopped
    output: Path | None = None
    dependencies: list[str] = field(default_factory=list)  # what the compile read, as nvcc listed it
    seconds: dict[str, float] = field(default_factory=dict)  # "deps": the -M run, "nvcc": the compile

    @property
    def ok(self) -> bool:
        return self.status is CompileStatus.OK

    @property
    def report(self) -> str:
        """All the compiler printed (ptxas -v reports go to stderr or stdout, by version)."""
        return "" if self.proc is None else self.proc.stderr + "\n" + self.proc.stdout


def hand_over(folder: Path, user: str | None) -> str | None:
    """As root, give the build folder to the unprivileged user nvcc will run as; returns the
    user to run as (None when not root or no user is configured)."""
    if not user or os.geteuid() != 0:
        return None
    import pwd

    ids = pwd.getpwnam(user)
    for path in [folder, *folder.rglob("*")]:
        os.chown(path, ids.pw_uid, ids.pw_gid)
    # The user must be able to reach the folder: the grader's own stage, work and output folders
    # get o+x (search only: their other files stay unlistable and are read by root).
    for parent in list(folder.parents)[:3]:
        mode = parent.stat().st_mode
        if not mode & 0o001:
            os.chmod(parent, mode | 0o001)
    return user


def prepare_scratch(source: Path, folder: Path, display: str, user: str | None = None) -> tuple[Scratch | None, str]:
    """Copy ``source``'s folder into a fresh ``folder`` and check its ``#include`` lines.

    Returns (scratch, "") or (None, why the build is refused). ``display`` names the source in
    messages; a header is named by its path beside it (``gemm/helpers.h``).
    """
    if folder.exists():
        remove_tree(folder)
    folder.mkdir(parents=True)
    scratch = Scratch(folder, source.name, display)
    prefix = display[: -len(source.name)] if display.endswith(source.name) else ""
    for entry in sorted(source.parent.iterdir()):
        if entry.is_symlink() or not entry.is_file():
            continue
        if not _PLAIN_NAME.match(entry.name):
            scratch.skipped.append(f"{quote_code(prefix + entry.name, 200)}: not a plain file name")
            continue
        try:
            if entry.stat().st_size > MAX_SOURCE_BYTES:
                scratch.skipped.append(f"{prefix}{entry.name}: over {MAX_SOURCE_BYTES:,} bytes")
                continue
            shutil.copyfile(entry, folder / entry.name, follow_symlinks=False)
        except OSError as exc:
            scratch.skipped.append(f"{prefix}{entry.name}: {exc.strerror or exc}")
    if not (folder / source.name).is_file():
        return None, f"{display} could not be copied for compiling ({'; '.join(scratch.skipped) or 'unreadable'})"
    # The first pass reads the files a build can read: the source, and what its #include lines reach
    # in the folder, transitively (every include it allows is a literal name, so nothing else can be
    # reached). Another file in the folder (a scratch test, an old version) is judged by no build: a
    # problem in it is a note, and it is left out of the copy.
    main = folder / source.name
    reached, queue = {main.name}, [main.name]
    while queue:
        current = folder / queue.pop(0)
        problem, targets = scan_includes(current.read_bytes(), prefix + current.name)
        if problem and (current == main or current.suffix.lower() in _SOURCE_SUFFIXES):
            return None, problem  # other files (notes, answers) #included anyway: the dependency check's
        for target in (os.path.normpath(t) for t in targets):  # "./x.h" is x.h
            if "/" not in target and target not in reached and (folder / target).is_file():
                reached.add(target)
                queue.append(target)
    for other in sorted(p for p in folder.iterdir() if p.name not in reached and p.suffix.lower() in _SOURCE_SUFFIXES):
        problem, _targets = scan_includes(other.read_bytes(), prefix + other.name)
        if problem:
            scratch.unread.append(f"{show_name(prefix + other.name)} is read by no build of {display}, so it was "
                                  f"left out of it; on its own it would be refused: {problem}")
            other.unlink()
    scratch.user = hand_over(folder, user)
    return scratch, ""


def _read_deps(path: Path) -> list[str] | None:
    if path.is_symlink() or not path.is_file():
        return None
    try:
        return parse_make_deps(path.read_text(errors="replace"))
    except OSError:
        return None


PATH_SHOWN = 400  # characters of a refused include's path shown in its message


def _refusal(scratch: Scratch, bad: list[tuple[str, str]]) -> str:
    listed, real = bad[0]
    # Whole paths (up to PATH_SHOWN characters): a deep folder must still say which file it is.
    shown = (quote_code(listed, PATH_SHOWN) if os.path.normpath(listed) == real
             else f"{quote_code(listed, PATH_SHOWN)} (that is, {quote_code(real, PATH_SHOWN)})")
    more = f" and {len(bad) - 1} more file(s) outside" if len(bad) > 1 else ""
    return (f"{scratch.display}: the compile would read {shown}{more}, which is outside your submission's folder "
            "and the CUDA and system include folders; only system headers and files next to "
            f"{scratch.display} may be included")


def _withhold(proc: ProcRecord) -> ProcRecord:
    proc.stdout, proc.stderr = "", _WITHHELD
    return proc


def _refused_by_diagnostics(proc: ProcRecord, scratch: Scratch, allowed: Sequence[str],
                            seconds: dict[str, float]) -> CompileRecord | None:
    """A failed nvcc run that listed nothing: refused (its output withheld) when its diagnostics
    point into a file outside the build folder and the include folders."""
    bad = outside_dependencies(diagnostic_paths(proc.stdout + "\n" + proc.stderr), scratch.folder, allowed)
    if not bad:
        return None
    return CompileRecord(CompileStatus.REFUSED, _refusal(scratch, bad), _withhold(proc), seconds=seconds)


def compile_student(nvcc: Tool, scratch: Scratch, output: str, flags: Sequence[str], *, timeout_s: float,
                    output_limit: int, fence: Fence | None = None, deadline: Deadline | None = None) -> CompileRecord:
    """Compile ``scratch.source`` to ``scratch.folder / output`` with ``flags`` (arch, -cubin, caps...).

    Never raises for the student's mistakes: a refused include or a failed compile is the record's
    status. The record's process output is safe to show the student. ``deadline``: the submission's
    compiles share it; past it this compile fails saying so.
    """
    if deadline is not None and deadline.left() <= 0:
        return CompileRecord(CompileStatus.FAILED, f"not compiled: {deadline.message()}")
    kept = _reusable(nvcc, scratch, output, flags, output_limit, fence)
    record = _reused(kept, scratch, timeout_s, deadline) if kept is not None else None
    if record is None:
        record = _compile_student(nvcc, scratch, output, flags, timeout_s=timeout_s, output_limit=output_limit,
                                  fence=fence, deadline=deadline)
        if kept is not None:
            _keep(kept, record, scratch)
    if deadline is not None and record.status is CompileStatus.FAILED and deadline.left() <= 0:
        record.problem = f"stopped: {deadline.message()}; {record.problem}"
    return record


@dataclass(frozen=True)
class _Kept:
    """Where this compile may be reused from or kept (grader.compile.reuse): the store, the entry's name,
    and the build folder's files before the compile."""

    store: reuse.Store
    name: str
    was: dict[str, tuple[int, int]]
    outputs: tuple[str, ...]  # what the compile writes: its output and its dependency listing


def _compile_command(nvcc: Tool, scratch: Scratch, output: str, flags: Sequence[str]) -> list[str]:
    assert nvcc.path is not None
    return [nvcc.path, *flags, *nvcc.include_flags(), "-MD", "-MF", f"{Path(output).name}.d", "-o", output,
            scratch.source]


def _reusable(nvcc: Tool, scratch: Scratch, output: str, flags: Sequence[str], output_limit: int,
              fence: Fence | None) -> _Kept | None:
    """The reuse entry for this compile when reuse is on (GRADER_COMPILE_REUSE) and the compile runs inside
    bubblewrap, whose fence does not show the store's folder; else None."""
    store = reuse.configured()
    if store is None or fence is None or nvcc.path is None or not sandbox.confines(fence, scratch.user):
        return None
    env = {**os.environ, **nvcc.env}
    if is_visible(store.folder, fence, env):
        return None
    was = reuse.before(scratch.folder)
    name = reuse.key(nvcc, scratch.folder, [scratch.display, *_compile_command(nvcc, scratch, output, flags)], env,
                     fence, output_limit, scratch.user)
    outputs = (Path(output).name, f"{Path(output).name}.d")
    return None if name is None or was is None else _Kept(store, name, was, outputs)


def _reused(kept: _Kept, scratch: Scratch, timeout_s: float, deadline: Deadline | None) -> CompileRecord | None:
    """The stored compile's record, its files written into the build folder, when each of its processes
    took less than the limit it would run under now; else None (compile for real)."""
    hit = reuse.load(kept.store, kept.name)
    if hit is None:
        return None
    limit_s = timeout_s if deadline is None else deadline.cut(timeout_s)
    try:
        data = hit.record
        proc = reuse.proc_from_json(data["proc"])
        status = CompileStatus(data["status"])
        output = data["output"]
        record = CompileRecord(status, str(data["problem"]), proc,
                               None if output is None else scratch.folder / str(output),
                               [str(d) for d in data["dependencies"]],
                               {str(k): float(v) for k, v in data["seconds"].items()})
    except (KeyError, TypeError, ValueError):
        return None
    if proc.wall_s >= limit_s:
        return None
    owner = None
    if scratch.user and os.geteuid() == 0:
        import pwd

        ids = pwd.getpwnam(scratch.user)
        owner = (ids.pw_uid, ids.pw_gid)
    if not reuse.restore(hit, scratch.folder, owner) or (record.output is not None and not record.output.is_file()):
        return None
    proc.timeout_s = limit_s
    return record


def _keep(kept: _Kept, record: CompileRecord, scratch: Scratch) -> None:
    """Store a compile that ended by itself (not refused, timed out, killed or stopped by a limit)."""
    proc = record.proc
    if (record.status is CompileStatus.REFUSED or proc is None or proc.returncode is None or proc.returncode < 0
            or proc.timed_out or proc.limit is not None or not record.dependencies):
        return
    data = {"status": record.status.value, "problem": record.problem, "proc": reuse.proc_to_json(proc),
            "output": None if record.output is None else record.output.name, "dependencies": record.dependencies,
            "seconds": record.seconds}
    reuse.save(kept.store, kept.name, data, scratch.folder, kept.was, record.dependencies, kept.outputs)


def _compile_student(nvcc: Tool, scratch: Scratch, output: str, flags: Sequence[str], *, timeout_s: float,
                     output_limit: int, fence: Fence | None, deadline: Deadline | None) -> CompileRecord:
    assert nvcc.path is not None
    folder, allowed = scratch.folder, header_dirs(nvcc)
    env = {**os.environ, **nvcc.env}
    base = [nvcc.path, *flags, *nvcc.include_flags()]
    label = Path(output).name

    def run(cmd: list[str], limit_s: float) -> ProcRecord:
        if deadline is not None:
            limit_s = deadline.cut(limit_s)
        proc = run_guarded(cmd, cwd=folder, timeout_s=limit_s, output_limit=output_limit, user=scratch.user,
                           env=env, fence=fence)
        proc.command = [Path(cmd[0]).name, *cmd[1:]]
        return proc

    seconds: dict[str, float] = {}
    deps: list[str] = []
    if not sandbox.confines(fence, scratch.user):
        # 1. What the compile would read, with the same flags (a -D or an arch can change the answer).
        listing = folder / f"{label}.deps"
        pre = run([*base, "-M", "-MF", listing.name, scratch.source], min(timeout_s, DEPENDENCY_TIMEOUT_S))
        seconds["deps"] = round(pre.wall_s, 3)
        listed = _read_deps(listing) if pre.ok else None
        if listed is None:
            if refused := _refused_by_diagnostics(pre, scratch, allowed, seconds):
                return refused
            return CompileRecord(CompileStatus.FAILED, f"nvcc failed ({pre.brief()}):"
                                 + fence_block(pre.stderr or pre.stdout), pre, seconds=seconds)
        deps = listed
        bad = outside_dependencies(deps, folder, allowed)
        if bad:
            return CompileRecord(CompileStatus.REFUSED, _refusal(scratch, bad), pre, dependencies=deps,
                                 seconds=seconds)

    # 2. The compile, listing what it really read.
    target = folder / output
    target.unlink(missing_ok=True)
    read = folder / f"{label}.d"
    proc = run(_compile_command(nvcc, scratch, output, flags), timeout_s)  # the command reuse keys on
    seconds["nvcc"] = round(proc.wall_s, 3)
    listed = _read_deps(read)
    if listed is None and not proc.ok and (refused := _refused_by_diagnostics(proc, scratch, allowed, seconds)):
        return refused
    deps = listed or deps
    bad = outside_dependencies(deps, folder, allowed)
    if bad:
        return CompileRecord(CompileStatus.REFUSED, _refusal(scratch, bad), _withhold(proc), dependencies=deps,
                             seconds=seconds)
    if not proc.ok or not target.is_file():
        return CompileRecord(CompileStatus.FAILED, f"nvcc failed ({proc.brief()}):"
                             + fence_block(proc.stderr or proc.stdout), proc, dependencies=deps, seconds=seconds)
    return CompileRecord(CompileStatus.OK, "", proc, target, deps, seconds)
