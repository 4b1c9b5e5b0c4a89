"""A grading's GPU session: the live handles of its GPU work, and the code that executes its plan.

:class:`GpuSession` owns everything of a grading that runs while the steps go on: the GPU schedule
(grader/sandbox/turns.py) and every party on it, the SASS dumps read in the background, the occupancy
items graded on a thread while ncu profiles. It is a context manager: closing it stops every child
still running and waits for it, ends the threads, and keeps the schedule's timeline; it always runs,
also when a step fails. The grading's evidence (grader/gpu/job.py: Job) holds no handle.

What the session starts, and when, is the plan's (grader/gpu/plan.py: gpu_plan). This module builds
each planned party and puts it on the schedule when the plan says:

* with the session (:func:`start_gpu_children`), right after the probe: a child per stage, the gated
  racecheck children, the trusted checker and the profiler under ncu (:func:`start_profile`); each does
  its untimed start-up (Python, NumPy and CuPy, the CUDA context, its inputs and buffers, cuBLAS;
  grader/children/stage.py: ``Runner.prepare``) while nvcc compiles, and waits at its first gate. The
  compiled kernel reaches each stage child at its correctness turn (the gate's go hands it over), each
  racecheck child as its stage's compile ends (:meth:`GpuSession.hand_racecheck_kernel`), and the
  profiler's kernels at its own gate; the racecheck runners and verdicts are grader/gpu/racecheck.py's;
* beside the stage runs (:func:`start_beside_runs`): an ungated racecheck child for a compiled
  shared-memory stage that had none, and the occupancy measurements (grader/occupancy/early.py holds
  them and says when each goes);
* once the timed turns are over: the student's occupancy program (EarlyOccupancy.start_program).

A stage that did not compile has its children stopped at their gates. Why the start-up comes first, with
its measured effect: docs/design.md ("Gates"). With a GPU lock (a batch or the service: another grading
may be timing kernels on this GPU while this one compiles) nothing may touch the GPU before the lock
is held, so the session starts once the lock is held (the first of the GPU steps), planned for the stages
that compiled.
"""
from __future__ import annotations

import secrets
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType

from grader import pyplot
from grader.children.protocol import CHECK, PROFILE, STAGE
from grader.compile import toolchain
from grader.compile.sass import SassDumps
from grader.evidence.protocol import (
    BenchSpec,
    Case,
    CheckResult,
    CheckSpec,
    Expect,
    Kernel,
    KernelGo,
    LaunchResult,
    LaunchShape,
    OccupancyResult,
    ProbeResult,
    ProfileSpec,
    StageResult,
    StagesGo,
    StageSpec,
)
from grader.evidence.rubric import Stage
from grader.evidence.sandbox import PartyTimeline
from grader.gpu import warm
from grader.gpu.job import Job
from grader.gpu.ncu_run import EarlyProfile, wanted_metrics
from grader.gpu.plan import GateKind, GpuPlan, PartyPlan, Role, Starts, gpu_plan
from grader.gpu.racecheck import GATE as RACECHECK_GATE
from grader.gpu.racecheck import blocks_for, may_use_shared_memory, stage_folders_fence, tool_fence, uses_shared_memory
from grader.gpu.sanitize import SanitizerRun, run_gated, run_tool
from grader.grading import StageOutcome
from grader.model import ItemResult, ProcRecord
from grader.occupancy.build import Prebuilt
from grader.occupancy.child import CHILD_TIMEOUT_S, run_child
from grader.occupancy.early import GATE as OCCUPANCY_GATE
from grader.occupancy.early import EarlyOccupancy, ProgramRun, occupancy_fence, program_now, wants_child, wants_program
from grader.profile.ncu import OUTPUT_LIMIT, command
from grader.records import from_jsonable, to_jsonable
from grader.rubric.limits import stage_limit
from grader.rubric.occupancy import OccupancyConfig
from grader.rubric.types import Rubric
from grader.sandbox.fence import Fence
from grader.sandbox.launch import ChildResult, launch
from grader.sandbox.process import Control
from grader.sandbox.turns import Party, Schedule, parallel_children

