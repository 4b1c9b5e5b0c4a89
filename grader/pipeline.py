"""Grade one submission: a visible list of steps over one typed record of evidence.

:func:`grade` probes the machine, copies the submission in, then runs :data:`STEPS` in the order
listed, which is the order the grading runs; each step takes the :class:`~grader.gpu.job.Job` (the
evidence) and the grading's :class:`~grader.gpu.session.GpuSession` (the GPU schedule, its children
and the background work, planned by grader/gpu/plan.py) and returns the Job, recording what happened
as typed fields (the stage outcomes' verdicts and gaps, items, notes). The session is closed whatever
happens. A student's failure is data, never an exception. The grading process creates no CUDA
context; every GPU step is a child process (see docs/design.md and grader/gpu/stages.py).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from grader.clock import Clock
from grader.compile import toolchain
from grader.compile.intake import INTAKE_FILE, intake
from grader.compile.resources import add_spills
from grader.compile.reuse import listing_store
from grader.compile.sass import SassDumps
from grader.compile.stage import compile_stage
from grader.compile.student import compile_workers, student_user
from grader.evidence.protocol import ProbeResult
from grader.evidence.rubric import Stage
from grader.gpu.device import kept_probe, read_device_file
from grader.gpu.job import Job, Progress
from grader.gpu.ncu_run import profile_stages
from grader.gpu.racecheck import tool_fence
from grader.gpu.session import GpuSession, start_gpu_children
from grader.gpu.stages import check_results, drop_outputs, run_stages, sanitize
from grader.grading import Environment, Grading, ProfileRun, StageOutcome
from grader.model import ItemResult, Verdict
from grader.occupancy.early import CollectedOccupancy, EarlyOccupancy
from grader.occupancy.variants import Variant
from grader.outputs.plots import draw_ahead, ladder_png
from grader.outputs.profile_page import ladder_plot
from grader.rubric.calibration import for_device
from grader.rubric.kinds import REGISTRY
from grader.rubric.peaks import device_peaks
from grader.rubric.types import Rubric
from grader.sandbox import guard as sandbox
from grader.sandbox.fence import Fence
from grader.sandbox.lock import held_in_turn
from grader.score.stages import score

__all__ = ["AFTER_GPU_STEPS", "CPU_STEPS", "GPU_STEPS", "STEPS", "Step", "gpu_turn", "Environment", "Grading",
           "detect_environment", "grade"]


NO_GPU_FLAG = "GPU use switched off (--no-gpu)"


def detect_environment(rubric: Rubric, use_gpu: bool = True, work: Path | None = None,
                       device: ProbeResult | None = None, clock: Clock | None = None,
                       no_gpu_reason: str = NO_GPU_FLAG) -> Environment:
    """The GPU (``device``, a description a batch or a worker probed once; else the machine's kept
    description, else the probe child's, run in ``work``: a temporary folder by default;
    grader/gpu/device.py) and the tools. ``clock`` records "probe.kept" when the kept one was used.
    ``no_gpu_reason``: why there is no GPU when ``use_gpu`` is off (whoever switched it off says so)."""
    reason = no_gpu_reason or NO_GPU_FLAG
    if not use_gpu:
        device = None
    elif device is None:
        t0 = time.monotonic()
        device, reason, kept = kept_probe(rubric.timeouts.probe_s, work)
        if kept and clock is not None:
            clock.add("probe.kept", time.monotonic() - t0, detail=True)
    else:
        reason = ""
    cc = device.capability if device is not None else None
    return Environment(device, reason, toolchain.find_nvcc(), toolchain.find_cuobjdump(),
                       toolchain.nvcc_arch_flags(cc, rubric.arch_without_device), device_peaks(rubric.peak_overrides, rubric.peak_per_sm_clock, device),
                       sandbox=sandbox.mode())


def _occupancy_fence(job: Job) -> Fence:
    from grader.occupancy.early import occupancy_fence

    return occupancy_fence(job.work / "occupancy")


# With a GPU lock (a batch or the service) another grading may hold this GPU while this one compiles:
# its children's start-up and tools are then what keeps that GPU waiting, so the compilers (which
# have that grading's whole GPU turn to finish in) take the host's CPUs only when it leaves them idle.
COMPILE_NICE = 10


def _compile_nice(job: Job) -> int:
    return COMPILE_NICE if job.shares_gpu else 0


def _compile_one(job: Job, st: Stage, sizes: list[int]) -> tuple[StageOutcome, list[tuple[str, float]]]:
    """One stage: nvcc -> cubin, ptxas -v, the launch shape (its SASS is read later: :func:`read_sass`).
    Runs in a pool thread; it touches only its own stage folder and its own outcome, and returns its
    times for the clock."""
    work = job.work / st.id
    work.mkdir(parents=True, exist_ok=True)
    o = StageOutcome(stage=st, gpu_reason="" if job.env.has_gpu else (job.env.device_reason or "no CUDA device"))
    if why := toolchain.unsupported_reason(st.requires_arch, job.env.arch_flags):
        o.unsupported = why  # e.g. the Hopper stage on an Ada GPU: nothing to compile or run here
        return o, []
    t0 = time.monotonic()
    o.compile = compile_stage(st, job.submission, work, job.env.nvcc, job.env.arch_flags, job.rubric,
                              sizes + [st.bench.n], user=student_user(),
                              fence=Fence(scratch=work / "build", nice=_compile_nice(job)), deadline=job.compile_deadline)
    times = [("compile", time.monotonic() - t0)]
    times += [(f"compile.{part}", seconds) for part, seconds in o.compile.seconds.items()]
    if not o.compile.ok and job.intake and (why := job.intake.why_missing(st.file)):
        o.compile.problem = why  # "gemm/naive.cu is a symbolic link ...", not just "file missing"
    elif not o.compile.ok and o.compile.proc is not None and (
            why := toolchain.newer_arch_needed(o.compile.proc.stderr + o.compile.proc.stdout, job.env.arch_flags)):
        o.unsupported = why  # a student's older card: the code is for a newer one, no mistake of theirs
    if not (o.compile.ok and o.compile.cubin):
        o.verdict = Verdict.NOT_COMPILED
    return o, times


COMPILE_POLL_S = 0.02  # how often the compile step looks at the GPU schedule while nvcc runs


def compile_stages(job: Job, gpu: GpuSession) -> Job:
    """Compile every selected stage to a cubin, read ptxas; build the occupancy program.

    Every compile runs side by side on one pool of :func:`compile_workers` threads (one per CPU),
    each thread waiting on its own fenced, limited nvcc exactly as one after another did; occ.cu's
    builds are started on the same pool (grader/occupancy/run.py: start_builds) and handed to the
    occupancy step, so no compiler runs during the GPU steps. As each stage's compile ends, in
    whatever order, its early racecheck child gets the kernel (grader/gpu/racecheck.py) and its SASS
    starts being read in the background (:func:`read_sass` collects it); the outcomes, the phases and
    the progress messages come in the rubric's order."""
    sizes = list(job.rubric.correctness_sizes)
    selected = [st for st in job.rubric.stages if job.wants(st.id)]
    if gpu.sass_dumps is None:
        # Listings read before are reused only where no step of this grading (each one's scratch is in job.work)
        # could reach the reuse folder (grader/compile/reuse.py).
        gpu.sass_dumps = SassDumps(job.env.cuobjdump, compile_workers(),
                                   listing_store(Fence(scratch=job.work, readonly=(job.submission,))))
    with ThreadPoolExecutor(max_workers=compile_workers(), thread_name_prefix="compile") as pool:
        pending = None
        if job.rubric.occupancy is not None and job.wants("occupancy"):
            from grader.occupancy.run import start_builds

            pending = start_builds(job.submission, job.rubric, job.env, job.work / "occupancy", pool,
                                   fence=replace(_occupancy_fence(job), nice=_compile_nice(job)),
                                   deadline=job.compile_deadline)
        _follow_compiles(job, gpu, selected, [pool.submit(_compile_one, job, st, sizes) for st in selected])
        if pending is not None:
            job.progress("occupancy: compiling occ.cu")
            job.prebuilt_occupancy = pending.wait()
            if job.prebuilt_occupancy is not None:
                job.clock.add("build", job.prebuilt_occupancy.seconds, "occupancy")
    return job


