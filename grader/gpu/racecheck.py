"""racecheck's children on a grading's GPU schedule (their runs and verdicts; grader/gpu/session.py builds
the parties): started before the compiles, launched as each stage's compile ends.

A racecheck run is one launch of a small grid under ``compute-sanitizer --tool racecheck``
(grader/gpu/sanitize.py), but most of its time is the tool's own start: the driver and its
instrumentation. Started after every compile, they would end seconds after the compiles, and the timed
benchmarks would wait for them (docs/measurements/2026-11-30-h200-speed-run12-14.md).
So a child for each stage that may use shared memory is started with the stage children, before the compiles
(grader/gpu/plan.py plans them, grader/gpu/session.py builds them); it starts the driver under the tool, uploads its
inputs and waits at its gate ``racecheck``. The compile step hands each one its compiled kernel as
soon as that stage's compile ends (session.py: ``GpuSession.hand_kernel``), while the other stages still compile.

Which stages get one before anything is compiled is a guess from the source
(:func:`may_use_shared_memory`); it decides only how early a run starts, never whether it runs: a
compiled stage that uses shared memory and has no early child gets one beside the stage runs
(session.py: ``GpuSession.begin_runs``), and the verdicts are read by :func:`collect` (grader/gpu/stages.py:
sanitize), which runs now whatever did not run before. A child for a stage that did not compile,
or compiled without shared memory, is stopped at its gate.
"""
from __future__ import annotations

import time
from pathlib import Path

from grader.evidence.rubric import Stage
from grader.gpu.job import Job
from grader.gpu.ncu_run import stage_spec
from grader.gpu.sanitize import SanitizerRun, run_many
from grader.grading import StageOutcome
from grader.rubric.types import Sanitizer
from grader.sandbox.fence import GIB, Fence
from grader.sandbox.turns import Party, Schedule

GATE = "racecheck"  # a tool gate of the schedule (grader/sandbox/turns.py): untimed work after it
SOURCE_READ_BYTES = 1 << 20  # how much of a stage's file the guess reads (intake caps files anyway)

__all__ = ["blocks_for", "collect", "folders_fence", "may_use_shared_memory", "run_now", "stage_folders_fence", "tool_fence",
           "uses_shared_memory"]


def uses_shared_memory(o: StageOutcome) -> bool:
    """What the compile says: static shared memory in ptxas's report, or dynamic in the launch."""
    c = o.compile
    assert c is not None and c.kernel is not None and c.launch is not None  # a verdict means it compiled
    return bool(c.kernel.shared_bytes or c.launch.smem)


def may_use_shared_memory(submission: Path, st: Stage) -> bool:
    """Before the compile: whether the stage's file may declare shared memory. ``__shared__`` in it,
    or a local ``#include "..."`` (a header may declare it), or a file that cannot be read (the
    compile will say why): yes. A guess that only decides how early racecheck starts."""
    try:
        with open(submission / st.file, "rb") as fh:
            head = fh.read(SOURCE_READ_BYTES)
    except OSError:
        return True
    return b"__shared__" in head or b'#include "' in head or b"#include\"" in head


def tool_fence(scratch: Path, outcomes: list[StageOutcome]) -> Fence:
    """The fence of a tool (compute-sanitizer, ncu) launching student kernels: the GPU, its own
    folder, the kernels' cubins read-only; the tools themselves take gigabytes of host memory."""
    return folders_fence(scratch, [Path(o.compile.cubin).parent for o in outcomes if o.compile and o.compile.cubin])


def folders_fence(scratch: Path, folders: list[Path]) -> Fence:
    """The fence of a tool child: the GPU, its own folder, ``folders`` (the cubins' or, before the
    compiles, the stage folders their cubins are compiled into) read-only."""
    return Fence(scratch=scratch, gpu=True, readonly=tuple(dict.fromkeys(folders)), memory_bytes=16 * GIB,
                 student_host_code=False)


def stage_folders_fence(scratch: Path, work: Path, stages: list[Stage]) -> Fence:
    """The fence of a tool child started before the compiles (the profiler, racecheck): each stage's
    folder under ``work`` read-only (its cubin is compiled into it later; the folder itself stays, made
    before the child starts)."""
    return folders_fence(scratch, [work / st.id for st in stages])


def blocks_for(san: Sanitizer, tool_name: str) -> tuple[int, int] | None:
    """racecheck watches a corner of the grid (Sanitizer.racecheck_blocks); memcheck all of it: a bad
    access can be in any block, the edge blocks first."""
    return san.racecheck_blocks if tool_name == "racecheck" else None


def run_now(job: Job, tool_name: str, outcomes: list[StageOutcome], tool) -> tuple[dict[str, SanitizerRun], float]:
    """``tool_name`` on ``outcomes``, one child each, side by side, now; and how long it took."""
    san, work = job.rubric.sanitizer, job.work / tool_name
    t0 = time.monotonic()
    runs = run_many(tool_name, tool, [stage_spec(o) for o in outcomes], san.n, work, san.timeout_s,
                    fence=tool_fence(work, outcomes), blocks=blocks_for(san, tool_name))
    return runs, time.monotonic() - t0


def collect(job: Job, shared: list[StageOutcome], tool, early: dict[str, Party],
            sched: Schedule | None) -> tuple[dict[str, SanitizerRun], float | None]:
    """racecheck's runs of ``shared``: those started before on ``sched`` (``early``: stage id -> its
    party, started before the compiles or beside the stage runs), the rest
    run now, with any early run that could not be judged as it was (:attr:`SanitizerRun.rerun`). The
    early runs of other stages (a run that hung: no verdict racecheck explains) are stopped. The
    seconds: the longest run's own wall time."""
    wanted = {o.stage.id for o in shared}
    unwanted = [party for sid, party in early.items() if sid not in wanted]
    if sched is not None:
        for party in unwanted:
            sched.stop(party)
        for party in unwanted:  # gone before any later step times something
            sched.wait(party)
    runs: dict[str, SanitizerRun] = {}
    seconds: float | None = None
    for o in shared:
        if o.stage.id in early and sched is not None:
            r = sched.wait(early[o.stage.id])
            if r is None or r.rerun:
                continue
            runs[o.stage.id] = r
            wall = getattr(r.proc, "wall_s", None)
            if wall is not None:  # its own time: not its wait at the gate
                seconds = max(seconds or 0.0, wall - early[o.stage.id].control.held_s())
    late = [o for o in shared if o.stage.id not in runs]
    if late:
        now, took = run_now(job, "racecheck", late, tool)
        runs.update(now)
        seconds = max(seconds or 0.0, took)
    return runs, seconds
