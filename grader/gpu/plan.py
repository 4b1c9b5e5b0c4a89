"""A grading's GPU plan, as data: which children it starts, when, the gates each waits at, what each waits for.

:func:`gpu_plan` is the one place that decides the parties of a grading's GPU schedule
(grader/sandbox/turns.py); grader/gpu/session.py executes the plan (it builds each planned party and puts
it on the schedule when the plan says), and the steps (grader/gpu/stages.py, grader/pipeline.py) open
the gates the plan names. The plan is frozen: it says what will happen, never what did.

The parties, in the order they are put on the schedule:

* a child per stage (its gates: ``correctness``, shared with tools but no other stage's kernel, then
  ``bench``, the GPU alone), then a gated racecheck child for each stage whose source may use shared
  memory (its gate ``racecheck``, a tool gate the compile step opens with the kernel), the checker
  (``compare``, opened by check_results) and the profiler under ncu (``launch``, opened by the
  profile step): all when the session starts, so that their untimed start-up overlaps the compiles;
* beside the stage runs: an ungated racecheck child for a stage that compiled with shared memory and
  had none, and the occupancy measurements (``sweeps``, the GPU alone, after every stage run);
* once the timed turns are over: the student's occupancy program (no gate).

Which of these run also depends on what the compiles give (a stage that did not compile has its
children stopped at their gates; occ.cu's builds decide the occupancy parties): each party's ``only_if``
says so in words.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import Enum

from grader.compile.toolchain import unsupported_reason
from grader.evidence.rubric import Stage
from grader.rubric.types import Rubric

__all__ = ["Gate", "GateKind", "GpuPlan", "PartyPlan", "Role", "Starts", "gpu_plan"]


class Role(str, Enum):
    STAGE = "stage"  # a stage's kernel: correctness, then the timed benchmark
    RACECHECK = "racecheck"  # compute-sanitizer racecheck on one shared-memory stage
    CHECKER = "checker"  # the trusted float64 checker
    PROFILE = "profile"  # one Nsight Compute run over the correct kernels
    OCCUPANCY_MEASURE = "occupancy:measure"  # the grader's occupancy measurements
    OCCUPANCY_PROGRAM = "occupancy:program"  # the student's occupancy program


class GateKind(str, Enum):
    SHARED = "shared"  # one such turn at a time, beside untimed work (a stage's correctness runs)
    TOOL = "tool"  # untimed work after it; the exclusive turns wait for it to end
    EXCLUSIVE = "exclusive"  # the GPU alone: a timed part
    STEP = "step"  # opened by a later step of the grading, not by the turns


class Starts(str, Enum):
    SESSION = "with the session"  # before the compiles when alone on the GPU; else once the GPU lock is held
    RUNS = "beside the stage runs"  # run_stages, once the compiles have ended
    TIMED_OVER = "once the timed turns are over"  # run_stages, after the last exclusive turn


@dataclass(frozen=True)
class Gate:
    name: str  # the gate files' name (grader/children/protocol.py: wait_at_gate)
    kind: GateKind
    opened_by: str  # the step that opens it


@dataclass(frozen=True)
class PartyPlan:
    name: str  # the party's name on the schedule and in grading.json's timeline
    role: Role
    stage: str | None  # the stage it serves; None for the whole grading's
    starts: Starts
    gates: tuple[Gate, ...] = ()
    after: tuple[str, ...] = ()  # parties that must have ended before any of its gates opens
    hold_startup: bool = False  # its start-up is the grader's: held, not counted against its limit
    late: bool = False  # it waits for a later step, not for a turn (it leaves slots to the others)
    only_if: str = ""  # what must hold when it is due, in words; "" for always


@dataclass(frozen=True)
class GpuPlan:
    """The parties of one grading's GPU schedule, in the order they are put on it."""

    parties: tuple[PartyPlan, ...] = ()
    why_none: str = ""  # why there are none (no GPU, no stage to run); "" when there are

    def party(self, name: str) -> PartyPlan | None:
        return next((p for p in self.parties if p.name == name), None)

    def names(self) -> list[str]:
        return [p.name for p in self.parties]

    def starting(self, when: Starts, role: Role | None = None) -> list[PartyPlan]:
        return [p for p in self.parties if p.starts is when and (role is None or p.role is role)]

    def gates(self, kind: GateKind) -> tuple[str, ...]:
        """The names of the gates of this kind, once each (the schedule's shared and tool gates)."""
        return tuple(dict.fromkeys(g.name for p in self.parties for g in p.gates if g.kind is kind))

    def turns(self) -> list[str]:
        """The parties the turns let through, in turn order: those with a shared or exclusive gate."""
        return [p.name for p in self.parties
                if any(g.kind in (GateKind.SHARED, GateKind.EXCLUSIVE) for g in p.gates)]


