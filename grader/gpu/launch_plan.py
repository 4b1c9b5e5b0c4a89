"""What a grading's GPU session launches, as data: every planned party's spec, folder, fence and limit.

grader/gpu/plan.py decides which parties a grading has and when each starts (:class:`GpuPlan`). This
module reads the Job once, when the session starts, and turns that plan into the plain frozen records
grader/gpu/session.py executes: the seeds, the stage children's specs and time limits
(grader/rubric/limits.py), the racecheck children's known kernels and fences (racecheck's size, limit
and blocks are the rubric's Sanitizer record), the checker's expected products, the profiler's spec and
the metrics this chip's ncu knows, and the warm CuPy cache's request (grader/gpu/warm.py). This floor's
decisions come first, what the floors below say of them last. The session never reads the Job: it
builds each party from its record; the compile step hands it each compiled kernel as the children get
it (:func:`compiled_kernel`).
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from grader.compile import toolchain
from grader.evidence.limits import StageLimit
from grader.evidence.protocol import (
    BenchSpec,
    Case,
    CheckSpec,
    Expect,
    Kernel,
    LaunchShape,
    ProbeResult,
    ProfileSpec,
    StageSpec,
)
from grader.evidence.rubric import Stage
from grader.evidence.tools import Tool
from grader.gpu import warm
from grader.gpu.job import Job
from grader.gpu.plan import GpuPlan, Role, Starts, gpu_plan
from grader.gpu.racecheck import may_use_shared_memory, stage_folders_fence, uses_shared_memory
from grader.grading import StageOutcome
from grader.profile.ncu import wanted_metrics
from grader.rubric.limits import stage_limit
from grader.rubric.occupancy import OccupancyConfig
from grader.rubric.types import Rubric, Sanitizer
from grader.sandbox.fence import Fence

__all__ = ["CheckerLaunch", "CompiledKernel", "LaunchPlan", "OccupancyLaunch", "ProfileLaunch", "RacecheckLaunch",
           "StageLaunch", "checker_expectations", "compiled_kernel", "launch_plan", "stage_party_spec"]


@dataclass(frozen=True)
class StageLaunch:
    """A stage's child: its spec (the compiled kernel is handed over at its correctness gate), its
    folder (all it may write, CuPy's cache included) and its time limit."""

    stage: str
    spec: StageSpec
    work: Path
    limit: StageLimit
    output_limit: int


@dataclass(frozen=True)
class RacecheckLaunch:
    """A stage's racecheck child started before its compile: what is known of the kernel then (its id,
    name and inputs; no cubin, no launch shape), waiting at its gate for the compiled one."""

    stage: str
    known: Kernel
    work: Path
    fence: Fence


@dataclass(frozen=True)
class CheckerLaunch:
    """The trusted checker: the products it computes ahead, then it waits for the outputs to judge."""

    spec: CheckSpec
    work: Path
    timeout_s: float


@dataclass(frozen=True)
class ProfileLaunch:
    """The profiler under ncu, waiting at its gate for the kernels found correct."""

    spec: ProfileSpec
    ncu: str  # the tool that runs the child
    kernels: tuple[str, ...]  # the kernels' names ncu profiles
    stage_ids: tuple[str, ...]
    metrics: tuple[str, ...]  # those this chip's ncu knows
    clock_control: str
    work: Path
    timeout_s: float
    fence: Fence


@dataclass(frozen=True)
class OccupancyLaunch:
    """The occupancy parties' settings; occ.cu's builds, made beside the compiles, come with the runs."""

    cfg: OccupancyConfig
    work: Path


@dataclass(frozen=True)
class CompiledKernel:
    """A compiled stage as its children get it: the kernel to launch, and whether racecheck looks at it."""

    stage: str
    kernel: Kernel
    shared_memory: bool
    cubin_dir: Path  # the folder a tool child launching it reads (racecheck's fence)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything the session launches for one grading, read from the Job once (see the module docstring)."""

    gpu: GpuPlan
    seeds: dict[int | str, int]
    device: ProbeResult | None
    warm: warm.WarmRequest | None
    stages: tuple[StageLaunch, ...] = ()
    racecheck: tuple[RacecheckLaunch, ...] = ()
    checker: CheckerLaunch | None = None
    profile: ProfileLaunch | None = None
    sanitizer: Sanitizer = Sanitizer()  # racecheck's size, limit and blocks (the rubric's), early or beside the runs
    sanitizer_tool: Tool | None = None  # compute-sanitizer, found when a racecheck child starts with the session
    racecheck_work: Path = Path()  # the ungated racecheck children's folder (beside the runs)
    occupancy: OccupancyLaunch | None = None

    def limit(self, stage: str) -> StageLimit | None:
        return next((s.limit for s in self.stages if s.stage == stage), None)


def compiled_kernel(o: StageOutcome) -> CompiledKernel | None:
    """What a stage's children get once it has compiled; None when it did not compile."""
    c = o.compile
    if c is None or not c.ok or c.cubin is None or c.kernel is None or c.launch is None:
        return None
    return CompiledKernel(o.stage.id, o.launch_spec(), uses_shared_memory(o), Path(c.cubin).parent)


def _draw_seeds(rubric: Rubric) -> dict[int | str, int]:
    seeds: dict[int | str, int] = {n: secrets.randbelow(2**31) for n in rubric.correctness_sizes}
    seeds["bench"] = secrets.randbelow(2**31)
    return seeds


def _racecheck_early(job: Job, st: Stage) -> bool:
    """Whether a stage's racecheck child starts with the session: its compile says it uses shared
    memory or, not compiled yet, its source may (grader/gpu/racecheck.py: may_use_shared_memory)."""
    o = job.outcomes.get(st.id)
    if o is not None and o.compile is not None and o.compile.ok:
        return uses_shared_memory(o)
    return may_use_shared_memory(job.submission, st)


def _ncu_found() -> bool:
    tool = toolchain.find_ncu()
    return tool is not None and getattr(tool, "path", None) is not None


def plan_for(job: Job, stages: list[Stage] | None = None) -> GpuPlan:
    """The grading's GPU plan (grader/gpu/plan.py) for ``stages`` (compiled already, when the session
    starts after the GPU lock), else for every selected stage this GPU can run."""
    candidates = stages if stages is not None else [st for st in job.rubric.stages if job.wants(st.id)]
    early = [st.id for st in candidates if _racecheck_early(job, st)] if job.rubric.sanitizer.racecheck else []
    ncu = job.env.has_gpu and job.rubric.profile.enabled and _ncu_found()
    return gpu_plan(job.rubric, candidates, job.env.arch_flags, has_gpu=job.env.has_gpu,
                    racecheck_early=frozenset(early), profile=ncu, occupancy=job.wants("occupancy"))


def stage_party_spec(rubric: Rubric, st: Stage, seeds: dict[int | str, int], work: Path,
                     device: ProbeResult | None) -> StageSpec:
    """The stage child's spec before its stage is compiled: the seeds, sizes and benchmark settings.
    The compiled kernel (StageOutcome.launch_spec) is handed over at its correctness gate."""
    return StageSpec(
        id=st.id, inputs=st.inputs, baseline=st.baseline,
        correctness=[Case(n=n, seed=seeds[n]) for n in rubric.correctness_sizes],
        bench=BenchSpec(n=st.bench.n, seed=seeds["bench"],
                        warmup=st.bench.warmup, reps=st.bench.reps, min_reps=st.bench.min_reps,
                        max_seconds=st.bench.max_seconds, flush_l2=st.bench.flush_l2,
                        profile_n=rubric.profile.n if rubric.profile.enabled else None),
        out_dir=str(work / st.id), l2_bytes=device.l2_bytes if device is not None else 0, gate=True)


def checker_expectations(rubric: Rubric, seeds: dict[int | str, int], stages: list[Stage]) -> Expect:
    """The float64 products the checker will be asked for: each correctness size's reference, per
    input kind (grader/children/check.py: Products.precompute). A benchmark's products (its last
    output's reference, the timed launches' fingerprints) are not foreseeable: each launch's inputs
    and each fingerprint's vector are drawn from the OS after the launch before."""
    refs: dict[tuple[int, int, str], None] = {}
    for st in stages:
        for n in rubric.correctness_sizes:
            refs[(n, seeds[n], st.inputs)] = None
    return Expect(references=list(refs))


def _profile_launch(rubric: Rubric, stages: list[Stage], seed: int, work: Path, device: ProbeResult | None,
                    fence: Fence) -> ProfileLaunch | None:
    """The ncu run for ``stages`` (those about to be compiled): the metrics this chip's ncu knows
    (grader/profile/ncu.py: wanted_metrics), its spec and fence."""
    prof = rubric.profile
    tool = toolchain.find_ncu() if prof.enabled and stages else None
    if tool is None or tool.path is None:
        return None
    spec = ProfileSpec(n=prof.n, seed=seed, inputs=sorted({st.inputs for st in stages}), gate=True)
    metrics, _absent, _chip = wanted_metrics(rubric, device)
    return ProfileLaunch(spec, str(tool.path), tuple(st.kernel for st in stages), tuple(st.id for st in stages),
                         tuple(metrics), prof.clock_control, work.resolve(), prof.timeout_s, fence)


def launch_plan(job: Job, stages: list[Stage] | None = None) -> LaunchPlan:
    """The session's launches for ``stages`` (compiled already, with a GPU lock), else for every selected
    stage this GPU can run: :func:`plan_for`'s parties, each with its record; new seeds. The decisions of
    this floor come first (the parties, their specs, folders and fences, the warm cache's request), then
    what the floors below say of them: ncu's metrics on this chip, each stage's time limit."""
    rubric, device, work = job.rubric, job.env.device, job.work
    plan = plan_for(job, stages)
    if not plan.parties:
        return LaunchPlan(plan, {}, device, None)
    seeds = _draw_seeds(rubric)
    now = plan.starting(Starts.SESSION)
    staged = [rubric.stage(p.name) for p in now if p.role is Role.STAGE]
    early = [rubric.stage(p.stage) for p in now if p.role is Role.RACECHECK and p.stage is not None]
    checker = None
    if any(p.role is Role.CHECKER for p in now):
        checker = CheckerLaunch(CheckSpec(gate=True, expect=checker_expectations(rubric, seeds, staged)), work,
                                rubric.timeouts.checker_s)
    racecheck = tuple(RacecheckLaunch(st.id, Kernel(cubin="", kernel=st.kernel, inputs=st.inputs, id=st.id,
                                                    launch=LaunchShape([], [], 0)),
                                      work / "racecheck" / st.id,
                                      stage_folders_fence(work / "racecheck" / st.id, work, [st])) for st in early)
    specs = [stage_party_spec(rubric, st, seeds, work, device) for st in staged]
    warm_request = warm.request(rubric, device or ProbeResult(ok=False), work, rubric.timeouts.checker_s)
    occupancy = None
    if rubric.occupancy is not None and plan.party("occupancy:measure") is not None:
        occupancy = OccupancyLaunch(rubric.occupancy, work / "occupancy")
    profile = None
    if any(p.role is Role.PROFILE for p in now):
        profile = _profile_launch(rubric, staged, seeds["bench"], work / "ncu", device,
                                  stage_folders_fence(work / "ncu", work, staged))
    limits = [stage_limit(st, rubric) for st in staged]
    return LaunchPlan(
        plan, seeds, device, warm_request,
        stages=tuple(StageLaunch(st.id, spec, work / st.id, limit, rubric.output_limit_bytes)
                     for st, spec, limit in zip(staged, specs, limits)),
        racecheck=racecheck, checker=checker, profile=profile, sanitizer=rubric.sanitizer,
        sanitizer_tool=toolchain.find_compute_sanitizer() if early else None,
        racecheck_work=work / "racecheck", occupancy=occupancy)
