"""Build the occupancy program (occ.cu): a cubin per register cap, the default cubin, the host program.

Every build is :mod:`grader.compile.student`'s guarded compile, with the build's own flags (a
``-DREGCAP=N`` can change what the source includes, so each build's includes are checked with
its flags). Each build has its own copy of the program's folder, so no build's folder holds another's
outputs (a compile's reuse key, grader/compile/reuse.py, holds every file of its folder, and a neighbour's
half-written cubin would change it). They run in parallel: on a pool of their own (:func:`build_all`), or
submitted to the caller's (:func:`start_all`: the pipeline starts them beside the stages' compiles).
Nothing here raises for the student's mistakes.
"""
from __future__ import annotations

import struct
import time
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from grader.compile import toolchain
from grader.compile.cubin import CubinFormatError
from grader.compile.ptxas import name_hint
from grader.compile.resources import add_spills, cubin_kernels
from grader.compile.reuse import listing_store
from grader.compile.sass import dump_sass
from grader.compile.student import CompileStatus, Deadline, Fence, compile_student, prepare_scratch
from grader.evidence.compile import KernelResources
from grader.evidence.tools import Tool
from grader.model import ProcRecord
from grader.occupancy.variants import program_defines
from grader.rubric.occupancy import OccupancyConfig
from grader.untrusted.quote import fence_block, quote_code

BUILD_OUTPUT_LIMIT = 64_000  # bytes of compiler output kept per stream


@dataclass
class Build:
    label: str  # "default", "r255", ..., "exe"
    cap: int | None
    output: Path
    proc: ProcRecord | None = None
    ok: bool = False
    problem: str = ""
    kernels: dict[str, KernelResources] = field(default_factory=dict)


def nvcc_flags(arch_flags: list[str], *, cubin: bool, cap: int | None = None) -> list[str]:
    """The flags of one build (source and output are added by the guarded compile)."""
    flags = ["-cubin", *arch_flags, "-O3", "-Xptxas", "-v"] if cubin else ["-O2", *arch_flags]
    if cap is not None:
        flags += [f"-maxrregcount={cap}", f"-DREGCAP={cap}"]
    return flags


