"""A grading's GPU session: the live handles of its GPU work, and the code that executes its plan.

:class:`GpuSession` owns everything of a grading that runs while the steps go on: the GPU schedule
(grader/sandbox/turns.py) and every party on it, the SASS dumps read in the background, the occupancy
items graded on a thread while ncu profiles. It is a context manager: closing it stops every child
still running and waits for it, ends the threads, and keeps the schedule's timeline; it always runs,
also when a step fails. The grading's evidence (grader/gpu/job.py: Job) holds no handle.

What the session starts, and when, is the plan's (grader/gpu/plan.py: gpu_plan); what each party is
launched with (its spec, folder, fence, limit) is read from the Job once, up front, into the launch plan
(grader/gpu/launch_plan.py: launch_plan). The session reads no Job: it executes those records.

* with the session (:func:`start_gpu_children`, then :meth:`GpuSession.start`), right after the probe:
  the warm CuPy cache (grader/gpu/warm.py), then a child per stage, the gated racecheck children, the
  trusted checker and the profiler under ncu, each built from its record and then put on a new
  schedule; each does its untimed start-up (Python, NumPy and CuPy, the CUDA context, its inputs and
  buffers, cuBLAS; grader/children/stage.py: ``Runner.prepare``) while nvcc compiles, and waits at its
  first gate. The compile step hands each compiled kernel to the session (:meth:`GpuSession.hand_kernel`):
  it reaches the stage child at its correctness turn (the gate's go hands it over), the racecheck
  child at once; the profiler's kernels come at its own gate; the racecheck runners and verdicts are
  grader/gpu/racecheck.py's;
* beside the stage runs (:meth:`GpuSession.begin_runs`): an ungated racecheck child for a compiled
  shared-memory stage that had none, and the occupancy measurements (grader/occupancy/early.py holds
  them and says when each goes);
* once the timed turns are over: the student's occupancy program (EarlyOccupancy.start_program).

A stage that did not compile has its children stopped at their gates. Why the start-up comes first, with
its measured effect: docs/design.md ("Gates"). With a GPU lock (a batch or the service: another grading
may be timing kernels on this GPU while this one compiles) nothing may touch the GPU before the lock
is held, so the session starts once the lock is held (the first of the GPU steps), planned for the stages
that compiled, and their children are built with the kernels the compile step handed over.
"""
from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from grader import pyplot
from grader.children.protocol import CHECK, PROFILE, STAGE
from grader.compile import toolchain
from grader.compile.sass import SassDumps
from grader.evidence.limits import StageLimit
from grader.evidence.protocol import (
    CheckResult,
    Kernel,
    KernelGo,
    LaunchResult,
    OccupancyResult,
    StageResult,
    StagesGo,
)
from grader.evidence.sandbox import PartyTimeline
from grader.gpu import warm
from grader.gpu.job import Job
from grader.gpu.launch_plan import (
    CheckerLaunch,
    CompiledKernel,
    LaunchPlan,
    OccupancyLaunch,
    ProfileLaunch,
    RacecheckLaunch,
    StageLaunch,
    compiled_kernel,
    launch_plan,
)
from grader.gpu.ncu_run import EarlyProfile
from grader.gpu.plan import GateKind, GpuPlan, Role, Starts
from grader.gpu.racecheck import GATE as RACECHECK_GATE
from grader.gpu.racecheck import blocks_for, folders_fence
from grader.gpu.sanitize import SanitizerRun, run_gated, run_tool
from grader.grading import StageOutcome
from grader.model import ItemResult, ProcRecord
from grader.occupancy.build import Prebuilt
from grader.occupancy.child import CHILD_TIMEOUT_S, run_child
from grader.occupancy.early import GATE as OCCUPANCY_GATE
from grader.occupancy.early import (
    EarlyOccupancy,
    ProgramRun,
    occupancy_fence,
    program_now,
    wants_child,
    wants_program,
)
from grader.profile.ncu import OUTPUT_LIMIT, command
from grader.rubric.occupancy import OccupancyConfig
from grader.rubric.types import Sanitizer
from grader.sandbox.fence import Fence
from grader.sandbox.launch import ChildResult, launch
from grader.sandbox.process import Control
from grader.sandbox.turns import Party, Schedule, parallel_children

