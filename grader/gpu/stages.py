"""The GPU steps of a grading: run each stage's kernel, check its outputs, look for races.

Each step takes the :class:`~grader.gpu.job.Job` and the grading's GPU session
(:class:`~grader.gpu.session.GpuSession`: the schedule and its children) and returns the Job. What happened is recorded as
the outcome's :class:`~grader.model.Verdict` where it happens (the run, the checker,
racecheck); every later decision reads that verdict. ``correctness_message`` is for people.
The grading process creates no CUDA context: every GPU step is a child process.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grader.children.protocol import CHECK
from grader.compile import toolchain
from grader.evidence.limits import StageLimit
from grader.evidence.protocol import (
    CheckCase,
    CheckGo,
    CheckRequest,
    CheckResult,
    CheckSpec,
    Fingerprints,
    StageResult,
    StageVerdict,
)
from grader.gpu import racecheck
from grader.gpu.job import Job
from grader.gpu.sanitize import race_message
from grader.gpu.session import GpuSession
from grader.grading import StageOutcome
from grader.model import Limit, ProcRecord, Verdict
from grader.profile.timing import summarize
from grader.records import to_jsonable
from grader.rubric.types import Rubric
from grader.sandbox.launch import ChildResult, launch
from grader.sandbox.turns import STARTUP_LIMIT_S, Party, State
from grader.untrusted.quote import fence_block, quote_code

RUN_OUTPUT_KEPT = 4000  # characters of a run's output kept for feedback and grading.json

# Which verdicts each sanitizer looks at. A kernel that timed out would hang again, and one
# the time budget skipped never ran (running it now would spend the budget it ran out of).
RACECHECKED = (Verdict.CORRECT, Verdict.WRONG, Verdict.CRASHED, Verdict.NO_VERDICT)
# memcheck explains a failure; a race already has its explanation.
MEMCHECKED = (Verdict.WRONG, Verdict.CRASHED, Verdict.NO_VERDICT)


def _run_end(proc: ProcRecord, report: StageResult | None, rubric: Rubric,
             limit: StageLimit | None = None) -> tuple[Verdict, str] | None:
    """How a run failed to finish (and why, in words), or None when it finished. ``limit``: the
    time limit in force, named in a timeout's message."""
    done = len(report.correctness) if report else 0
    sizes = rubric.correctness_sizes
    where = (f"during the correctness run at N={sizes[done]}" if done < len(sizes)
             else "while timing at the benchmark size")
    printed = proc.stdout_bytes + proc.stderr_bytes
    # A flood can reach its time limit before the output limit (a slower printf on another GPU): the
    # timeout's message then names the printing too, whenever more was printed than feedback shows.
    noisy = (f"; it printed {printed:,} bytes (shown trimmed): printf in a kernel's hot path slows it "
             "enormously" if printed > RUN_OUTPUT_KEPT else "")
    if proc.limit is Limit.OUTPUT:  # the fence stopped it the moment its output passed the limit
        return Verdict.OUTPUT_LIMIT, (f"stopped {where}: it printed {printed:,} bytes (shown trimmed), more than "
                                      f"the {rubric.output_limit_bytes:,}-byte output limit: printf in a kernel's "
                                      "hot path slows it enormously (print from one thread, or only while debugging)")
    if proc.limit is Limit.CANCELLED and not (report and report.loaded):
        return Verdict.NO_VERDICT, (f"not run: the stage's child did not start within {STARTUP_LIMIT_S:g} s (the "
                                    "grader's own start-up, before your kernel ran; course staff can re-run it)")
    if proc.timed_out:
        named = f" (this stage's time limit: {limit.why})" if limit is not None and limit.why else ""
        return Verdict.TIMED_OUT, (f"timed out after {proc.timeout_s:g} s{named} {where}: the kernel did not finish "
                                   f"(look for a loop that never ends or a barrier some threads never reach){noisy}")
    if report and report.error and not report.prepared:
        return Verdict.NO_VERDICT, (f"not run: the grader could not prepare this stage's run before your kernel "
                                    f"ran ({quote_code(report.error, 300)}); course staff can re-run it")
    if report and report.error:
        return Verdict.CRASHED, f"the kernel failed {where}: {quote_code(report.error, 300)}"
    if report is None or not report.loaded:
        return Verdict.CRASHED, (f"the kernel could not be loaded or run ({proc.brief()}):"
                                 + fence_block(proc.stderr or proc.stdout, 800))
    if not proc.ok:
        return Verdict.CRASHED, f"the run ended abnormally ({proc.brief()}) {where}"
    return None


