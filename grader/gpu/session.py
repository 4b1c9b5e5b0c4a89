"""The GPU children a grading starts before its kernels are compiled.

A stage child spends most of its life before its first turn: Python, NumPy and CuPy, the CUDA
context, its inputs and buffers, cuBLAS (grader/children/stage.py: ``Runner.prepare``). None of
that needs the student's cubin, and when every child of a grading does it at once they wait on
each other (on an H200, 15 children took 5.7 s to reach their first gate, while using 2-3 CPU cores:
each context and allocation waits for the driver). So the stage children, the checker and the
profiler under ncu are started here, right after the probe, and do all of it while nvcc compiles
(CPU work); the compiled kernel reaches each stage child at its correctness turn (the gate's go
hands it over), and the profiler's kernels at its own gate. racecheck's children start with them and
get their kernels as each stage's compile ends (grader/gpu/racecheck.py). A stage that did not
compile has its children stopped at their gates.

With a GPU lock (a batch or the service: another grading may be timing kernels on this GPU while
this one compiles) nothing may touch the GPU before the lock is held, so the same children are
started by run_stages, after the lock, as before (:func:`start_gpu_children` says which way).
"""
from __future__ import annotations

import secrets

from grader import pyplot
from grader.children.inputs import rep_seed
from grader.compile import toolchain
from grader.gpu import racecheck, warm
from grader.gpu.ncu_run import start_profile
from grader.grading import Job
from grader.rubric.limits import stage_limit
from grader.rubric.types import Stage
from grader.sandbox.fence import Fence
from grader.sandbox.launch import ChildResult, launch
from grader.sandbox.process import Control
from grader.sandbox.turns import Party, Schedule, parallel_children

__all__ = ["checker_expectations", "start_gpu_children", "stage_party_spec"]


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
    job.seeds["integrity"] = secrets.randbelow(2**31)
    _prepare_cupy_cache(job)
    pyplot.preload()  # matplotlib, imported while this process waits for its children
    sched = job.schedule = Schedule(parallel_children(job.env.device))
    for st in stages:  # first: they are the ones every later turn waits for
        job.stage_runs[st.id] = sched.add(_stage_party(st, job))
    racecheck.start_early(job, stages)  # their kernels are handed over as each stage compiles
    job.checker = sched.add(_checker_party(job, checker_expectations(job, stages)))
    work = job.work / "ncu"
    job.early_profile = start_profile(stages, rubric, has_gpu=True, work_dir=work, seed=job.seeds["bench"],
                                      device=job.env.device, schedule=sched, cache_seed=job.cupy_cache,
                                      fence=racecheck.stage_folders_fence(work, job, stages))


def stage_party_spec(job: Job, st: Stage) -> dict:
    """The stage child's spec before its stage is compiled: the seeds, sizes and benchmark settings.
    The compiled kernel (StageOutcome.launch_spec) is handed over at its correctness gate."""
    seeds = job.seeds
    return {
        "id": st.id, "inputs": st.inputs, "baseline": st.baseline,
        "correctness": [{"n": n, "seed": seeds[n]} for n in job.rubric.correctness_sizes],
        "bench": {"n": st.bench.n, "seed": seeds["bench"], "integrity_seed": seeds["integrity"],
                  "warmup": st.bench.warmup, "reps": st.bench.reps,
                  "min_reps": st.bench.min_reps, "max_seconds": st.bench.max_seconds,
                  "flush_l2": st.bench.flush_l2},
        "out_dir": str(job.work / st.id), "l2_bytes": (job.env.device or {}).get("l2_bytes", 0), "gate": True,
    }


def _stage_party(st: Stage, job: Job) -> Party:
    """The stage's child: fenced, the stage folder is all it may write, CuPy's cache included
    (never the checker's); its limits from the stage's reference (grader/rubric/limits.py)."""
    rubric, work = job.rubric, job.work / st.id
    work.mkdir(parents=True, exist_ok=True)
    spec = stage_party_spec(job, st)
    limit_s = stage_limit(st, rubric).seconds
    start, cache_seed = launch, job.cupy_cache  # bound now: the child may start later, from the schedule's thread

    def run(control: Control) -> ChildResult:
        return start("stage", spec, work, limit_s, rubric.output_limit_bytes, cache_dir=work / "cupy-cache",
                     cache_seed=cache_seed, control=control,
                     fence=Fence(scratch=work, gpu=True, output_bytes=rubric.output_limit_bytes))

    return Party(st.id, ("correctness", "bench"), work / "stage_result.json", run, hold_startup=True)


def checker_expectations(job: Job, stages: list[Stage]) -> dict:
    """The float64 products the checker will be asked for if every run goes to the end: each
    correctness size's reference and each benchmark's last launch's reference, per input kind
    (grader/children/check.py: Products.precompute). The timed launches' fingerprints are not
    foreseeable: their vectors are drawn after each launch."""
    refs: dict[tuple, None] = {}
    iseed = job.seeds["integrity"]
    for st in stages:
        for n in job.rubric.correctness_sizes:
            refs[(n, job.seeds[n], st.inputs)] = None
        refs[(st.bench.n, rep_seed(iseed, st.bench.reps - 1), st.inputs)] = None
    return {"references": [list(k) for k in refs]}


def _checker_party(job: Job, expect: dict) -> Party:
    """The trusted checker: it computes the ``expect``ed products, then waits at its gate ``compare``
    for the list of outputs to judge (gpu/stages.py: check_results opens it)."""
    start = launch  # bound now: the child may start later, from the schedule's thread
    spec = {"gate": True, "stages": [], "expect": expect}

    def run(control: Control) -> ChildResult:
        return start("check", spec, job.work, job.rubric.timeouts.checker_s, 20_000,
                     cache_dir=job.work / "cupy-cache", cache_seed=job.cupy_cache, control=control)

    return Party("checker", ("compare",), job.work / "check_result.json", run, late=True)


def _prepare_cupy_cache(job: Job) -> None:
    """The trusted warm CuPy cache (grader/gpu/warm.py): the cache of every child that uses CuPy (the
    stage runs, the checker, the ncu launch; not the sanitizer's launcher) starts as a copy of it."""
    with job.clock.detail("cupy_cache"):
        cache, why = warm.prepare(job.rubric, job.env.device or {}, job.work, job.rubric.timeouts.checker_s)
    if cache is None:
        job.notes.append(f"CuPy's kernels could not be compiled ahead ({why}); each child compiled its own")
        return
    job.cupy_cache = cache.folder
    if cache.warm_s is not None:
        job.clock.add("cupy_cache.warm", cache.warm_s)
