"""A grading's GPU session: this module builds every party of its schedule (grader/sandbox/turns.py).

The parties, and when each starts:

* a child per stage (:func:`start_gpu_children`), the trusted checker, and the profiler under ncu
  (:func:`start_profile`), right after the probe: each does its untimed start-up (Python, NumPy and
  CuPy, the CUDA context, its inputs and buffers, cuBLAS; grader/children/stage.py: ``Runner.prepare``)
  while nvcc compiles, and waits at its first gate. The compiled kernel reaches each stage child at its
  correctness turn (the gate's go hands it over), and the profiler's kernels at its own gate;
* racecheck's children (:func:`start_early_racecheck`) with them, each handed its stage's kernel as
  that stage's compile ends (:func:`hand_racecheck_kernel`), and one beside the stage runs for a
  compiled shared-memory stage that had none (:func:`start_missing_racecheck`); their runners and the
  verdicts are grader/gpu/racecheck.py's;
* the occupancy measurements and the student's occupancy program (:func:`start_occupancy`), with the
  stage runs (grader/occupancy/early.py holds them and says when each goes).

A stage that did not compile has its children stopped at their gates. Why the start-up comes first, with
its measured effect: docs/design.md ("Gates"). With a GPU lock (a batch or the service: another grading
may be timing kernels on this GPU while this one compiles) nothing may touch the GPU before the lock
is held, so the same parties are started by run_stages, after the lock (:func:`start_gpu_children`
says which way).
"""
from __future__ import annotations

import secrets
from pathlib import Path

from grader import pyplot
from grader.children.protocol import (
    CHECK,
    PROFILE,
    STAGE,
    BenchSpec,
    Case,
    CheckResult,
    CheckSpec,
    Expect,
    Kernel,
    LaunchResult,
    LaunchShape,
    OccupancyResult,
    ProbeResult,
    ProfileSpec,
    StageResult,
    StagesGo,
    StageSpec,
)
from grader.compile import toolchain
from grader.gpu import warm
from grader.gpu.job import Job
from grader.gpu.ncu_run import EarlyProfile, stage_spec, wanted_metrics
from grader.gpu.racecheck import GATE as RACECHECK_GATE
from grader.gpu.racecheck import blocks_for, may_use_shared_memory, stage_folders_fence, tool_fence, uses_shared_memory
from grader.gpu.sanitize import SanitizerRun, run_gated, run_tool
from grader.grading import StageOutcome
from grader.model import ProcRecord
from grader.occupancy.build import Prebuilt
from grader.occupancy.child import CHILD_TIMEOUT_S, run_child
from grader.occupancy.early import GATE as OCCUPANCY_GATE
from grader.occupancy.early import EarlyOccupancy, ProgramRun, occupancy_fence, program_now, wants_child, wants_program
from grader.profile.ncu import OUTPUT_LIMIT, command
from grader.records import from_jsonable, to_jsonable
from grader.rubric.limits import stage_limit
from grader.rubric.occupancy import OccupancyConfig
from grader.rubric.types import Rubric, Stage
from grader.sandbox.fence import Fence
from grader.sandbox.launch import ChildResult, launch
from grader.sandbox.process import Control
from grader.sandbox.turns import Party, Schedule, parallel_children

__all__ = ["checker_expectations", "hand_racecheck_kernel", "stage_party_spec", "start_early_racecheck", "start_gpu_children",
           "occupancy_parties", "start_missing_racecheck", "start_occupancy", "start_profile"]


def start_gpu_children(job: Job, only: list[Stage] | None = None) -> None:
    """Start, on a new GPU schedule, a child for every stage about to be compiled (``only``: for these,
    compiled already), a racecheck child for each that may use shared memory, the checker and the
    profiler; each does its untimed start-up and waits at its
    first gate. Nothing without a GPU, or when no stage is to be graded. Idempotent: a second call
    (run_stages, after an early one) does nothing."""
    if job.schedule is not None or not job.env.has_gpu:
        return
    stages = only if only is not None else [
        st for st in job.rubric.stages
        if job.wants(st.id) and not toolchain.unsupported_reason(st.requires_arch, job.env.arch_flags)]
    if not stages:
        return
    rubric = job.rubric
    job.seeds = {n: secrets.randbelow(2**31) for n in rubric.correctness_sizes}
    job.seeds["bench"] = secrets.randbelow(2**31)
    _prepare_cupy_cache(job)
    pyplot.preload()  # matplotlib, imported while this process waits for its children
    sched = job.schedule = Schedule(parallel_children(job.env.device))
    for st in stages:  # first: they are the ones every later turn waits for
        job.stage_runs[st.id] = sched.add(_stage_party(st, job))
    start_early_racecheck(job, stages)  # their kernels are handed over as each stage compiles
    job.checker = sched.add(_checker_party(job, checker_expectations(job, stages)))
    work = job.work / "ncu"
    job.early_profile = start_profile(stages, rubric, has_gpu=True, work_dir=work, seed=job.seeds["bench"],
                                      device=job.env.device, schedule=sched, cache_seed=job.cupy_cache,
                                      fence=stage_folders_fence(work, job, stages))