def _check_request(o: StageOutcome, report: StageResult, work: Path, job: Job) -> CheckRequest:
    """What the reference checker is to compare for one finished run."""
    cases = [CheckCase(n=c.n, seed=c.seed, file=c.file, kind="check") for c in report.correctness]
    bench = o.bench
    if bench is not None and bench.file:
        prints = Fingerprints.of(bench, bench.fingerprints) if bench.fingerprints else None
        cases.append(CheckCase(n=bench.n, seed=bench.seed if bench.last_seed is None else bench.last_seed,
                               file=bench.file, kind="bench", fingerprints=prints))
    return CheckRequest(id=o.stage.id, inputs=o.stage.inputs, rtol=o.stage.rtol, out_dir=str(work), cases=cases)


def run_stages(job: Job, gpu: GpuSession) -> Job:
    """Run every compiled stage's kernel in its child. The children were started before the compiles
    (grader/gpu/session.py: start_gpu_children; with a GPU lock, right before this step); each stage's
    correctness runs take a turn shared with tools but no other stage's kernel, the compiled kernel
    handed over at its start, each timed benchmark a turn with the GPU alone (grader/sandbox/turns.py).
    The compile step handed each compiled kernel to its stage's children as it compiled (its stage child
    gets it at its correctness turn, its racecheck child at once: grader/gpu/racecheck.py).
    What the plan starts beside the runs starts now (GpuSession.begin_runs): the occupancy
    measurement child, whose timed sweeps take the next turn alone after every stage run has ended; the
    student's occupancy program runs once the timed turns are over (grader/occupancy/early.py). The
    checker and the profiler wait for their steps."""
    sched = gpu.schedule
    if sched is None:  # no GPU, or no stage to run
        return job
    rubric = job.rubric
    compiled = [o for o in job.outcomes.values() if o.compile is not None and o.compile.ok]
    runs, turns = gpu.begin_runs([o.stage.id for o in compiled], job.prebuilt_occupancy)
    if not runs:
        return job
    for o in compiled:  # the limit its child runs under, planned with the session
        o.run_limit = gpu.run_limit(o.stage.id)
    job.progress(f"running {len(runs)} stage kernel(s): checked one stage at a time, then each timed alone")
    runs_started = time.monotonic()  # the budget counts the runs, not compiles or a wait for the GPU lock
    over_budget: dict[str, float] = {}

    def on_change(p: Party) -> None:
        """A stage run that hung or flooded its output ends its racecheck too (it would do the same)."""
        if p.state is not State.DONE or p.name not in gpu.racecheck:
            return
        limit = p.result().proc.limit
        if limit in (Limit.TIME, Limit.OUTPUT):
            sched.stop(gpu.racecheck[p.name])

    def may_go(p: Party) -> bool:
        if p.name not in runs:  # the occupancy sweeps: their child's own limit, not the stages' budget
            job.progress("occupancy: timing the sweeps")
            return True
        used = time.monotonic() - runs_started
        if used > rubric.timeouts.submission_s:
            over_budget[p.name] = used
            return False
        job.progress(f"timing {p.name}")
        return True

    sched.take_turns(turns, on_change, may_go)
    if gpu.occupancy is not None:  # nothing is timed any more until ncu, which waits for it
        gpu.occupancy.start_program()
    for o in compiled:
        _finish_run(job, o, runs[o.stage.id], over_budget.get(o.stage.id))
    return job