__all__ = ["GpuSession", "checker_expectations", "plan_for", "stage_party_spec", "start_beside_runs",
           "start_gpu_children", "start_planned", "occupancy_parties", "start_profile"]


class GpuSession:
    """The live handles of one grading's GPU work (see the module docstring). Empty until
    :func:`start_gpu_children` starts it (never without a GPU); the SASS dumps are made by the compile
    step whether or not there is a GPU. :meth:`close` releases everything, whatever happened."""

    def __init__(self) -> None:
        self.plan = GpuPlan(why_none="not started")
        self.schedule: Schedule | None = None
        self.stage_runs: dict[str, Party] = {}  # stage id -> its child's party
        self.checker: Party | None = None
        self.racecheck: dict[str, Party] = {}  # stage id -> its racecheck child's party
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

    def hand_racecheck_kernel(self, o: StageOutcome) -> None:
        """A stage's compile has ended: hand its early racecheck child the kernel if it uses shared
        memory, else stop the child at its gate."""
        party, sched = self.racecheck.get(o.stage.id), self.schedule
        if party is None or sched is None:
            return
        if o.compile is not None and o.compile.ok and uses_shared_memory(o):
            kernel = o.launch_spec()
            party.payloads[RACECHECK_GATE] = to_jsonable(StagesGo([kernel]))
            sched.open(party)
        else:
            sched.stop(party)
            del self.racecheck[o.stage.id]

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


def plan_for(job: Job, stages: list[Stage] | None = None) -> GpuPlan:
    """The grading's GPU plan (grader/gpu/plan.py) for ``stages`` (compiled already, when the session
    starts after the GPU lock), else for every selected stage this GPU can run. A stage's racecheck
    child starts with the session when its compile says it uses shared memory or, not compiled yet,
    when its source may (:func:`may_use_shared_memory`)."""
    def racecheck_early(st: Stage) -> bool:
        o = job.outcomes.get(st.id)
        known = o is not None and o.compile is not None and o.compile.ok
        return uses_shared_memory(o) if known and o is not None else may_use_shared_memory(job.submission, st)

    candidates = stages if stages is not None else [st for st in job.rubric.stages if job.wants(st.id)]
    ncu = job.env.has_gpu and job.rubric.profile.enabled and _ncu_found()
    return gpu_plan(job.rubric, candidates, job.env.arch_flags, has_gpu=job.env.has_gpu,
                    racecheck_early=racecheck_early, profile=ncu, occupancy=job.wants("occupancy"))


def _ncu_found() -> bool:
    tool = toolchain.find_ncu()
    return tool is not None and getattr(tool, "path", None) is not None


def start_gpu_children(job: Job, gpu: GpuSession) -> Job:
    """Start the session: plan it (:func:`plan_for`) and put on a new GPU schedule what the plan starts
    with the session; each does its untimed start-up and waits at its first gate. Before the compiles
    (alone on the GPU) it is planned for the stages about to be compiled; after them (with a GPU lock)
    for those that compiled, and each racecheck child is handed its kernel at once. Nothing without a
    GPU, or when no stage is to be graded; nothing when started already. A step of the grading."""
    if gpu.schedule is not None or not job.env.has_gpu:
        return job
    compiled = [o for o in job.outcomes.values() if o.compile is not None and o.compile.ok]
    plan = plan_for(job, [o.stage for o in compiled] if job.outcomes else None)
    if not plan.parties:
        return job
    rubric = job.rubric
    job.seeds = {n: secrets.randbelow(2**31) for n in rubric.correctness_sizes}
    job.seeds["bench"] = secrets.randbelow(2**31)
    _prepare_cupy_cache(job)
    pyplot.preload()  # matplotlib, imported while this process waits for its children
    gpu.plan = plan
    shared, tool, now = plan.gates(GateKind.SHARED), plan.gates(GateKind.TOOL), plan.starting(Starts.SESSION)
    gpu.schedule = Schedule(parallel_children(job.env.device), shared_gates=shared, tool_gates=tool)
    start_planned(job, gpu, now)
    for o in compiled:  # compiled already (a GPU lock): its racecheck child gets the kernel now
        gpu.hand_racecheck_kernel(o)
    return job


