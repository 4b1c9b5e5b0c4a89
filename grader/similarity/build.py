"""Each stage's file compiled to a cubin and its kernel's SASS read, without a GPU.

The compile is the grading's own guarded compile (grader/compile/stage.py: compile_stage: a copy of
the stage's folder, the ``#include`` checks, nvcc in the sandbox's fence with the rubric's limits),
for the rubric's target without a device (``arch_without_device``): students' sources are hostile
here as in a grading. Equal files are compiled once (keyed by their bytes and the stage).
"""
from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from grader.compile.stage import compile_stage
from grader.compile.student import compile_workers
from grader.compile.toolchain import nvcc_arch_flags
from grader.evidence.rubric import Stage
from grader.evidence.tools import Tool
from grader.rubric.load import Rubric
from grader.sandbox import guard as sandbox
from grader.sandbox.fence import Fence
from grader.similarity.sass_tokens import kernel_instructions, run_length
from grader.untrusted.quote import quote_code


@dataclass(frozen=True)
class Sass:
    tokens: list[str] | None  # run-length abstracted instructions of the stage's kernel; None: see why
    why: str = ""


def file_key(stage: Stage, text: bytes) -> str:
    return stage.id + ":" + hashlib.sha256(text).hexdigest()


def _dump(cubin: str, cuobjdump: Tool, kernel: str, timeout_s: float) -> Sass:
    proc = sandbox.run([str(cuobjdump.path), "-sass", cubin], timeout_s=timeout_s, output_limit=8_000_000)
    if not proc.ok:
        return Sass(None, f"cuobjdump failed ({proc.brief()}): {quote_code(proc.stderr.strip(), 300)}")
    found = kernel_instructions(proc.stdout, kernel)
    if found is None:
        return Sass(None, f"no function `{kernel}` in the SASS")
    return Sass(run_length(found))


def compile_all(jobs: dict[str, tuple[Stage, Path]], rubric: Rubric, work: Path, nvcc: Tool | None,
                cuobjdump: Tool | None) -> dict[str, Sass]:
    """{key: Sass} for every (stage, submission folder) of ``jobs`` (key: :func:`file_key`)."""
    if nvcc is None or nvcc.path is None:
        return {k: Sass(None, "not compiled: no CUDA compiler (nvcc) found") for k in jobs}
    if cuobjdump is None or cuobjdump.path is None:
        return {k: Sass(None, "not compiled: no cuobjdump found (pip install -e '.[sass]')") for k in jobs}
    arch = nvcc_arch_flags(None, rubric.arch_without_device)
    sizes = list(rubric.correctness_sizes)

    def one(item: tuple[str, tuple[Stage, Path]]) -> tuple[str, Sass]:
        key, (stage, root) = item
        folder = work / key.replace(":", "-")[:80]
        folder.mkdir(parents=True, exist_ok=True)
        result = compile_stage(stage, root, folder, nvcc, arch, rubric, sizes + [stage.bench.n],
                               fence=Fence(scratch=folder / "build"))
        if result.cubin is None:
            first = (result.problem or "did not compile").splitlines()[0] if result.problem else "did not compile"
            return key, Sass(None, f"not compiled: {first}")
        return key, _dump(result.cubin, cuobjdump, stage.kernel, rubric.timeouts.compile_s)

    with ThreadPoolExecutor(max_workers=max(1, compile_workers())) as pool:
        return dict(pool.map(one, jobs.items()))