def _finish_run(job: Job, o: StageOutcome, party: Party, over_budget: float | None) -> None:
    """Read one stage's run: its verdict when it did not finish, else its request to the checker.
    Its "run" phase is the time its limit counted (its waits at the gates are "run.wait")."""
    rubric = job.rubric
    child: ChildResult[StageResult] = party.result()
    proc, report, held = child.proc, child.result, party.control.held_s()
    job.clock.add("run", (proc.wall_s or 0.0) - held, o.stage.id)
    _record_child_times(job, o.stage.id, proc, report, held_s=held)
    o.run_output = (proc.stdout + proc.stderr).strip()[-RUN_OUTPUT_KEPT:]
    o.bench = report.bench if report else None
    if over_budget is not None:
        o.verdict = Verdict.NOT_RUN
        o.correctness_message = (f"not run: the submission's time budget ({rubric.timeouts.submission_s:g} s "
                                 f"for all stages) was used up by the stages before it ({over_budget:.0f} s)")
        return
    ended = _run_end(proc, report, rubric, o.run_limit)
    if ended:
        o.verdict, o.correctness_message = ended
    else:
        assert report is not None  # _run_end said it finished
        job.checks.append(_check_request(o, report, work=job.work / o.stage.id, job=job))


def _record_child_times(job: Job, stage: str, proc: ProcRecord, report: StageResult | CheckResult | None,
                        prefix: str = "run", held_s: float = 0.0) -> None:
    """A child's own account of its time (the stage child's, the checker's), as detail phases
    ``<prefix>.<part>``; what it does not account for is the process's start: the interpreter,
    NumPy, the fence (``<prefix>.start``, added to the child's own ``start`` if it has one).
    ``held_s``: the time it waited at its gates, as the grading process held its clock
    (grader/sandbox/turns.py): ``<prefix>.wait``."""
    known = report.times if report is not None else {}
    if held_s:
        job.clock.add(f"{prefix}.wait", held_s, stage)
    if report is None:
        return
    for name, secs in known.items():
        if name != "start":
            job.clock.add(f"{prefix}.{name}", secs, stage)
    if proc.wall_s is not None:
        job.clock.add(f"{prefix}.start", proc.wall_s - held_s - sum(known.values()) + known.get("start", 0.0), stage)


def _correctness(o: StageOutcome, verdict: StageVerdict | None) -> None:
    if verdict is None:
        o.verdict, o.correctness_message = Verdict.NO_VERDICT, "the checker produced no verdict for this stage"
        return
    o.cases = verdict.cases
    bad = [c for c in o.cases if not c.passed]
    if bad:
        o.verdict = Verdict.WRONG
        o.correctness_message = "\n".join(c.description or f"N={c.n}: {c.problem}" for c in bad)
        return
    if not o.cases:
        o.verdict, o.correctness_message = Verdict.NO_VERDICT, "the checker judged no output of this stage"
        return
    o.verdict = Verdict.CORRECT
    worst = max(c.max_scaled_err for c in o.cases)
    sizes = ", ".join(f"{c.n}{' (after timing)' if c.kind == 'bench' else ''}" for c in o.cases
                      if c.kind != "timed")
    timed = [c.description or "" for c in o.cases if c.kind == "timed"]
    o.correctness_message = (f"correct at N = {sizes}; max scaled error {worst:.2e} (rtol {o.stage.rtol:g})"
                             + (f"; {timed[0]}" if timed else ""))