def start_planned(job: Job, gpu: GpuSession, planned: list[PartyPlan]) -> None:
    """Build each planned party that starts with the session and put it on the schedule, in the plan's
    order (the stage children first: they are the ones every later turn waits for)."""
    sched = gpu.schedule
    assert sched is not None
    stages = [job.rubric.stage(p.name) for p in planned if p.role is Role.STAGE]
    sanitizer = None
    for p in planned:
        st = job.rubric.stage(p.stage) if p.stage is not None else None
        if p.role is Role.STAGE and st is not None:
            gpu.stage_runs[st.id] = sched.add(_stage_party(st, job))
        elif p.role is Role.RACECHECK and st is not None:  # its kernel is handed over as its stage compiles
            sanitizer = sanitizer or toolchain.find_compute_sanitizer()
            gpu.racecheck[st.id] = sched.add(_gated_party(job, st, sanitizer))
        elif p.role is Role.CHECKER:
            gpu.checker = sched.add(_checker_party(job, checker_expectations(job, stages)))
        elif p.role is Role.PROFILE:
            work = job.work / "ncu"
            fence = stage_folders_fence(work, job, stages)
            gpu.profile = start_profile(stages, job.rubric, has_gpu=True, work_dir=work, seed=job.seeds["bench"],
                                        device=job.env.device, schedule=sched, cache_seed=job.cupy_cache,
                                        fence=fence)


def _gated_party(job: Job, st: Stage, tool) -> Party:
    """The stage's racecheck child, waiting at its gate for the compiled kernel. Its start-up is held
    (not counted against its time limit: it depends on how many children start at once)."""
    san = job.rubric.sanitizer
    work = job.work / "racecheck" / st.id
    work.mkdir(parents=True, exist_ok=True)
    fence = stage_folders_fence(work, job, [st])
    handed: dict[str, dict] = {}  # the party's payloads: RACECHECK_GATE -> {"stages": [the compiled stage]}
    # What is known before the compile: the id, the kernel's name and inputs (no cubin, no launch shape yet).
    known = Kernel(cubin="", kernel=st.kernel, inputs=st.inputs, id=st.id, launch=LaunchShape([], [], 0))
    blocks, start = blocks_for(job, "racecheck"), run_gated  # bound now: it starts from the schedule's thread

    def handed_spec() -> Kernel | None:
        go = handed.get(RACECHECK_GATE)  # the grader's own payload (hand_racecheck_kernel)
        stages = from_jsonable(StagesGo, go).stages if go else []
        return stages[0] if stages else None

    def run(control: Control) -> SanitizerRun:
        return start("racecheck", tool, known, san.n, work, san.timeout_s, handed=handed_spec, fence=fence,
                     control=control, blocks=blocks)

    return Party(f"racecheck:{st.id}", (RACECHECK_GATE,), work / "racecheck_result.json", run, hold_startup=True,
                 payloads=handed)