def start_early_racecheck(job: Job, stages: list[Stage]) -> None:
    """Put a gated racecheck child on the schedule for each of ``stages`` that may use shared memory
    (compiled already: that does; else :func:`may_use_shared_memory`). Called by start_gpu_children,
    after the stage children and before the checker and the profiler."""
    san, sched = job.rubric.sanitizer, job.schedule
    if not san.racecheck or sched is None:
        return
    tool = toolchain.find_compute_sanitizer()
    for st in stages:
        o = job.outcomes.get(st.id)
        known = o is not None and o.compile is not None and o.compile.ok
        if (uses_shared_memory(o) if known and o is not None else may_use_shared_memory(job.submission, st)):
            job.early_racecheck[st.id] = sched.add(_gated_party(job, st, tool))


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


def hand_racecheck_kernel(job: Job, o: StageOutcome) -> None:
    """A stage's compile has ended: hand its early racecheck child the kernel if it uses shared
    memory, else stop the child at its gate."""
    party, sched = job.early_racecheck.get(o.stage.id), job.schedule
    if party is None or sched is None:
        return
    if o.compile is not None and o.compile.ok and uses_shared_memory(o):
        party.payloads[RACECHECK_GATE] = to_jsonable(StagesGo([stage_spec(o)]))
        sched.open(party)
    else:
        sched.stop(party)
        del job.early_racecheck[o.stage.id]


def start_missing_racecheck(job: Job, compiled: list[StageOutcome]) -> None:
    """Beside the stage runs, a racecheck child (ungated) for each compiled shared-memory stage that
    had none before the compiles: it is a correctness tool (nothing timed), so it shares the GPU
    with their untimed parts, and the timed parts wait for it (grader/sandbox/turns.py)."""
    if not job.rubric.sanitizer.racecheck or job.schedule is None:
        return
    tool = toolchain.find_compute_sanitizer()
    for o in compiled:
        if o.stage.id not in job.early_racecheck and uses_shared_memory(o):
            job.early_racecheck[o.stage.id] = job.schedule.add(_ungated_party(job, "racecheck", o, tool),
                                                               start=False)


def _ungated_party(job: Job, tool_name: str, o: StageOutcome, tool) -> Party:
    san, work = job.rubric.sanitizer, job.work / tool_name
    start, blocks = run_tool, blocks_for(job, tool_name)  # bound now: the run may start from the schedule's thread

    def run(control: Control) -> SanitizerRun:
        return start(tool_name, tool, stage_spec(o), san.n, work / o.stage.id, san.timeout_s,
                     fence=tool_fence(work, [o]), control=control, blocks=blocks)

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


def start_occupancy(job: Job, stage_runs: list[Party]) -> list[Party]:
    """The grading's occupancy parties (:func:`occupancy_parties`), its measurements ``after`` the stage
    runs; the parties that take an exclusive turn, to be taken after the stages' benchmarks."""
    cfg, sched = job.rubric.occupancy, job.schedule
    if cfg is None or not job.wants("occupancy") or sched is None:
        return []
    work = job.work / "occupancy"
    job.early_occupancy = occupancy_parties(cfg, job.prebuilt_occupancy, work, sched, stage_runs,
                                            fence=occupancy_fence(work))
    return job.early_occupancy.timed() if job.early_occupancy is not None else []


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
    early = EarlyOccupancy(schedule, builds, work, fence)
    if wants_child(builds, cfg):
        measure_now = run_child  # bound now: it starts later, on the schedule's thread

        def measure(control: Control) -> tuple[OccupancyResult | None, ProcRecord]:
            return measure_now(cfg, builds, work, CHILD_TIMEOUT_S, fence=fence, gate=True, control=control)

        early.measure = schedule.add(Party("occupancy:measure", (OCCUPANCY_GATE,), work / "occupancy_result.json",
                                           measure, after=list(after)), start=False)
    if wants_program(builds):
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
