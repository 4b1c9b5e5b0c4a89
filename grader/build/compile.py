"""Compile one stage's file to a cubin and read what the compiler says about it.

Returns a :class:`CompileResult`; a compile error, a missing file or a wrong
kernel name is data in that record, never an exception. The student's file is
copied, with the other plain files of its folder, into a fresh directory, so
nvcc sees only the submission.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from grader.run import sandbox
import re

from grader.build.cubin import CubinFormatError, kernel_param_sizes, read_int_array
from grader.build.ptxas import KernelResources, entry_names, parse_ptxas
from grader.model import ProcRecord
from grader.spec.rubric import Launch, Rubric, Stage

MAX_SOURCE_BYTES = 1 << 20  # a GEMM kernel is a few KB; anything near 1 MB is not one
# (const T* A, const T* B, float* C, int N): three 8-byte pointers and a 4-byte int.
CONTRACT_PARAM_SIZES = [8, 8, 8, 4]
_INCLUDE = re.compile(rb"^[ \t]*#[ \t]*include[ \t]*(.*)$", re.M)
MAX_THREADS_PER_BLOCK = 1024
MAX_DYNAMIC_SMEM = 227 * 1024  # Hopper's per-block opt-in limit


@dataclass
class CompileResult:
    stage: str
    ok: bool  # the cubin exists, holds the kernel, and its launch shape is usable
    problem: str = ""  # why not, in words for the student
    proc: ProcRecord | None = None
    cubin: str | None = None
    kernel: KernelResources | None = None
    found_kernels: list[str] = field(default_factory=list)
    launch: Launch | None = None
    launch_source: str = ""  # "declared in <file>" or "rubric default"
    notes: list[str] = field(default_factory=list)


def stage_source(submission: Path, stage: Stage) -> tuple[Path | None, str]:
    """Locate the stage's file in the submission, refusing what must not be compiled."""
    path = submission / stage.file
    if path.is_symlink():
        target = path.resolve()
        if submission.resolve() not in target.parents:
            return None, f"{stage.file} is a symbolic link to a file outside the submission"
    if not path.is_file():
        return None, f"file missing: expected {stage.file} in the submission"
    size = path.stat().st_size
    if size == 0:
        return None, f"{stage.file} is empty"
    if size > MAX_SOURCE_BYTES:
        return None, f"{stage.file} is {size:,} bytes; the limit is {MAX_SOURCE_BYTES:,}"
    return path, ""


def include_problem(source: bytes, name: str) -> str:
    """Why an #include in the student's file is refused, or ''.

    Only <system headers> and "files next to it" may be included: an absolute path or
    one with '..' could read the grader's or the solutions' files (and echo them in an
    error message), and a computed include (#include MACRO) hides where it points.
    """
    for m in _INCLUDE.finditer(source):
        target = m.group(1).strip()
        line = source[: m.start()].count(b"\n") + 1
        text = target.decode("utf-8", "replace")
        inner = re.match(rb'^(<[^>]*>|"[^"]*")', target)
        if not inner:
            return (f"{name}:{line}: `#include {text}` is not allowed: include a <header> or a "
                    '"file" next to it by its literal name')
        path = inner.group(1)[1:-1].decode("utf-8", "replace")
        if path.startswith("/") or ".." in Path(path).parts or "\\" in path:
            return (f"{name}:{line}: `#include {text}` is not allowed: only system headers and files "
                    "in your submission's own folder may be included")
    return ""