def start_beside_runs(job: Job, gpu: GpuSession, compiled: list[StageOutcome]) -> tuple[dict[str, Party], list[Party]]:
    """The stage runs begin: the children of the stages that did not compile are stopped at their gates,
    and each compiled stage's child is to get its kernel at its correctness turn. What the plan starts
    beside the runs is put on the schedule: an ungated racecheck child for each compiled shared-memory
    stage that had none before the compiles (a correctness tool, nothing timed: it shares the GPU with
    the runs' untimed parts, and the timed parts wait for it), then the occupancy parties, their
    measurements after the runs. The runs (stage id -> its child's party) and the parties the turns let
    through, in the plan's turn order; none when nothing compiled."""
    sched = gpu.schedule
    assert sched is not None
    compiled_ids = {o.stage.id for o in compiled}
    for sid, party in gpu.stage_runs.items():
        if sid not in compiled_ids:
            sched.stop(party)  # did not compile: nothing to run
    if not compiled:
        return {}, []
    runs = {o.stage.id: gpu.stage_runs[o.stage.id] for o in compiled}
    planned = {p.stage for p in gpu.plan.starting(Starts.RUNS, Role.RACECHECK)}
    missing = [o for o in compiled if o.stage.id in planned and o.stage.id not in gpu.racecheck
               and uses_shared_memory(o)]
    tool = toolchain.find_compute_sanitizer() if missing else None
    for o in missing:
        gpu.racecheck[o.stage.id] = sched.add(_ungated_party(job, "racecheck", o, tool), start=False)
    cfg = job.rubric.occupancy
    measure = gpu.plan.party("occupancy:measure")
    if cfg is not None and measure is not None:
        work = job.work / "occupancy"
        gpu.occupancy = occupancy_parties(cfg, job.prebuilt_occupancy, work, sched,
                                          [runs[sid] for sid in measure.after if sid in runs],
                                          fence=occupancy_fence(work))
    for o in compiled:  # the kernel its child gets at its correctness turn, and the limit it runs under
        kernel = o.launch_spec()
        o.run_limit = stage_limit(o.stage, job.rubric)
        runs[o.stage.id].payloads["correctness"] = to_jsonable(KernelGo(kernel))
    on_turns = {**runs, **({"occupancy:measure": gpu.occupancy.measure}
                           if gpu.occupancy is not None and gpu.occupancy.measure is not None else {})}
    return runs, [on_turns[name] for name in gpu.plan.turns() if name in on_turns]


def _ungated_party(job: Job, tool_name: str, o: StageOutcome, tool) -> Party:
    san, work = job.rubric.sanitizer, job.work / tool_name
    start, blocks = run_tool, blocks_for(job, tool_name)  # bound now: the run may start from the schedule's thread
    fence = tool_fence(work, [o])

    def run(control: Control) -> SanitizerRun:
        return start(tool_name, tool, o.launch_spec(), san.n, work / o.stage.id, san.timeout_s,
                     fence=fence, control=control, blocks=blocks)

    return Party(f"{tool_name}:{o.stage.id}", (), None, run)


def start_profile(stages: list[Stage], rubric: Rubric, *, has_gpu: bool, work_dir: Path, seed: int,
                  schedule: Schedule, fence: Fence | None = None, device: ProbeResult | None = None,
                  ncu_tool=None, cache_seed: Path | None = None) -> EarlyProfile | None:
    """Start the ncu run now for ``stages`` (those about to be compiled), waiting at its gate: its
    start-up (ncu, Python, CuPy, the context, the inputs) then overlaps the compiles and the stage
    runs' untimed work, and :func:`profile_stages` opens the gate with the compiled kernels found
    correct. ``cache_seed``: the warm CuPy cache (grader/gpu/warm.py) its own cache starts as a copy of."""
    prof = rubric.profile
    if not (prof.enabled and has_gpu) or not stages:
        return None
    tool = ncu_tool if ncu_tool is not None else toolchain.find_ncu()
    if tool is None or getattr(tool, "path", None) is None:
        return None
    metrics, _absent, _chip = wanted_metrics(rubric, device)
    wrap = command(str(tool.path), [st.kernel for st in stages], metrics, prof.clock_control)
    spec = ProfileSpec(n=prof.n, seed=seed, inputs=sorted({st.inputs for st in stages}), gate=True)
    work_dir = Path(work_dir).resolve()

    def run(control: Control) -> ChildResult[LaunchResult]:
        return launch(PROFILE, spec, work_dir, prof.timeout_s, OUTPUT_LIMIT, wrap=wrap, fence=fence,
                      cache_seed=cache_seed, control=control)

    party = schedule.add(Party("ncu", ("launch",), work_dir / "profile_result.json", run, late=True))
    return EarlyProfile(party, [st.id for st in stages], metrics)


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