STAGE_GATES = (Gate("correctness", GateKind.SHARED, "run_stages"), Gate("bench", GateKind.EXCLUSIVE, "run_stages"))
RACECHECK_GATE = Gate("racecheck", GateKind.TOOL, "compile_stages")
CHECKER_GATE = Gate("compare", GateKind.STEP, "check_results")
PROFILE_GATE = Gate("launch", GateKind.STEP, "profile")
OCCUPANCY_GATE = Gate("sweeps", GateKind.EXCLUSIVE, "run_stages")


def gpu_plan(rubric: Rubric, candidates: Sequence[Stage], arch_flags: list[str], *, has_gpu: bool,
             racecheck_early: Collection[str], profile: bool, occupancy: bool) -> GpuPlan:
    """The plan for those of ``candidates`` (the selected stages, about to be compiled; or those compiled
    already, when the session starts after the GPU lock) that a GPU compiled for with ``arch_flags`` can
    run (the Hopper stage needs sm_90a). ``racecheck_early``: the stages whose racecheck child starts
    with the session (its source may use shared memory, or its compile says it does); ``profile``:
    whether ncu profiles (enabled in the rubric, and found); ``occupancy``: whether the occupancy section
    is graded."""
    if not has_gpu:
        return GpuPlan(why_none="no GPU")
    stages = [st for st in candidates if not unsupported_reason(st.requires_arch, arch_flags)]
    if not stages:
        return GpuPlan(why_none="no stage to run")
    ids = tuple(st.id for st in stages)
    parties = [PartyPlan(st.id, Role.STAGE, st.id, Starts.SESSION, STAGE_GATES, hold_startup=True,
                         only_if="the stage compiled") for st in stages]
    early = [st.id for st in stages if rubric.sanitizer.racecheck and st.id in racecheck_early]
    parties += [PartyPlan(f"racecheck:{sid}", Role.RACECHECK, sid, Starts.SESSION, (RACECHECK_GATE,),
                          hold_startup=True, only_if="the stage compiled with shared memory") for sid in early]
    parties.append(PartyPlan("checker", Role.CHECKER, None, Starts.SESSION, (CHECKER_GATE,), late=True,
                             only_if="a run finished"))
    if profile and rubric.profile.enabled:
        parties.append(PartyPlan("ncu", Role.PROFILE, None, Starts.SESSION, (PROFILE_GATE,), late=True,
                                 only_if="a kernel was found correct"))
    if rubric.sanitizer.racecheck:
        parties += [PartyPlan(f"racecheck:{sid}", Role.RACECHECK, sid, Starts.RUNS,
                              only_if="the stage compiled with shared memory") for sid in ids if sid not in early]
    if occupancy and rubric.occupancy is not None:
        parties.append(PartyPlan("occupancy:measure", Role.OCCUPANCY_MEASURE, "occupancy", Starts.RUNS,
                                 (OCCUPANCY_GATE,), after=ids, only_if="occ.cu's default or heavy cubin built"))
        parties.append(PartyPlan("occupancy:program", Role.OCCUPANCY_PROGRAM, "occupancy", Starts.TIMED_OVER,
                                 only_if="occ.cu's program built"))
    return GpuPlan(tuple(parties))