def _copy_folder(src_dir: Path, dest: Path) -> None:
    """Copy the plain files (no links, no subfolders) of the stage's folder."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in src_dir.iterdir():
        if entry.is_file() and not entry.is_symlink() and entry.stat().st_size <= MAX_SOURCE_BYTES:
            shutil.copyfile(entry, dest / entry.name)


def check_launch(values: list[int] | None, stage: Stage, sizes: list[int]) -> tuple[Launch | None, str]:
    """Validate a ``<kernel>_launch`` array; None values mean "use the rubric's default"."""
    if values is None:
        return stage.launch, ""
    sym = stage.launch_symbol
    if len(values) != 5:
        return None, f"{sym} has {len(values)} values; expected 5: {{blockDim.x, blockDim.y, BM, BN, smem bytes}}"
    bx, by, bm, bn, smem = values
    if bx <= 0 or by <= 0 or bx * by > MAX_THREADS_PER_BLOCK:
        return None, f"{sym}: block {bx} x {by} is not a valid block (1 to {MAX_THREADS_PER_BLOCK} threads)"
    if bm <= 0 or bn <= 0:
        return None, f"{sym}: tile {bm} x {bn} must be positive"
    if not 0 <= smem <= MAX_DYNAMIC_SMEM:
        return None, f"{sym}: {smem} bytes of dynamic shared memory (allowed 0 to {MAX_DYNAMIC_SMEM})"
    for n in sizes:
        if n % bm or n % bn:
            return None, (f"{sym}: tile BM={bm}, BN={bn} does not divide N={n}; the grader tests "
                          f"N in {sizes}, so choose tiles that divide all of them")
    return Launch((bx, by), (bm, bn), smem), ""


def _hand_over(folder: Path, user: str | None) -> str | None:
    """As root, give the build folder to the unprivileged user nvcc will run as."""
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


def compile_stage(stage: Stage, submission: Path, work: Path, nvcc, arch_flags: list[str],
                  rubric: Rubric, sizes: list[int], user: str | None = None) -> CompileResult:
    """Compile one stage. ``user``: as root, run nvcc as this unprivileged account (it then
    cannot read the grader, the rubric or the solutions, whatever the source includes)."""
    result = CompileResult(stage=stage.id, ok=False)
    src, problem = stage_source(submission, stage)
    if src is None:
        result.problem = problem
        return result
    if nvcc is None or getattr(nvcc, "path", None) is None:
        result.problem = "not evaluated: no CUDA compiler found (" + (getattr(nvcc, "reason", "") or "nvcc") + ")"
        return result
    problem = include_problem(src.read_bytes(), stage.file)
    if problem:
        result.problem = problem
        return result
    build = work / "build"
    if build.exists():
        shutil.rmtree(build)
    _copy_folder(src.parent, build)
    cubin = build / f"{stage.id}.cubin"
    cmd = [nvcc.path, "-cubin", *arch_flags, "-O3", "-Xptxas", "-v", "-lineinfo",
           *(f"-I{d}" for d in getattr(nvcc, "include_dirs", []) or []), "-o", str(cubin), src.name]
    env = dict(os.environ)
    env.update(getattr(nvcc, "env", {}) or {})
    proc = sandbox.run(cmd, timeout_s=rubric.timeouts.compile_s, cwd=str(build), env=env,
                       output_limit=rubric.output_limit_bytes, user=_hand_over(build, user))
    proc.command = [Path(cmd[0]).name, *cmd[1:]]
    result.proc = proc
    if not proc.ok or not cubin.is_file():
        tail = (proc.stderr or proc.stdout).strip()
        result.problem = f"nvcc failed ({proc.brief()}):\n{tail}"
        return result
    report = proc.stderr + "\n" + proc.stdout
    kernels = parse_ptxas(report)
    result.found_kernels = entry_names(report)
    result.cubin = str(cubin)
    if stage.kernel not in kernels:
        found = ", ".join(result.found_kernels) or "no kernels"
        hint = ""
        if any(stage.kernel in name for name in result.found_kernels):
            hint = f' (the name is C++-mangled: declare it extern "C" __global__)'
        result.problem = f"expected `{stage.kernel}` in {stage.file}; found: {found}{hint}"
        return result
    result.kernel = kernels[stage.kernel]
    data = cubin.read_bytes()
    try:
        sizes_found = kernel_param_sizes(data, stage.kernel)
    except CubinFormatError as exc:
        sizes_found = None
        result.notes.append(f"could not read the parameters of {stage.kernel} ({exc})")
    if sizes_found is not None and sizes_found != CONTRACT_PARAM_SIZES:
        ptype = "half" if stage.inputs == "fp16" else "float"
        result.problem = (f"`{stage.kernel}` has the wrong signature: its parameters take "
                          f"{sizes_found} bytes; expected (const {ptype}* A, const {ptype}* B, float* C, int N), "
                          f"i.e. {CONTRACT_PARAM_SIZES}")
        return result
    try:
        values = read_int_array(data, stage.launch_symbol)
    except CubinFormatError as exc:
        values = None
        result.notes.append(f"could not read {stage.launch_symbol} from the cubin ({exc}); using the default")
    launch, problem = check_launch(values, stage, sizes)
    if launch is None:
        result.problem = problem
        return result
    result.launch = launch
    result.launch_source = f"declared in {stage.file}" if values is not None else "rubric default (no launch array)"
    result.ok = True
    return result
