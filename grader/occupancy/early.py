"""The occupancy measurements on the grading's GPU schedule (grader/sandbox/turns.py; docs/design.md, "Gates").

The grader's own measurements and the student's program need the GPU; run one after the other after
every other step, they would add seconds at the end of every grading. With a GPU schedule
(grader/gpu/stages.py: run_stages) they are parties of it instead:

* the trusted child (:mod:`grader.children.occupancy`, party ``occupancy:measure``) starts with the
  stage runs (:func:`start`), does everything untimed at once (CuPy, the context, the modules, the
  Occupancy API queries) and waits at its exclusive gate ``sweeps``, its clock held. The schedule
  opens it after every stage run has ended (``Party.after``), so the sweeps and heavy's timings have
  the GPU alone, the stages' benchmarks keep the back-to-back turns they were calibrated in, and a
  kernel of occ.cu that hangs in the sweeps never delays a stage's benchmark (nor spends the stages'
  time budget, ``timeouts.submission_s``).
* the student's program (:mod:`grader.occupancy.program`, party ``occupancy:program``) times nothing
  the grade reads (its ``time_ms`` only goes to the plot), so it needs no exclusive turn; but it runs
  the student's kernels, so it must not run while anything is timed, and it is a student binary that
  cannot wait at a gate midway. :meth:`EarlyOccupancy.start_program` starts it when run_stages has
  finished its timed turns: it runs beside the checker and the sanitizers (untimed work), and the
  profile step waits for it (``Schedule.quiet``) before Nsight Compute measures.

:func:`grader.occupancy.run.grade_occupancy_submission` then only collects the results
(:meth:`EarlyOccupancy.program_run`, :meth:`EarlyOccupancy.measured`) and grades. Without a schedule
(no GPU, ``--stages occupancy`` alone, a caller of its own) it runs both itself.
Nothing here decides a verdict; the schedule's ``close()`` stops whatever is still running.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grader.compile.student import Fence
from grader.evidence.protocol import OccupancyResult
from grader.model import ProcRecord
from grader.occupancy.build import Build, ptxas_measurements
from grader.occupancy.program import run_program
from grader.rubric.occupancy import OccupancyConfig
from grader.sandbox.process import Control
from grader.sandbox.turns import Party, Schedule, State

GATE = "sweeps"  # the measurement child's exclusive gate


@dataclass
class ProgramRun:
    """The student's program's run: its JSON document or why there is none, the process, its seconds."""

    doc: dict | None
    problem: str | None
    proc: ProcRecord | None
    seconds: float

    @classmethod
    def timed(cls, run: Callable[[], tuple[dict | None, str | None, ProcRecord | None]]) -> ProgramRun:
        """``run()`` (:func:`grader.occupancy.program.run_program`'s answer), timed."""
        t0 = time.monotonic()
        doc, problem, proc = run()
        return cls(doc, problem, proc, time.monotonic() - t0)


@dataclass
class ChildRun:
    """The measurement child's run: its report, the process, the seconds its clock ran (its own
    limit's) and those it waited at its gate, held."""

    report: OccupancyResult | None
    proc: ProcRecord
    seconds: float
    held_s: float = 0.0

    @classmethod
    def timed(cls, run: Callable[[], tuple[OccupancyResult | None, ProcRecord]]) -> ChildRun:
        """``run()`` (:func:`grader.occupancy.child.run_child`'s answer) with nothing held, timed."""
        t0 = time.monotonic()
        report, proc = run()
        return cls(report, proc, time.monotonic() - t0)


def occupancy_fence(work: Path) -> Fence:
    """The fence of the program and the measurement child: the GPU, and ``work`` (WORK/occupancy)."""
    return Fence(scratch=work, gpu=True)


def wants_program(builds: dict[str, Build]) -> bool:
    exe = builds.get("exe")
    return exe is not None and exe.ok


def wants_child(builds: dict[str, Build], cfg: OccupancyConfig) -> bool:
    """Whether the measurement child runs: it needs the default cubin, or heavy's at least."""
    default = builds.get("default")
    return default is not None and (default.ok or ptxas_measurements(builds, cfg)[0] is not None)


def program_now(exe: Path, work: Path, fence: Fence | None, control: Control | None = None) -> ProgramRun:
    """Run the student's program now (:func:`grader.occupancy.program.run_program`)."""
    return ProgramRun.timed(lambda: run_program(exe, work, fence=fence, control=control))


@dataclass
class EarlyOccupancy:
    """The occupancy parties of one grading's schedule, and the builds they run (``prebuilt``'s)."""

    schedule: Schedule
    builds: dict[str, Build]
    work: Path
    fence: Fence | None
    measure: Party | None = None
    program_party: Party | None = None  # built, put on the schedule by start_program
    program: Party | None = None

    def timed(self) -> list[Party]:
        """The parties that take an exclusive turn (for ``Schedule.take_turns``, after the stages')."""
        return [self.measure] if self.measure is not None else []

    def start_program(self) -> None:
        """Start the student's program now (once nothing is timed any more); once, and only when built.
        Its party was built with the others (grader/gpu/session.py: GpuSession.begin_runs)."""
        if self.program is not None or self.program_party is None:
            return
        self.program = self.schedule.add(self.program_party)

    def finished(self) -> bool:
        """Whether its GPU work is over: the program and the measurements ran (or were never started)."""
        program_due = self.program is None and wants_program(self.builds)
        return not program_due and all(p is None or p.state is State.DONE for p in (self.program, self.measure))

    def program_run(self) -> ProgramRun | None:
        """The program's run (started now if it was not yet); None when it did not run."""
        self.start_program()
        if self.program is None:
            return None
        self.schedule.wait(self.program)
        return self.program.result()

    def collect(self) -> CollectedOccupancy:
        """Its runs' results, read now on the schedule's own thread, once :meth:`finished`: what the
        occupancy step needs, for a step that runs on another thread while the schedule goes on."""
        assert self.finished()
        return CollectedOccupancy(self.builds, self.program_run(), self.measured())

    def measured(self) -> ChildRun | None:
        """The measurement child's run, waiting for it to end; None when it was not started. Not let
        through its gate yet (no turns were taken): opened here, once nothing else runs on the GPU."""
        party, sched = self.measure, self.schedule
        if party is None:
            return None
        sched.settle(lambda: party.state is State.DONE or (party.state is State.WAITING and not sched.gpu_busy()))
        if party.state is State.WAITING:
            sched.open(party)
        sched.wait(party)
        report, proc = party.result()
        held = party.control.held_s()
        return ChildRun(report, proc, (proc.wall_s or 0.0) - held, held)


@dataclass(frozen=True)
class CollectedOccupancy:
    """An :class:`EarlyOccupancy` whose runs have ended, read once (:meth:`EarlyOccupancy.collect`): the
    same two answers, with no schedule behind them."""

    builds: dict[str, Build]
    program: ProgramRun | None
    measurement: ChildRun | None

    def program_run(self) -> ProgramRun | None:
        return self.program

    def measured(self) -> ChildRun | None:
        return self.measurement