def _follow_compiles(job: Job, gpu: GpuSession, selected: list[Stage], futures: list[Future]) -> None:
    """Wait for the stages' compiles, polling the GPU schedule meanwhile (its children reach their
    gates while nvcc runs). Each compile that ends is handed on at once (racecheck, the SASS); each is
    recorded (outcome, phases, progress) once every stage before it in the rubric has been."""
    left, recorded = set(futures), 0
    while left:
        done, left = wait(left, timeout=COMPILE_POLL_S if gpu.schedule is not None else None,
                          return_when=FIRST_COMPLETED)
        for future in done:
            o, _times = future.result()
            gpu.hand_kernel(o)
            if o.compile is not None and o.compile.ok and o.compile.cubin and gpu.sass_dumps is not None:
                gpu.sass_dumps.start(o.stage.id, o.compile.cubin)
        while recorded < len(futures) and futures[recorded].done() and futures[recorded] not in left:
            st = selected[recorded]
            job.progress(f"compiling {st.id}")
            job.outcomes[st.id], times = futures[recorded].result()
            for name, seconds in times:
                job.clock.add(name, seconds, st.id)
            recorded += 1
        gpu.poll()


def read_sass(job: Job, gpu: GpuSession) -> Job:
    """The SASS of every compiled stage, read in the background since its compile ended
    (grader/compile/sass.py: SassDumps): the scored items need it."""
    if gpu.sass_dumps is not None:
        done = gpu.sass_dumps.collect()
        for sid in [s for s in job.outcomes if s in done]:  # the rubric's order
            o = job.outcomes[sid]
            o.sass, seconds = done[sid]
            job.clock.add("sass", seconds, sid)
            if o.compile is not None and o.compile.kernel is not None and o.sass.available:
                add_spills(o.compile.kernel, o.sass.local_bytes)  # a kernel with a stack frame: its STL/LDL
    return job