__all__ = ["GpuSession", "WarmStart", "occupancy_parties", "start_gpu_children"]


@dataclass(frozen=True)
class WarmStart:
    """How the session's warm CuPy cache came about (grader/gpu/warm.py), for the grading's record."""

    folder: Path | None  # every CuPy child's cache starts as a copy of it; None: each compiles its own
    why_none: str  # why there is none ("" when there is)
    seconds: float  # the time it took to find or make
    warm_s: float | None  # the warm child's own time, when it ran


class GpuSession:
    """The live handles of one grading's GPU work (see the module docstring). Empty until
    :meth:`start` (never without a GPU); the SASS dumps are made by the compile step whether or not
    there is a GPU. :meth:`close` releases everything, whatever happened."""

    def __init__(self) -> None:
        self.plan = GpuPlan(why_none="not started")
        self.launches: LaunchPlan | None = None
        self.schedule: Schedule | None = None
        self.stage_runs: dict[str, Party] = {}  # stage id -> its child's party
        self.checker: Party | None = None
        self.racecheck: dict[str, Party] = {}  # stage id -> its racecheck child's party
        self.kernels: dict[str, CompiledKernel] = {}  # stage id -> its compiled kernel, handed to its children
        self.profile: EarlyProfile | None = None
        self.occupancy: EarlyOccupancy | None = None
        self.sass_dumps: SassDumps | None = None  # the compiled stages' SASS, read in the background
        # The occupancy items, graded on another thread while ncu profiles (pipeline.profile), once the
        # occupancy runs have ended; None when the occupancy step grades them itself.
        self.occupancy_ahead: Future[list[ItemResult]] | None = None
        self.timeline: list[PartyTimeline] = []  # the schedule's, once the session has closed
        self.closed = False

    def __enter__(self) -> GpuSession:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def poll(self) -> None:
        """Let the schedule see its children's gates (a step that waits on something else calls it)."""
        if self.schedule is not None:
            self.schedule.poll()

    # ---- executing the plan ------------------------------------------------------------------------
    def start(self, plan: LaunchPlan) -> WarmStart:
        """Start what ``plan`` starts with the session: the folders its children use, the warm CuPy cache
        (every CuPy child's own starts as a copy of it), then each planned party built from its record and
        put on a new GPU schedule in the plan's order; each does its untimed start-up and waits at its
        first gate. How the warm cache came about, for the grading's record."""
        self.plan, self.launches = plan.gpu, plan
        for folder in _folders(plan):
            folder.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        cache, why = warm.prepare_request(plan.warm) if plan.warm is not None else (None, "no request")
        started = WarmStart(cache.folder if cache else None, why, time.monotonic() - t0,
                            cache.warm_s if cache else None)
        pyplot.preload()  # matplotlib, imported while this process waits for its children
        shared, tool = plan.gpu.gates(GateKind.SHARED), plan.gpu.gates(GateKind.TOOL)
        parties = self._build(plan, started.folder)
        self.schedule = Schedule(parallel_children(plan.device), shared_gates=shared, tool_gates=tool)
        for party in parties:
            self.schedule.add(party)
        return started

    def _build(self, plan: LaunchPlan, cache_seed: Path | None) -> list[Party]:
        """Each party the plan starts with the session, in the plan's order (the stage children first:
        they are the ones every later turn waits for), built from its record. A stage compiled already
        (a GPU lock) has its kernel as its children's payload: its racecheck child goes through its gate
        as soon as it arrives there."""
        kernels = self.kernels  # compiled already (a GPU lock): handed over by the compile step
        built: list[Party] = []
        for p in plan.gpu.starting(Starts.SESSION):
            if p.role is Role.STAGE:
                s = next(s for s in plan.stages if s.stage == p.name)
                self.stage_runs[s.stage] = _stage_party(s, cache_seed, kernels.get(s.stage))
                built.append(self.stage_runs[s.stage])
            elif p.role is Role.RACECHECK:  # its kernel is handed over as its stage compiles
                r = next(r for r in plan.racecheck if r.stage == p.stage)
                self.racecheck[r.stage] = _gated_party(r, plan.sanitizer, plan.sanitizer_tool, kernels.get(r.stage))
                built.append(self.racecheck[r.stage])
            elif p.role is Role.CHECKER and plan.checker is not None:
                self.checker = _checker_party(plan.checker, cache_seed)
                built.append(self.checker)
            elif p.role is Role.PROFILE and plan.profile is not None:
                self.profile = early_profile(plan.profile, cache_seed)
                built.append(self.profile.party)
        return built

    def hand_kernel(self, o: StageOutcome) -> None:
        """A stage's compile has ended: the session keeps its kernel for its children, and those on the
        schedule get it (the stage child at its correctness turn; its early racecheck child now, if it
        uses shared memory, else that child is stopped at its gate). Before the session starts (with a
        GPU lock) it only keeps it: the children are built with it (:meth:`start`)."""
        sid, k = o.stage.id, compiled_kernel(o)
        if k is not None:
            self.kernels[sid] = k
        sched, party = self.schedule, self.racecheck.get(sid)
        if sched is None:
            return
        if k is not None and sid in self.stage_runs:
            self.stage_runs[sid].payloads["correctness"] = KernelGo(k.kernel)
        if party is None:
            return
        if k is not None and k.shared_memory:
            party.payloads[RACECHECK_GATE] = StagesGo([k.kernel])
            sched.open(party)
        else:
            sched.stop(party)
            del self.racecheck[sid]

    def begin_runs(self, compiled: list[str], prebuilt: Prebuilt | None) -> tuple[dict[str, Party], list[Party]]:
        """The stage runs begin for the ``compiled`` stages: the children of the stages that did not
        compile are stopped at their gates (each compiled stage's child has its kernel for its correctness
        turn). What the plan starts beside the runs is put on the schedule: an ungated racecheck child
        for each compiled shared-memory stage that had none before the compiles (a correctness tool,
        nothing timed: it shares the GPU with the runs' untimed parts, and the timed parts wait for it),
        then the occupancy parties (occ.cu's ``prebuilt`` builds), their measurements after the runs.
        The runs (stage id -> its child's party) and the parties the turns let through, in the plan's
        turn order; none when nothing compiled."""
        sched, plan = self.schedule, self.launches
        assert sched is not None and plan is not None
        for sid, party in self.stage_runs.items():
            if sid not in compiled:
                sched.stop(party)  # did not compile: nothing to run
        if not compiled:
            return {}, []
        assert all(sid in self.kernels for sid in compiled), "the compile step hands each compiled kernel over"
        runs = {sid: self.stage_runs[sid] for sid in compiled}
        planned = {p.stage for p in self.plan.starting(Starts.RUNS, Role.RACECHECK)}
        missing = [self.kernels[sid] for sid in compiled if sid in planned and sid not in self.racecheck
                   and self.kernels[sid].shared_memory]
        tool = toolchain.find_compute_sanitizer() if missing else None
        for k in missing:
            self.racecheck[k.stage] = sched.add(_ungated_party(plan.racecheck_work, k, plan.sanitizer, tool),
                                                start=False)
        measure = self.plan.party("occupancy:measure")
        if plan.occupancy is not None and measure is not None:
            self.occupancy = _occupancy(plan.occupancy, prebuilt, sched,
                                        [runs[sid] for sid in measure.after if sid in runs])
        on_turns = {**runs, **({"occupancy:measure": self.occupancy.measure}
                               if self.occupancy is not None and self.occupancy.measure is not None else {})}
        return runs, [on_turns[name] for name in self.plan.turns() if name in on_turns]

    def run_limit(self, sid: str) -> StageLimit | None:
        """The time limit the stage's child runs under (grader/rubric/limits.py), as planned."""
        return self.launches.limit(sid) if self.launches is not None else None

    # ---- ending ------------------------------------------------------------------------------------
    def close(self) -> list[PartyTimeline]:
        """Stop every child still on the schedule and wait for all (nothing outlives the grading), end
        the background threads; the schedule's timeline. Each handle is released even when another's
        release fails; a second call does nothing."""
        if self.closed:
            return self.timeline
        self.closed = True
        try:
            if self.schedule is not None:
                try:
                    self.schedule.close()
                finally:
                    self.timeline = self.schedule.timeline()
        finally:
            try:
                if self.occupancy_ahead is not None:
                    self.occupancy_ahead.exception()  # its thread ends with its one task; its error is its step's
            finally:
                if self.sass_dumps is not None:
                    self.sass_dumps.close()
        return self.timeline