def stage_party_spec(job: Job, st: Stage) -> StageSpec:
    """The stage child's spec before its stage is compiled: the seeds, sizes and benchmark settings.
    The compiled kernel (StageOutcome.launch_spec) is handed over at its correctness gate."""
    seeds = job.seeds
    return StageSpec(
        id=st.id, inputs=st.inputs, baseline=st.baseline,
        correctness=[Case(n=n, seed=seeds[n]) for n in job.rubric.correctness_sizes],
        bench=BenchSpec(n=st.bench.n, seed=seeds["bench"],
                        warmup=st.bench.warmup, reps=st.bench.reps, min_reps=st.bench.min_reps,
                        max_seconds=st.bench.max_seconds, flush_l2=st.bench.flush_l2,
                        profile_n=job.rubric.profile.n if job.rubric.profile.enabled else None),
        out_dir=str(job.work / st.id), l2_bytes=job.env.device.l2_bytes if job.env.device is not None else 0, gate=True)


def _stage_party(st: Stage, job: Job) -> Party:
    """The stage's child: fenced, the stage folder is all it may write, CuPy's cache included
    (never the checker's); its limits from the stage's reference (grader/rubric/limits.py)."""
    rubric, work = job.rubric, job.work / st.id
    work.mkdir(parents=True, exist_ok=True)
    spec = stage_party_spec(job, st)
    limit_s = stage_limit(st, rubric).seconds
    start, cache_seed = launch, job.cupy_cache  # bound now: the child may start later, from the schedule's thread

    def run(control: Control) -> ChildResult[StageResult]:
        return start(STAGE, spec, work, limit_s, rubric.output_limit_bytes, cache_dir=work / "cupy-cache",
                     cache_seed=cache_seed, control=control,
                     fence=Fence(scratch=work, gpu=True, output_bytes=rubric.output_limit_bytes,
                                 student_host_code=False))

    return Party(st.id, ("correctness", "bench"), work / "stage_result.json", run, hold_startup=True)


def checker_expectations(job: Job, stages: list[Stage]) -> Expect:
    """The float64 products the checker will be asked for: each correctness size's reference, per
    input kind (grader/children/check.py: Products.precompute). A benchmark's products (its last
    output's reference, the timed launches' fingerprints) are not foreseeable: each launch's inputs
    and each fingerprint's vector are drawn from the OS after the launch before."""
    refs: dict[tuple[int, int, str], None] = {}
    for st in stages:
        for n in job.rubric.correctness_sizes:
            refs[(n, job.seeds[n], st.inputs)] = None
    return Expect(references=list(refs))


def _checker_party(job: Job, expect: Expect) -> Party:
    """The trusted checker: it computes the ``expect``ed products, then waits at its gate ``compare``
    for the list of outputs to judge (gpu/stages.py: check_results opens it)."""
    start = launch  # bound now: the child may start later, from the schedule's thread
    spec = CheckSpec(gate=True, expect=expect)

    def run(control: Control) -> ChildResult[CheckResult]:
        return start(CHECK, spec, job.work, job.rubric.timeouts.checker_s, 20_000,
                     cache_dir=job.work / "cupy-cache", cache_seed=job.cupy_cache, control=control)

    return Party("checker", ("compare",), job.work / "check_result.json", run, late=True)


def _prepare_cupy_cache(job: Job) -> None:
    """The trusted warm CuPy cache (grader/gpu/warm.py): the cache of every child that uses CuPy (the
    stage runs, the checker, the ncu launch; not the sanitizer's launcher) starts as a copy of it."""
    with job.clock.detail("cupy_cache"):
        cache, why = warm.prepare(job.rubric, job.env.device or ProbeResult(ok=False), job.work, job.rubric.timeouts.checker_s)
    if cache is None:
        job.notes.append(f"CuPy's kernels could not be compiled ahead ({why}); each child compiled its own")
        return
    job.cupy_cache = cache.folder
    if cache.warm_s is not None:
        job.clock.add("cupy_cache.warm", cache.warm_s)