def profile(job: Job, gpu: GpuSession) -> Job:
    """One Nsight Compute run over every correct kernel; each stage gets its metrics or a typed gap.
    It measures, so it first waits for what still runs on the GPU (the student's occupancy program).
    Meanwhile the grading process, idle, draws the ladder plot for the outputs (grader/outputs/plots.py)."""
    if job.env.has_gpu and (ladder := ladder_plot(job.outcomes, job.env.peaks, job.work.parent)) is not None:
        draw_ahead(ladder_png, *ladder)  # the timings are final: the ladder is drawn while ncu runs
    if any(REGISTRY.of(i).needs_profile for o in job.outcomes.values() for i in o.stage.items):
        job.progress("profiling with Nsight Compute")
    if gpu.schedule is not None:  # ncu measures: what still runs (the occupancy program) ends first
        gpu.schedule.quiet()
        _grade_occupancy_ahead(job, gpu)
    run = profile_stages(job.outcomes, job.rubric, has_gpu=job.env.has_gpu, gpu_reason=job.env.device_reason,
                         work_dir=job.work / "ncu", seed=job.seeds.get("bench", 0), device=job.env.device,
                         fence=tool_fence(job.work / "ncu", list(job.outcomes.values())),
                         early=gpu.profile, schedule=gpu.schedule)
    if run is not None:
        job.profile = ProfileRun(command=list(run.command), reason=run.reason,
                                 wall_s=run.proc.wall_s if run.proc else None, notes=list(run.notes),
                                 dropped_metrics=list(run.dropped_metrics))
    return job