def start_gpu_children(job: Job, gpu: GpuSession) -> Job:
    """Start the session: its launches planned from the Job (grader/gpu/launch_plan.py), then executed
    (:meth:`GpuSession.start`); the grading keeps the seeds and the warm cache. Before the compiles
    (alone on the GPU) it is planned for the stages about to be compiled; after them (with a GPU lock)
    for those that compiled, whose children get their kernels at once. Nothing without a GPU, or when
    no stage is to be graded; nothing when started already. A step of the grading."""
    if gpu.schedule is not None or not job.env.has_gpu:
        return job
    compiled = [o.stage for o in job.outcomes.values() if o.compile is not None and o.compile.ok]
    plan = launch_plan(job, compiled if job.outcomes else None)
    if not plan.gpu.parties:
        return job
    job.seeds = dict(plan.seeds)
    cache = gpu.start(plan)
    job.clock.add("cupy_cache", cache.seconds)
    if cache.folder is None:
        job.notes.append(f"CuPy's kernels could not be compiled ahead ({cache.why_none}); each child compiled its own")
    job.cupy_cache = cache.folder
    if cache.warm_s is not None:
        job.clock.add("cupy_cache.warm", cache.warm_s)
    return job


def _folders(plan: LaunchPlan) -> list[Path]:
    """The folders the session makes before any child starts: each child's own, and the stage folders a
    tool child started before the compiles reads (each cubin is compiled into its stage's folder)."""
    folders = [s.work for s in plan.stages] + [r.work for r in plan.racecheck]
    for fence in [r.fence for r in plan.racecheck] + ([plan.profile.fence] if plan.profile is not None else []):
        folders += list(fence.readonly)
    return list(dict.fromkeys(folders))


