"""compute-sanitizer evidence: shared-memory races (racecheck) and bad accesses (memcheck).

Numbers alone can miss a race: a tiled kernel missing its second __syncthreads()
can pass the numeric check at N = 256 while racecheck reports the hazard
with source lines (FACTS.md). So every stage that uses shared memory is run once under
racecheck at a small size, and a stage that fails or crashes is run once under memcheck
so its feedback can name the first bad access. The parser is pure; the runs are children
with time limits, one per stage, all run side by side (grader/gpu/stages.py: sanitize runs
racecheck's and memcheck's at once too).

The child under the tool is ``grader.children sanitize``: it launches the kernel through the CUDA
driver alone (ctypes, grader/children/driver.py), with no CuPy. compute-sanitizer intercepts
every module a process loads, and a child importing CuPy loads cuBLAS, cuRAND and NVRTC and runs
CuPy's own kernels to build its inputs: under racecheck that would be most of the run's time.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from grader.children.protocol import SANITIZE
from grader.evidence.protocol import Kernel, LaunchResult, SanitizeSpec
from grader.sandbox.fence import Fence
from grader.sandbox.launch import ChildResult, launch
from grader.sandbox.process import Control
from grader.untrusted.quote import quote_code

_HEADER = re.compile(r"^========= (?! )(?!ERROR SUMMARY)(?!COMPUTE-SANITIZER)(.+?)\s*$")
_DETAIL = re.compile(r"^=========\s{2,}(.+?)\s*$")
_WHERE = re.compile(r"(?:at|access at) (\w+)\+0x[0-9a-fA-F]+(?: in (\S+?):(\d+))?")
ERROR_EXIT = 17  # --error-exitcode: the sanitizer found something


@dataclass
class Finding:
    summary: str  # "Race reported between Write access at ..." / "Invalid __global__ write of size 4 bytes"
    details: list[str] = field(default_factory=list)
    locations: list[tuple[str, str, int | None]] = field(default_factory=list)  # (function, file, line)

    def brief(self) -> str:
        places = ", ".join(f"{Path(f).name}:{ln}" if f else fn for fn, f, ln in self.locations[:2])
        return self.summary.split(" at ")[0] + (f" ({places})" if places else "")


def parse_sanitizer(text: str) -> list[Finding]:
    """Findings in compute-sanitizer's output, in order (pure)."""
    findings: list[Finding] = []
    for line in text.splitlines():
        head = _HEADER.match(line)
        if head and not head.group(1).startswith(("Program hit", "Saved host backtrace", "Target application")):
            findings.append(Finding(head.group(1)))
        elif findings and (detail := _DETAIL.match(line)):
            findings[-1].details.append(detail.group(1))
        else:
            continue
        for m in _WHERE.finditer(line):
            findings[-1].locations.append((m.group(1), m.group(2) or "", int(m.group(3)) if m.group(3) else None))
    return [f for f in findings if f.summary.split()[0] in ("Error:", "Invalid", "Race", "Warning:", "Barrier",
                                                            "Uninitialized", "Misaligned", "Out-of-range")]


def race_message(kernel: str, findings: list[Finding]) -> str:
    f = findings[0]
    accesses = re.findall(r"(Write|Read) access at", " ".join([f.summary, *f.details]))
    where = list(dict.fromkeys(f"{acc.lower()} at {Path(fl).name}:{ln}"
                               for acc, (_fn, fl, ln) in zip(accesses, f.locations) if fl))
    more = f" ({len(findings) - 1} more)" if len(findings) > 1 else ""
    return (f"shared-memory race in {kernel}: " + (", ".join(where) if where else quote_code(f.summary, 300))
            + f"{more}. Numbers can come out right by luck; a race makes them depend on timing. "
            "Look for a missing __syncthreads() between writing a shared tile and reading it, or before "
            "overwriting one that other threads still read.")


@dataclass
class SanitizerRun:
    tool: str
    stage: str
    findings: list[Finding] = field(default_factory=list)
    reason: str = ""  # why there is no verdict ("" when the run finished)
    proc: object = None
    launch_failed: bool = False  # the child's launch of the kernel failed (no finding explains it)
    rerun: bool = False  # a gated run that could not be judged as it was: run it again ungated (run_gated)


def run_tool(tool: str, sanitizer, stage_spec: Kernel, n: int, work: Path, timeout_s: float, *,
             fence: Fence | None = None, control: Control | None = None,
             blocks: tuple[int, int] | None = None) -> SanitizerRun:
    """Launch one stage kernel once at size n under ``tool`` (racecheck or memcheck), in the
    launcher child ``sanitize`` (no CuPy, so no CuPy cache). ``control``: a stop for a run no
    longer needed (grader/sandbox/turns.py). ``blocks``: launch at most this many blocks along x and y
    of the size-n grid (racecheck: see Sanitizer.racecheck_blocks); a kernel whose launch fails on
    that part of the grid (a cluster shape it does not divide) is run again on the whole grid."""
    result = SanitizerRun(tool, stage_spec.id)
    if sanitizer is None or getattr(sanitizer, "path", None) is None:
        result.reason = "not checked: compute-sanitizer not found"
        return result
    result = _run_once(tool, sanitizer, stage_spec, n, work, timeout_s, fence, control, blocks)
    if blocks and result.launch_failed and not (control is not None and control.cancel.is_set()):
        result = _run_once(tool, sanitizer, stage_spec, n, work, timeout_s, fence, control, None)
    return result