def _occupancy_items(job: Job, early: EarlyOccupancy | CollectedOccupancy | None) -> list[ItemResult]:
    from grader.occupancy.run import grade_occupancy_submission

    items = grade_occupancy_submission(job.submission, job.rubric, job.env, job.work / "occupancy", job.progress,
                                       fence=_occupancy_fence(job), clock=job.clock,
                                       plots_dir=job.work.parent,  # the results folder
                                       prebuilt=job.prebuilt_occupancy, early=early)
    if job.variant is not None:
        from grader.occupancy.variants import annotate

        items = annotate(items, job.variant)
    return items


def _grade_occupancy_ahead(job: Job, gpu: GpuSession) -> None:
    """While ncu profiles, the grading process only waits: when the occupancy runs on the schedule have
    ended (their results read here, on the schedule's thread), the occupancy items (their checks,
    answers and plot) are graded on another thread meanwhile. grade_occupancy
    collects them."""
    early = gpu.occupancy
    if job.rubric.occupancy is None or not job.wants("occupancy") or early is None or not early.finished():
        return
    collected = early.collect()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="occupancy")
    gpu.occupancy_ahead = pool.submit(_occupancy_items, job, collected)
    pool.shutdown(wait=False)  # the thread ends with its one task


def score_stages(job: Job, _gpu: GpuSession) -> Job:
    job.items += score(job.outcomes, job.env.peaks)
    return job


def grade_occupancy(job: Job, gpu: GpuSession) -> Job:
    """The occupancy items. With a GPU schedule its program and measurements ran on it beside the other
    steps (grader/occupancy/early.py) and are only collected here; without one they run now."""
    if job.rubric.occupancy is not None and job.wants("occupancy"):
        job.progress("grading the occupancy exercises")
        if gpu.occupancy_ahead is not None:  # graded while ncu ran (_grade_occupancy_ahead)
            job.items += gpu.occupancy_ahead.result()
            return job
        # Its GPU runs are over unless there were no early ones (no stage compiled) or they did not get
        # their turn: then they run now, under the GPU lock again, as every GPU step.
        early = gpu.occupancy
        with gpu_turn(job.gpu_lock, job.clock, job.env.has_gpu and (early is None or not early.finished())):
            job.items += _occupancy_items(job, early)
    return job


def grade_report(job: Job, _gpu: GpuSession) -> Job:
    if job.rubric.report is not None and job.wants("report"):
        from grader.writeup.run import Gradings, grade_report_submission

        job.progress("checking the written report")
        job.items += grade_report_submission(job.submission, job.rubric, job.outcomes,
                                             Gradings(job.env.device, tuple(job.citations_from)))
    return job


def alone_on_gpu(job: Job) -> bool:
    """Whether this grading's GPU children may start before the compiles: it has a GPU and shares it
    with no other grading (with a GPU lock nothing may touch the GPU before the lock is held: they start
    then, as the first GPU step)."""
    return job.env.has_gpu and not job.shares_gpu


def sharing_gpu(job: Job) -> bool:
    """Whether this grading's GPU children start only once the GPU lock is held (after the compiles)."""
    return job.env.has_gpu and job.shares_gpu


@dataclass(frozen=True)
class Step:
    """One step of the grading: ``run(job, gpu)`` returns the Job; timed as a phase under its name.
    ``only_if(job)``: whether it runs at all (no phase when it does not); None: always."""

    run: Callable[[Job, GpuSession], Job]
    only_if: Callable[[Job], bool] | None = None

    @property
    def name(self) -> str:
        return self.run.__name__