def _stage_party(s: StageLaunch, cache_seed: Path | None, compiled: CompiledKernel | None) -> Party:
    """The stage's child: fenced, the stage folder is all it may write, CuPy's cache included
    (never the checker's); its limit from the stage's reference (grader/rubric/limits.py). A stage
    compiled already has its kernel as its correctness gate's payload; else the compile step hands it."""
    start = launch  # bound now: the child may start later, from the schedule's thread
    fence = Fence(scratch=s.work, gpu=True, output_bytes=s.output_limit, student_host_code=False)

    def run(control: Control) -> ChildResult[StageResult]:
        return start(STAGE, s.spec, s.work, s.limit.seconds, s.output_limit, cache_dir=s.work / "cupy-cache",
                     cache_seed=cache_seed, control=control, fence=fence)

    payloads: dict[str, object] = {"correctness": KernelGo(compiled.kernel)} if compiled is not None else {}
    return Party(s.stage, ("correctness", "bench"), s.work / "stage_result.json", run, hold_startup=True,
                 payloads=payloads)


def _gated_party(r: RacecheckLaunch, san: Sanitizer, tool, compiled: CompiledKernel | None = None) -> Party:
    """The stage's racecheck child, waiting at its gate for the compiled kernel (``compiled``, when its
    stage compiled already: it goes straight through). Its start-up is held (not counted against its
    time limit: it depends on how many children start at once)."""
    handed: dict[str, object] = {}  # the party's payloads: RACECHECK_GATE -> StagesGo([the compiled stage])
    if compiled is not None:
        handed[RACECHECK_GATE] = StagesGo([compiled.kernel])
    blocks, start = blocks_for(san, "racecheck"), run_gated  # bound now: it starts from the schedule's thread

    def handed_spec() -> Kernel | None:
        go = handed.get(RACECHECK_GATE)  # the grader's own payload (GpuSession.hand_kernel)
        return go.stages[0] if isinstance(go, StagesGo) and go.stages else None

    def run(control: Control) -> SanitizerRun:
        return start("racecheck", tool, r.known, san.n, r.work, san.timeout_s, handed=handed_spec, fence=r.fence,
                     control=control, blocks=blocks)

    return Party(f"racecheck:{r.stage}", (RACECHECK_GATE,), r.work / "racecheck_result.json", run,
                 hold_startup=True, payloads=handed, early=dict(handed))