def trim(text: str, limit: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def _compile(build: Build, nvcc: Tool, scratch, flags: list[str], timeout_s: float, file: str,
             need: tuple[str, ...], fence: Fence | None, cuobjdump: Tool | None = None,
             deadline: Deadline | None = None) -> Build:
    record = compile_student(nvcc, scratch, build.output.name, flags, timeout_s=timeout_s,
                             output_limit=BUILD_OUTPUT_LIMIT, fence=fence, deadline=deadline)
    build.proc = record.proc
    what = f"{file} (-maxrregcount={build.cap})" if build.cap is not None else file
    if record.status is CompileStatus.REFUSED:
        build.problem = f"{what} was not compiled: {record.problem}"
        return build
    if record.status is not CompileStatus.OK:
        proc = record.proc
        detail = fence_block(proc.stderr or proc.stdout, 1500) if proc is not None else "\n" + record.problem
        brief = proc.brief() if proc is not None else "did not run"
        build.problem = f"{what} did not compile: nvcc {brief}:{detail}"
        return build
    if not need:  # the host program: nothing read from it here
        build.ok = True
        return build
    # The resources come from the cubin (and the spills from its SASS), never from what the compiler
    # printed: a #pragma message can print lines identical to ptxas -v's (grader/compile/resources.py).
    try:
        build.kernels = cubin_kernels(build.output.read_bytes())
    except (OSError, CubinFormatError, IndexError, struct.error) as exc:
        build.problem = f"{what}: the compiled cubin could not be read ({exc})"
        return build
    missing = [k for k in need if k not in build.kernels]
    if missing:
        found = list(build.kernels)
        hint = "".join(name_hint(m, found) for m in missing)
        build.problem = (f"{file} has no kernel named " + ", ".join(f"`{m}`" for m in missing)
                         + f"; found: {', '.join(quote_code(n) for n in found[:10]) or 'no kernels'}{hint}")
        return build
    if any(not build.kernels[k].spills_read for k in need):
        sass = dump_sass(str(build.output), cuobjdump or toolchain.find_cuobjdump(),
                         store=None if fence is None else listing_store(fence))
        if not sass.available:
            build.problem = f"{what}: its spills could not be read from the SASS ({sass.reason})"
            return build
        for k in need:
            add_spills(build.kernels[k], sass.local_bytes)
        if unread := [k for k in need if not build.kernels[k].spills_read]:
            build.problem = f"{what}: the SASS has no function {', '.join(quote_code(k) for k in unread)}"
            return build
    build.ok = True
    return build


def _plan(cfg: OccupancyConfig, arch_flags: list[str], work: Path,
          with_gpu: bool) -> dict[str, tuple[Build, list[str], tuple[str, ...]]]:
    """Every build of the program: label -> (the Build to fill, its nvcc flags, the kernels it must hold).
    Each build's output goes into a folder of its own, ``work/build_<label>`` (as deep as a stage's build
    folder, so the same parents are opened to the compiling user: grader.compile.student.hand_over)."""
    prog = cfg.program
    jobs: dict[str, tuple[Build, list[str], tuple[str, ...]]] = {}
    for cap in cfg.ex6.register_caps:
        b = Build(f"r{cap}", cap, work / f"build_r{cap}" / f"occ_r{cap}.cubin")
        jobs[b.label] = (b, nvcc_flags(arch_flags, cubin=True, cap=cap), (prog.heavy_kernel,))
    if with_gpu:
        b = Build("default", None, work / "build_default" / "occ_default.cubin")
        jobs[b.label] = (b, nvcc_flags(arch_flags, cubin=True), (prog.work_kernel,))
        b = Build("exe", None, work / "build_exe" / "occ")
        jobs[b.label] = (b, nvcc_flags(arch_flags, cubin=False) + program_defines(cfg), ())
    return jobs


def start_all(src: Path, cfg: OccupancyConfig, nvcc: Tool, arch_flags: list[str], work: Path,
              timeout_s: float, with_gpu: bool, pool: Executor, user: str | None = None,
              fence: Fence | None = None, cuobjdump: Tool | None = None,
              deadline: Deadline | None = None) -> dict[str, Future[Build]]:
    """Copy the program's folder for each build (now), then submit every build to ``pool`` and return
    at once: the pipeline starts them beside the stages' compiles (grader/pipeline.py:
    compile_stages), on one pool bounded by the CPU count. A refused copy (an ``#include`` that
    reaches outside) fails its build with the refusal; those futures are already done."""
    jobs = _plan(cfg, arch_flags, work, with_gpu)
    futures: dict[str, Future[Build]] = {}
    # The host program first: the longest build, so on a busy pool it is not the last to start.
    for label in sorted(jobs, key=lambda lb: lb != "exe"):
        b, flags, need = jobs[label]
        scratch, problem = prepare_scratch(src, b.output.parent, cfg.program_file, user)
        if scratch is None:
            b.problem = f"{cfg.program_file} was not compiled: {problem}"
            futures[label] = Future()
            futures[label].set_result(b)
        else:
            futures[label] = pool.submit(_compile, b, nvcc, scratch, flags, timeout_s, cfg.program_file, need, fence,
                                         cuobjdump, deadline)
    return {label: futures[label] for label in jobs}


def build_all(src: Path, cfg: OccupancyConfig, nvcc: Tool, arch_flags: list[str], work: Path,
              timeout_s: float, with_gpu: bool, user: str | None = None,
              fence: Fence | None = None, cuobjdump: Tool | None = None) -> dict[str, Build]:
    """Compile the program: a cubin per register cap (always), plus the default cubin and the host
    program when there is a GPU to run them on. In parallel, on a pool of its own; never raises."""
    with ThreadPoolExecutor(max_workers=len(cfg.ex6.register_caps) + 2) as pool:
        futures = start_all(src, cfg, nvcc, arch_flags, work, timeout_s, with_gpu, pool, user, fence, cuobjdump)
        return {label: f.result() for label, f in futures.items()}


@dataclass
class Prebuilt:
    """The program's builds, made before the occupancy step (beside the stages' compiles)."""

    src: Path  # the program file they were built from
    builds: dict[str, Build]
    seconds: float  # from the first submission to the last build's end


@dataclass
class PendingBuilds:
    src: Path
    futures: dict[str, Future[Build]]
    started: float = field(default_factory=time.monotonic)
    ended: float = 0.0  # when the last build ended (the caller may wait for them much later)

    def __post_init__(self) -> None:
        for f in self.futures.values():
            f.add_done_callback(self._done)

    def _done(self, _future: Future[Build]) -> None:
        self.ended = max(self.ended, time.monotonic())

    def wait(self) -> Prebuilt | None:
        """The builds; None if the grader failed while making them (the occupancy step then builds
        again, and a bug that repeats becomes its items' "not evaluated")."""
        try:
            builds = {label: f.result() for label, f in self.futures.items()}
        except Exception:
            return None
        return Prebuilt(self.src, builds, max(self.ended, self.started) - self.started)


def ptxas_measurements(builds: dict[str, Build], cfg: OccupancyConfig) -> tuple[dict | None, str | None]:
    """(``{cap: heavy's KernelResources}``, None) or (None, the first build's problem)."""
    out = {}
    for cap in cfg.ex6.register_caps:
        b = builds.get(f"r{cap}")
        if b is None or not b.ok:
            return None, (b.problem if b else f"-maxrregcount={cap} was not built")
        out[cap] = b.kernels[cfg.program.heavy_kernel]
    return out, None