# The grading, in the order it runs. Each step takes the Job and the GPU session and returns the Job.
# Before the GPU lock: the CPU's work, beside which the GPU children start up when alone on the GPU.
CPU_STEPS: tuple[Step, ...] = (
    Step(start_gpu_children, alone_on_gpu),  # the GPU plan's children start up and wait at their first gates
    Step(compile_stages),  # nvcc -> cubin, ptxas -v; each kernel handed to its racecheck child, its SASS read aside
)
# Under the GPU lock when one is given (see grade()).
GPU_STEPS: tuple[Step, ...] = (
    Step(start_gpu_children, sharing_gpu),  # sharing the GPU: the plan's children start only now, for the compiled stages
    Step(run_stages),  # each kernel's correctness, then its timed benchmark alone; the occupancy
    # measurements after them, the occupancy program once nothing is timed
    Step(check_results),  # outputs against float64 references; timings of the correct kernels
    Step(sanitize),  # racecheck on shared-memory stages, memcheck on failed ones
    Step(drop_outputs),  # the output matrices, unless --keep-outputs
    Step(profile),  # once the GPU is quiet: one Nsight Compute run over the correct kernels, while the
    # ladder plot is drawn and the occupancy items are graded aside
)
# After the last GPU measurement: the GPU lock is given back first, so the next grading on this GPU
# starts while these run (grade_occupancy takes it again in the one case it still needs the GPU).
AFTER_GPU_STEPS: tuple[Step, ...] = (
    Step(read_sass),  # the SASS dumps started as each stage compiled
    Step(score_stages),  # rubric items from the outcomes
    Step(grade_occupancy),  # the occupancy exercises section (graded aside while ncu ran, or now), when the rubric has one
    Step(grade_report),  # the written report section, when the rubric has one
)
STEPS = CPU_STEPS + GPU_STEPS + AFTER_GPU_STEPS


def gpu_steps_have_work(job: Job) -> bool:
    """Whether a GPU step will launch anything: only for a stage that compiled. With none (every selected
    stage failed to build, or only the occupancy section was selected) the GPU steps have nothing to run
    and wait for no GPU lock: an occupancy-only grading would wait for the lock other gradings hold, to
    run nothing (docs/measurements/2026-12-01-h200-speed-round4.md). The
    occupancy section takes the lock itself when its runs need it (grade_occupancy)."""
    return any(o.compile is not None and o.compile.ok for o in job.outcomes.values())


@contextmanager
def gpu_turn(lock: Path | None, clock: Clock, needed: bool) -> Iterator[None]:
    """Hold the GPU's lock file (an exclusive flock) for the steps that use the GPU.

    A batch or service worker grades the next submission's CPU steps while another grading holds
    the GPU, but never lets two gradings use one GPU at once (timings would disturb each other). The
    wait and the time held are phases ("gpu_wait", "gpu_held"), from which a batch reports each GPU's
    busy share. No lock, or no GPU in this grading: nothing to wait for."""
    if lock is None or not needed:
        yield
        return
    t0 = time.monotonic()
    with held_in_turn(lock):  # first come, first served (grader/sandbox/lock.py says why)
        clock.add("gpu_wait", time.monotonic() - t0, detail=False)
        t1 = time.monotonic()
        try:
            yield
        finally:
            clock.add("gpu_held", time.monotonic() - t1)


def _with_variant(rubric: Rubric, student: str | None, notes: list[str]) -> tuple[Rubric, Variant | None]:
    """The rubric with the student's occupancy numbers, when the course draws variants (a note names it)."""
    cfg = rubric.occupancy
    if cfg is None or not cfg.variants:
        return rubric, None
    if not (student or "").strip():
        notes.append("occupancy: this course gives each student their own numbers, but no student was named "
                     "(grade --student ID): graded with the handout's numbers")
        return rubric, None
    from grader.occupancy.variants import variant_for

    variant = variant_for(cfg, str(student))
    notes.append(f"occupancy: graded for your variant {variant.name} ({variant.student}): " + "; ".join(variant.lines()))
    return replace(rubric, occupancy=variant.cfg), variant


