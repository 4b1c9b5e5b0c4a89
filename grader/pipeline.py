"""Grade one submission: a visible list of steps over one typed state.

:func:`grade` probes the machine, then runs :data:`STEPS` in order; each step takes the
:class:`~grader.grading.Job` and returns it, recording what happened as typed fields (the
stage outcomes' verdicts and gaps, items, notes). A student's failure is data, never an
exception. The grading process creates no CUDA context; every GPU step is a child process
(see docs/design.md and grader/run/stages.py).
"""
from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from grader.build import toolchain
from grader.build.compile import compile_stage
from grader.build.intake import INTAKE_FILE, intake
from grader.build.sass import dump_sass
from grader.build.student import student_user
from grader.children.launch import launch
from grader.grading import Environment, Grading, Job, ProfileRun, Progress, StageOutcome
from grader.model import Verdict
from grader.profile.collect import profile_stages
from grader.run import sandbox
from grader.run.fence import Fence
from grader.run.stages import check_results, drop_outputs, run_stages, sanitize, tool_fence
from grader.score.stages import score
from grader.spec.peaks import device_peaks
from grader.spec.types import Rubric

__all__ = ["STEPS", "Environment", "Grading", "detect_environment", "grade"]


def detect_environment(rubric: Rubric, use_gpu: bool = True, work: Path | None = None) -> Environment:
    """The GPU (asked by the probe child, in ``work``: a temporary folder by default) and the tools."""
    device, reason = None, "GPU use switched off (--no-gpu)"
    if use_gpu:
        with tempfile.TemporaryDirectory(prefix="grader-probe-") as tmp:
            child = launch("probe", {}, Path(work or tmp), rubric.timeouts.probe_s, 20_000)
        device = child.result if child.result and "ok" in child.result else None
        if device is None:
            reason = f"the device probe failed ({child.proc.brief()}): {child.proc.stderr.strip()[-300:]}"
        elif not device.get("ok"):
            reason = device.get("reason", "")
        else:
            reason = ""
    cc = tuple(device["cc"]) if device and device.get("ok") else None
    return Environment(device, reason, toolchain.find_nvcc(), toolchain.find_cuobjdump(),
                       toolchain.nvcc_arch_flags(cc, rubric.arch_without_device), device_peaks(rubric, device),
                       sandbox=sandbox.mode())


def compile_stages(job: Job) -> Job:
    """Compile every selected stage to a cubin, read ptxas and the SASS."""
    sizes = list(job.rubric.correctness_sizes)
    for st in job.rubric.stages:
        if not job.wants(st.id):
            continue
        job.progress(f"compiling {st.id}")
        work = job.work / st.id
        work.mkdir(parents=True, exist_ok=True)
        o = StageOutcome(stage=st, gpu_reason="" if job.env.has_gpu else (job.env.device_reason or "no CUDA device"))
        o.compile = compile_stage(st, job.submission, work, job.env.nvcc, job.env.arch_flags, job.rubric,
                                  sizes + [st.bench.n], user=student_user(), fence=Fence(scratch=work / "build"))
        if not o.compile.ok and job.intake and (why := job.intake.why_missing(st.file)):
            o.compile.problem = why  # "gemm/naive.cu is a symbolic link ...", not just "file missing"
        if o.compile.ok and o.compile.cubin:
            o.sass = dump_sass(o.compile.cubin, job.env.cuobjdump)
        else:
            o.verdict = Verdict.NOT_COMPILED
        job.outcomes[st.id] = o
    return job


def profile(job: Job) -> Job:
    """One Nsight Compute run over every correct kernel; each stage gets its metrics or a typed gap."""
    if any(i.kind == "ncu" for o in job.outcomes.values() for i in o.stage.items):
        job.progress("profiling with Nsight Compute")
    run = profile_stages(job.outcomes, job.rubric, has_gpu=job.env.has_gpu, gpu_reason=job.env.device_reason,
                         work_dir=job.work / "ncu", seed=job.seeds.get("bench", 0),
                         fence=tool_fence(job.work / "ncu", list(job.outcomes.values())))
    if run is not None:
        job.profile = ProfileRun(command=list(run.command), reason=run.reason,
                                 wall_s=run.proc.wall_s if run.proc else None, notes=list(run.notes),
                                 dropped_metrics=list(run.dropped_metrics))
    return job


def score_stages(job: Job) -> Job:
    job.items += score(job.outcomes, job.env.peaks)
    return job


def grade_occupancy(job: Job) -> Job:
    if job.rubric.occupancy is not None and job.wants("occupancy"):
        from grader.occupancy.run import grade_occupancy_submission

        job.progress("grading the occupancy exercises")
        job.items += grade_occupancy_submission(job.submission, job.rubric, job.env, job.work / "occupancy",
                                                job.progress, fence=Fence(scratch=job.work / "occupancy", gpu=True))
    return job


def grade_report(job: Job) -> Job:
    if job.rubric.report is not None and job.wants("report"):
        from grader.writeup.run import grade_report_submission

        job.progress("checking the written report")
        job.items += grade_report_submission(job.submission, job.rubric, job.outcomes)
    return job


# The grading, in order. Each step takes the Job and returns it.
STEPS: tuple[Callable[[Job], Job], ...] = (
    compile_stages,  # nvcc -> cubin, ptxas -v, SASS
    run_stages,  # each kernel in a child: correctness sizes, then the timed benchmark
    check_results,  # outputs against float64 references; timings of the correct kernels
    sanitize,  # racecheck on shared-memory stages, memcheck on failed ones
    drop_outputs,  # the output matrices, unless --keep-outputs
    profile,  # one Nsight Compute run over the correct kernels
    score_stages,  # rubric items from the outcomes
    grade_occupancy,  # the occupancy exercises section, when the rubric has one
    grade_report,  # the written report section, when the rubric has one
)


def grade(submission: Path, rubric: Rubric, out_dir: Path, *, stages: list[str] | None = None,
          use_gpu: bool = True, keep_outputs: bool = False, progress: Progress = lambda _msg: None,
          env: Environment | None = None) -> Grading:
    started = time.monotonic()
    out_dir = Path(out_dir).resolve()  # children run in other folders
    out_dir.mkdir(parents=True, exist_ok=True)
    progress("probing the GPU and tools")
    env = env or detect_environment(rubric, use_gpu)
    # The submission is copied once (no link followed, sizes capped) and only the copy is graded.
    taken = intake(Path(submission), out_dir / "work" / "submission", markers=[s.file for s in rubric.stages])
    taken.write(out_dir / INTAKE_FILE)  # the batch reads whether the submission was refused
    job = Job(rubric, taken.root, out_dir / "work", env, stages, keep_outputs, progress, started,
              notes=list(taken.notes), intake=taken)
    for step in STEPS:
        job = step(job)
    grading = job.grading()
    grading.submission = str(submission)  # the path given, not its copy under work/ (removed after)
    return grading