def _ungated_party(work: Path, k: CompiledKernel, san: Sanitizer, tool) -> Party:
    start, blocks = run_tool, blocks_for(san, "racecheck")  # bound now: the run may start from the schedule's thread
    fence = folders_fence(work, [k.cubin_dir])

    def run(control: Control) -> SanitizerRun:
        return start("racecheck", tool, k.kernel, san.n, work / k.stage, san.timeout_s,
                     fence=fence, control=control, blocks=blocks)

    return Party(f"racecheck:{k.stage}", (), None, run)


def early_profile(p: ProfileLaunch, cache_seed: Path | None = None) -> EarlyProfile:
    """The ncu run for its stages (those about to be compiled), waiting at its gate: its
    start-up (ncu, Python, CuPy, the context, the inputs) then overlaps the compiles and the stage
    runs' untimed work, and the profile step (grader/gpu/ncu_run.py: profile_stages) opens the gate
    with the compiled kernels found correct. ``cache_seed``: the warm CuPy cache its own cache starts
    as a copy of."""
    start = launch  # bound now: the child starts later, from the schedule's thread
    wrap = command(p.ncu, list(p.kernels), list(p.metrics), p.clock_control)

    def run(control: Control) -> ChildResult[LaunchResult]:
        return start(PROFILE, p.spec, p.work, p.timeout_s, OUTPUT_LIMIT, wrap=wrap, fence=p.fence,
                     cache_seed=cache_seed, control=control)

    party = Party("ncu", ("launch",), p.work / "profile_result.json", run, late=True)
    return EarlyProfile(party, list(p.stage_ids), list(p.metrics))


def _checker_party(c: CheckerLaunch, cache_seed: Path | None) -> Party:
    """The trusted checker: it computes the expected products, then waits at its gate ``compare``
    for the list of outputs to judge (gpu/stages.py: check_results opens it)."""
    start = launch  # bound now: the child may start later, from the schedule's thread

    def run(control: Control) -> ChildResult[CheckResult]:
        return start(CHECK, c.spec, c.work, c.timeout_s, 20_000, cache_dir=c.work / "cupy-cache",
                     cache_seed=cache_seed, control=control)

    return Party("checker", ("compare",), c.work / "check_result.json", run, late=True)


def _occupancy(o: OccupancyLaunch, prebuilt: Prebuilt | None, schedule: Schedule,
               after: list[Party]) -> EarlyOccupancy | None:
    return occupancy_parties(o.cfg, prebuilt, o.work, schedule, after, fence=occupancy_fence(o.work))


def occupancy_parties(cfg: OccupancyConfig, prebuilt: Prebuilt | None, work: Path, schedule: Schedule,
                      after: list[Party], fence: Fence | None = None) -> EarlyOccupancy | None:
    """Put the occupancy work on ``schedule`` (grader/occupancy/early.py: EarlyOccupancy, which says
    when each goes): the measurement child now, waiting at its gate ``sweeps``, ``after`` the given
    parties; the student's program built now and started once the timed turns are over
    (EarlyOccupancy.start_program). None when occ.cu was not built beside the stages (the occupancy
    step then says why, and runs what it can itself)."""
    if prebuilt is None:
        return None
    work = Path(work).resolve()
    builds = prebuilt.builds
    child, program_built = wants_child(builds, cfg), wants_program(builds)
    early = EarlyOccupancy(schedule, builds, work, fence)
    if child:
        measure_now = run_child  # bound now: it starts later, on the schedule's thread

        def measure(control: Control) -> tuple[OccupancyResult | None, ProcRecord]:
            return measure_now(cfg, builds, work, CHILD_TIMEOUT_S, fence=fence, gate=True, control=control)

        early.measure = schedule.add(Party("occupancy:measure", (OCCUPANCY_GATE,), work / "occupancy_result.json",
                                           measure, after=list(after)), start=False)
    if program_built:
        exe, program = builds["exe"].output, program_now  # bound now: it runs later, on the schedule's thread

        def start(control: Control) -> ProgramRun:
            return program(exe, work, fence, control)

        early.program_party = Party("occupancy:program", (), None, start)
    return early