def run_gated(tool: str, sanitizer, stage: Kernel, n: int, work: Path, timeout_s: float, *,
              handed: Callable[[], Kernel | None], fence: Fence | None = None, control: Control | None = None,
              blocks: tuple[int, int] | None = None) -> SanitizerRun:
    """:func:`run_tool` for a child started before its stage has compiled (grader/gpu/racecheck.py):
    ``stage`` is what is known then (its id, kernel name and inputs; no cubin yet); the child starts the driver
    under the tool and uploads its inputs, then waits at its gate, named after the tool, whose go
    hands over the compiled stage (``handed()`` returns that spec once the gate has opened). A run
    that cannot be judged as it is (an older compute-sanitizer refusing ``--kernel-name``: it never
    reached the gate) comes back with ``rerun``; the caller runs it again with :func:`run_tool`."""
    result = SanitizerRun(tool, stage.id)
    if sanitizer is None or getattr(sanitizer, "path", None) is None:
        result.reason = "not checked: compute-sanitizer not found"
        return result
    spec = SanitizeSpec(n=n, seed=SEED, gate=tool, ids=[stage.id], inputs=[stage.inputs],
                        blocks=list(blocks) if blocks else None)
    child = launch(SANITIZE, spec, work, timeout_s, OUTPUT_LIMIT, wrap=[*_wrap(tool, sanitizer),
                   *_only(stage.kernel)], name=tool, fence=fence, control=control)
    text = child.proc.stdout + "\n" + child.proc.stderr
    if child.result is not None and child.result.stopped:
        result.reason, result.proc = "not checked: stopped before the launch", child.proc
        return result
    if _option_refused(text):
        result.reason, result.rerun = "not checked: this compute-sanitizer has no --kernel-name", True
        return result
    result = _judge(tool, stage.id, child, text, work, timeout_s)
    spec_now = handed()
    if blocks and result.launch_failed and spec_now and not (control is not None and control.cancel.is_set()):
        result = _run_once(tool, sanitizer, spec_now, n, work, timeout_s, fence, control, None)
    return result


SEED = 7  # the inputs' seed: a race does not depend on the values, a bad access rarely does
OUTPUT_LIMIT = 200_000  # bytes of the tool's report kept (20 findings print far less)


def _wrap(tool: str, sanitizer) -> list[str]:
    return [sanitizer.path, "--tool", tool, "--error-exitcode", str(ERROR_EXIT), "--print-limit", "20"]


def _only(kernel: str) -> list[str]:
    """Only the student's kernel is instrumented: the child launches no other, but the driver may."""
    return ["--kernel-name", f"kns={kernel}"]


def _run_once(tool: str, sanitizer, stage_spec: Kernel, n: int, work: Path, timeout_s: float,
              fence: Fence | None, control: Control | None, blocks: tuple[int, int] | None) -> SanitizerRun:
    for attempt in (_only(stage_spec.kernel), []):
        spec = SanitizeSpec(n=n, seed=SEED, stages=[stage_spec], blocks=list(blocks) if blocks else None)
        child = launch(SANITIZE, spec, work, timeout_s, OUTPUT_LIMIT,
                       wrap=[*_wrap(tool, sanitizer), *attempt], name=tool, fence=fence, control=control)
        text = child.proc.stdout + "\n" + child.proc.stderr
        if not (attempt and _option_refused(text)):
            break  # an older compute-sanitizer without --kernel-name: run again without it
    return _judge(tool, stage_spec.id, child, text, work, timeout_s)


def _judge(tool: str, stage_id: str, child: ChildResult[LaunchResult], text: str, work: Path, timeout_s: float) -> SanitizerRun:
    """What one sanitizer child's run says: its findings, or why it says nothing."""
    result = SanitizerRun(tool, stage_id)
    proc = result.proc = child.proc
    (work / f"{tool}.txt").write_text(text)
    result.findings = parse_sanitizer(text)
    failed = child.result.failures.get(stage_id) if child.result is not None else None
    if proc.timed_out:
        result.reason = f"not checked: {tool} did not finish within {timeout_s:g} s"
    elif "Device not supported" in text or (proc.returncode not in (0, ERROR_EXIT) and not result.findings):
        result.reason = f"not checked: {tool} could not run here ({proc.brief()}: {quote_code(text.strip()[-200:], 200)})"
    elif failed and not result.findings:  # the kernel never ran to the end: nothing was checked
        result.reason = f"not checked: the kernel's launch under {tool} failed ({quote_code(str(failed), 300)})"
        result.launch_failed = True
    return result


def _option_refused(text: str) -> bool:
    low = text.lower()
    return "kernel-name" in low and any(w in low for w in ("unrecognized", "unknown option", "invalid option"))


def parallel_runs(count: int) -> int:
    """How many sanitizer children run at once: all of them, up to one per CPU (at least 4)."""
    return max(1, min(count, max(4, os.cpu_count() or 1)))


def run_many(tool: str, sanitizer, specs: list[Kernel], n: int, work_root: Path, timeout_s: float, *,
             fence: Fence | None = None, blocks: tuple[int, int] | None = None) -> dict[str, SanitizerRun]:
    """One sanitizer child per stage, all side by side: each is one launch at size n, a correctness
    tool whose answer does not depend on what else the GPU runs (nothing is timed here), so the
    step takes as long as its slowest stage, not the sum (:func:`parallel_runs`: each is a
    compute-sanitizer and a Python process)."""
    with ThreadPoolExecutor(max_workers=parallel_runs(len(specs)), thread_name_prefix=tool) as pool:
        runs = pool.map(lambda s: run_tool(tool, sanitizer, s, n, work_root / s.id, timeout_s, fence=fence,
                                           blocks=blocks), specs)
        return {r.stage: r for r in runs}