def check_results(job: Job, gpu: GpuSession) -> Job:
    """Compare every finished run's outputs with float64 references (one child, started with the
    runs and waiting at its gate); time the correct ones."""
    checker, sched = gpu.checker, gpu.schedule
    if not job.checks:
        if checker is not None and sched is not None:
            sched.stop(checker)
            sched.wait(checker)  # gone before any later step times something
        return job
    job.progress("checking results against float64 references")
    if checker is not None and sched is not None:
        sched.open(checker, to_jsonable(CheckGo(job.checks)))
        child = sched.wait(checker)
    else:
        child = launch(CHECK, CheckSpec(stages=job.checks), job.work, job.rubric.timeouts.checker_s, 20_000,
                       cache_dir=job.work / "cupy-cache", cache_seed=job.cupy_cache)
    proc, verdicts = child.proc, child.result.verdicts if child.result else {}
    _record_child_times(job, "", proc, child.result, prefix="check",
                        held_s=checker.control.held_s() if checker is not None and sched is not None else 0.0)
    if not proc.ok:
        job.notes.append(f"the reference checker failed ({proc.brief()}): {quote_code(proc.stderr.strip()[-500:], 500)}")
    for chk in job.checks:
        o = job.outcomes[chk.id]
        _correctness(o, verdicts.get(chk.id))
        bench = o.bench
        if o.verdict is Verdict.CORRECT and bench is not None and bench.student_ms:
            o.timing = summarize(bench.n, bench.student_ms, bench.baseline_ms,
                                 job.env.peaks.get(o.stage.peak), bench.warmup_ms)
    return job


def _racechecked(job: Job) -> list[StageOutcome]:
    """The stages racecheck looks at: shared memory, and a verdict in RACECHECKED."""
    return [o for o in job.outcomes.values() if o.verdict in RACECHECKED and racecheck.uses_shared_memory(o)]


def sanitize(job: Job, gpu: GpuSession) -> Job:
    """racecheck on shared-memory stages (a hazard fails them); memcheck on failed ones.

    They are correctness tools, not timings, so all their runs go at once: one child per stage and
    tool, side by side. racecheck's children were started before the compiles or beside the stage runs
    (grader/gpu/racecheck.py); here their answers are read, and memcheck runs on the failed stages
    meanwhile. memcheck's stages are chosen
    before racecheck answers: racecheck can only turn a verdict into RACE, so its answer can only take
    stages off memcheck's list, never add one; a stage it finds racy keeps the race as its explanation
    and its memcheck run goes unused."""
    san = job.rubric.sanitizer
    if not job.env.has_gpu:
        return job
    tool = toolchain.find_compute_sanitizer()
    # Wrong kernels too: a race is the likeliest explanation of a shared-memory stage's wrong numbers.
    shared = _racechecked(job) if san.racecheck else []
    failing = [o for o in job.outcomes.values() if o.verdict in MEMCHECKED] if san.memcheck_on_failure else []
    if shared:
        job.progress("checking shared-memory races (compute-sanitizer racecheck)")
    if failing:
        job.progress("looking for the first bad memory access (compute-sanitizer memcheck)")
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="memcheck") as pool:
        checking = pool.submit(racecheck.run_now, job, "memcheck", failing, tool) if failing else None
        races, race_s = racecheck.collect(job, shared, tool, gpu.racecheck, gpu.schedule)
        memchecks, mem_s = checking.result() if checking else ({}, None)
    for name, seconds in (("racecheck", race_s), ("memcheck", mem_s)):
        if seconds is not None:
            job.clock.add(name, seconds)
    for o in shared:
        r = races[o.stage.id]
        if r.findings:
            before = "" if o.verdict is Verdict.CORRECT else "\n" + o.correctness_message
            o.verdict, o.timing = Verdict.RACE, None
            o.correctness_message = race_message(o.stage.kernel, r.findings) + before
        elif o.verdict is Verdict.CORRECT:
            o.correctness_message += ("; racecheck: no shared-memory hazard" if not r.reason
                                      else f"; racecheck {r.reason}")
    for o in failing:
        r = memchecks[o.stage.id]
        if o.verdict in MEMCHECKED and r.findings:  # not a stage racecheck has just explained
            f = r.findings[0]
            found = f.brief() + (f"; {'; '.join(f.details[1:3])}" if len(f.details) > 1 else "")
            o.correctness_message += f"\nmemcheck's first finding: {quote_code(found, 400)}"
    return job


def drop_outputs(job: Job, _gpu: GpuSession) -> Job:
    """The kernels' output matrices are large and checked by now: delete them unless asked to keep them."""
    if not job.keep_outputs:
        for path in job.work.glob("*/*.npy"):
            path.unlink()
    return job