def grade(submission: Path, rubric: Rubric, out_dir: Path, *, stages: list[str] | None = None,
          use_gpu: bool = True, keep_outputs: bool = False, progress: Progress = lambda _msg: None,
          env: Environment | None = None, gpu_lock: Path | None = None,
          device_file: Path | None = None, student: str | None = None,
          citations_from: Sequence[Grading] = (), no_gpu_reason: str = NO_GPU_FLAG) -> Grading:
    """Grade one submission into ``out_dir``. ``gpu_lock``: a lock file shared by every grading on
    this GPU; the GPU steps run holding it (see :func:`gpu_turn`). ``device_file``: the GPU's
    description, probed once by a batch (grader/gpu/device.py): no probe child. ``student``: who
    submitted, for the occupancy variants (rubric ``occupancy.variants``; ignored without them).
    ``citations_from``: stored gradings of the student's kernels, for a report measured on another
    GPU (writeup/run.py)."""
    started = time.monotonic()
    clock = Clock()
    out_dir = Path(out_dir).resolve()  # children run in other folders
    out_dir.mkdir(parents=True, exist_ok=True)
    progress("probing the GPU and tools")
    notes: list[str] = []
    rubric, variant = _with_variant(rubric, student, notes)
    if env is None:
        # Not under the GPU lock: the probe only reads the device's attributes and launches no kernel,
        # so it cannot disturb another grading's timings, and locking it would keep this grading from
        # compiling while the other one holds the GPU.
        with clock.step("probe"):
            device = None
            if device_file is not None and use_gpu:
                device, problem = read_device_file(Path(device_file))
                if problem:
                    notes.append(f"the GPU's description could not be used ({problem}); the GPU was probed again")
            env = detect_environment(rubric, use_gpu, device=device, clock=clock, no_gpu_reason=no_gpu_reason)
    # This GPU's calibration entry (calibration/*.yaml beside the rubric), or a line saying there is none.
    rubric, entry, calibrated = for_device(rubric, env.device)
    notes += [calibrated] if calibrated else []
    # The submission is copied once (no link followed, sizes capped) and only the copy is graded.
    with clock.step("intake"):
        taken = intake(Path(submission), out_dir / "work" / "submission", markers=[s.file for s in rubric.stages])
        taken.write(out_dir / INTAKE_FILE)  # the batch reads whether the submission was refused
    job = Job(rubric, taken.root, out_dir / "work", env, stages, keep_outputs, progress, started,
              notes=notes + list(taken.notes), intake=taken, clock=clock, gpu_lock=gpu_lock, variant=variant,
              citations_from=list(citations_from))
    with GpuSession() as gpu:  # closed whatever happens: every child it started has ended
        job = _run_steps(CPU_STEPS, job, gpu)
        with gpu_turn(gpu_lock, clock, env.has_gpu and gpu_steps_have_work(job)):
            job = _run_steps(GPU_STEPS, job, gpu)
        job = _run_steps(AFTER_GPU_STEPS, job, gpu)
    job.timeline = gpu.timeline
    grading = job.grading()
    grading.cpu_s, grading.cpu_self_s = _cpu_seconds()  # a batch's gradings share the host's CPUs: what this one used
    grading.submission = str(submission)  # the path given, not its copy under work/ (removed after)
    grading.calibration = entry.text if entry is not None else ""
    return grading


def _run_steps(steps: Sequence[Step], job: Job, gpu: GpuSession) -> Job:
    for step in steps:
        if step.only_if is None or step.only_if(job):
            with job.clock.step(step.name):
                job = step.run(job, gpu)
    return job


def _cpu_seconds() -> tuple[float, float]:
    """(CPU time, user + system, of this process and of every child process it has waited for, with
    theirs (the compilers, the GPU children and their tools): what a grading costs the host's CPUs;
    this process's own share of it)."""
    import resource

    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    mine = own.ru_utime + own.ru_stime
    return round(mine + children.ru_utime + children.ru_stime, 2), round(mine, 2)

