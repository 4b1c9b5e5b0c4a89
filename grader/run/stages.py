"""The GPU steps of a grading: run each stage's kernel, check its outputs, look for races.

Each step takes the :class:`~grader.grading.Job` and returns it. What happened is recorded as
the outcome's :class:`~grader.model.Verdict` where it happens (the run, the checker,
racecheck); every later decision reads that verdict. ``correctness_message`` is for people.
The grading process creates no CUDA context: every GPU step is a child process.
"""
from __future__ import annotations

import secrets
import time
from pathlib import Path

from grader.build import toolchain
from grader.children.launch import launch
from grader.grading import Job, StageOutcome
from grader.model import ProcRecord, Verdict
from grader.profile.collect import stage_spec
from grader.run.fence import GIB, Fence
from grader.run.sanitize import race_message, run_many
from grader.run.timing import summarize
from grader.spec.types import Rubric

RUN_OUTPUT_KEPT = 4000  # characters of a run's output kept for feedback and grading.json

# Which verdicts each sanitizer looks at. A kernel that timed out would hang again, and one
# the time budget skipped never ran (running it now would spend the budget it ran out of).
RACECHECKED = (Verdict.CORRECT, Verdict.WRONG, Verdict.CRASHED, Verdict.NO_VERDICT)
# memcheck explains a failure; a race already has its explanation.
MEMCHECKED = (Verdict.WRONG, Verdict.CRASHED, Verdict.NO_VERDICT)


def _runner_spec(o: StageOutcome, work: Path, job: Job) -> dict:
    assert o.compile is not None and o.compile.launch is not None  # only compiled stages run
    st, launch, seeds = o.stage, o.compile.launch, job.seeds
    spec = {
        "cubin": o.compile.cubin, "kernel": st.kernel, "inputs": st.inputs, "baseline": st.baseline,
        "launch": {"block": list(launch.block), "tile": list(launch.tile), "smem": launch.smem},
        "correctness": [{"n": n, "seed": seeds[n]} for n in job.rubric.correctness_sizes],
        "bench": {"n": st.bench.n, "seed": seeds["bench"], "integrity_seed": seeds["integrity"],
                  "warmup": st.bench.warmup, "reps": st.bench.reps,
                  "min_reps": st.bench.min_reps, "max_seconds": st.bench.max_seconds,
                  "flush_l2": st.bench.flush_l2},
        "out_dir": str(work), "l2_bytes": (job.env.device or {}).get("l2_bytes", 0),
    }
    return spec


def _run_end(proc: ProcRecord, report: dict | None, rubric: Rubric) -> tuple[Verdict, str] | None:
    """How a run failed to finish (and why, in words), or None when it finished."""
    done = len((report or {}).get("correctness", []))
    sizes = rubric.correctness_sizes
    where = (f"during the correctness run at N={sizes[done]}" if done < len(sizes)
             else "while timing at the benchmark size")
    printed = proc.stdout_bytes + proc.stderr_bytes
    noisy = (f"; it printed {printed:,} bytes (shown trimmed): printf in a kernel's hot path slows it "
             "enormously" if printed > rubric.output_limit_bytes else "")
    if proc.timed_out:
        return Verdict.TIMED_OUT, (f"timed out after {proc.timeout_s:g} s {where}: the kernel did not finish "
                                   f"(look for a loop that never ends or a barrier some threads never reach){noisy}")
    if report and report.get("error"):
        return Verdict.CRASHED, f"the kernel failed {where}: {report['error']}"
    if report is None or not report.get("loaded"):
        tail = (proc.stderr or proc.stdout).strip()[-800:]
        return Verdict.CRASHED, f"the kernel could not be loaded or run ({proc.brief()}): {tail}"
    if not proc.ok:
        return Verdict.CRASHED, f"the run ended abnormally ({proc.brief()}) {where}"
    return None


def _check_request(o: StageOutcome, report: dict, work: Path, job: Job) -> dict:
    """What the reference checker is to compare for one finished run."""
    cases = [{"n": c["n"], "seed": c["seed"], "file": c["file"], "kind": "check"}
             for c in report.get("correctness", [])]
    bench = o.bench
    if bench.get("file"):
        prints = ({"file": bench["fingerprints"], "count": bench.get("timed_launches", 0),
                   "integrity_seed": job.seeds["integrity"]} if bench.get("fingerprints") else None)
        cases.append({"n": bench["n"], "seed": bench.get("last_seed", bench["seed"]), "file": bench["file"],
                      "kind": "bench", "fingerprints": prints})
    return {"id": o.stage.id, "inputs": o.stage.inputs, "rtol": o.stage.rtol, "out_dir": str(work), "cases": cases}


def run_stages(job: Job) -> Job:
    """Run every compiled stage's kernel (correctness sizes, then the timed benchmark) in a child."""
    if not job.env.has_gpu:
        return job
    rubric = job.rubric
    job.seeds = {n: secrets.randbelow(2**31) for n in rubric.correctness_sizes}
    job.seeds["bench"] = secrets.randbelow(2**31)
    job.seeds["integrity"] = secrets.randbelow(2**31)
    for o in job.outcomes.values():
        if o.compile is None or not o.compile.ok:
            continue
        used = time.monotonic() - job.started
        if used > rubric.timeouts.submission_s:
            o.verdict = Verdict.NOT_RUN
            o.correctness_message = (f"not run: the submission's time budget ({rubric.timeouts.submission_s:g} s "
                                     f"for all stages) was used up by the stages before it ({used:.0f} s)")
            continue
        job.progress(f"running {o.stage.id}")
        work = job.work / o.stage.id
        # Fenced: the stage folder is all it may write, CuPy's cache included (never the checker's).
        child = launch("stage", _runner_spec(o, work, job), work, rubric.timeouts.stage_run_s,
                       rubric.output_limit_bytes, cache_dir=work / "cupy-cache", fence=Fence(scratch=work, gpu=True))
        proc, report = child.proc, child.result
        o.run_output = (proc.stdout + proc.stderr).strip()[-RUN_OUTPUT_KEPT:]
        o.bench = (report or {}).get("bench") or {}
        ended = _run_end(proc, report, rubric)
        if ended:
            o.verdict, o.correctness_message = ended
        else:
            job.checks.append(_check_request(o, report or {}, work, job))
    return job


def _correctness(o: StageOutcome, verdict: dict | None) -> None:
    if verdict is None:
        o.verdict, o.correctness_message = Verdict.NO_VERDICT, "the checker produced no verdict for this stage"
        return
    o.cases = verdict["cases"]
    bad = [c for c in o.cases if not c.get("passed")]
    if bad:
        o.verdict = Verdict.WRONG
        o.correctness_message = "\n".join(c.get("description") or f"N={c['n']}: {c.get('problem')}" for c in bad)
        return
    o.verdict = Verdict.CORRECT
    worst = max(c["max_scaled_err"] for c in o.cases)
    sizes = ", ".join(f"{c['n']}{' (after timing)' if c['kind'] == 'bench' else ''}" for c in o.cases
                      if c["kind"] != "timed")
    timed = [c["description"] for c in o.cases if c["kind"] == "timed"]
    o.correctness_message = (f"correct at N = {sizes}; max scaled error {worst:.2e} (rtol {o.stage.rtol:g})"
                             + (f"; {timed[0]}" if timed else ""))


def check_results(job: Job) -> Job:
    """Compare every finished run's outputs with float64 references (one child); time the correct ones."""
    if not job.checks:
        return job
    job.progress("checking results against float64 references")
    child = launch("check", {"stages": job.checks}, job.work, job.rubric.timeouts.checker_s, 20_000,
                   cache_dir=job.work / "cupy-cache")
    proc, verdicts = child.proc, child.result or {}
    if not proc.ok:
        job.notes.append(f"the reference checker failed ({proc.brief()}): {proc.stderr.strip()[-500:]}")
    for chk in job.checks:
        o = job.outcomes[chk["id"]]
        _correctness(o, verdicts.get(chk["id"]))
        bench = o.bench
        if o.verdict is Verdict.CORRECT and bench.get("student_ms"):
            o.timing = summarize(bench["n"], bench["student_ms"], bench["baseline_ms"],
                                 job.env.peaks.get(o.stage.peak))
    return job


def _uses_shared_memory(o: StageOutcome) -> bool:
    c = o.compile
    assert c is not None and c.kernel is not None and c.launch is not None  # a verdict means it compiled
    return bool(c.kernel.shared_bytes or c.launch.smem)


def tool_fence(scratch: Path, outcomes: list[StageOutcome]) -> Fence:
    """The fence of a tool (compute-sanitizer, ncu) launching student kernels: the GPU, its own
    folder, the kernels' cubins read-only; the tools themselves take gigabytes of host memory."""
    cubins = tuple(dict.fromkeys(Path(o.compile.cubin).parent for o in outcomes if o.compile and o.compile.cubin))
    return Fence(scratch=scratch, gpu=True, readonly=cubins, memory_bytes=16 * GIB)


def sanitize(job: Job) -> Job:
    """racecheck on shared-memory stages (a hazard fails them); memcheck on failed ones."""
    san = job.rubric.sanitizer
    if not job.env.has_gpu:
        return job
    tool = toolchain.find_compute_sanitizer()
    # Wrong kernels too: a race is the likeliest explanation of a shared-memory stage's wrong numbers.
    shared = [o for o in job.outcomes.values() if o.verdict in RACECHECKED and _uses_shared_memory(o)]
    if san.racecheck and shared:
        job.progress("checking shared-memory races (compute-sanitizer racecheck)")
        runs = run_many("racecheck", tool, [stage_spec(o) for o in shared], san.n, job.work / "racecheck",
                        san.timeout_s, fence=tool_fence(job.work / "racecheck", shared))
        for o in shared:
            r = runs[o.stage.id]
            if r.findings:
                before = "" if o.verdict is Verdict.CORRECT else "\n" + o.correctness_message
                o.verdict, o.timing = Verdict.RACE, None
                o.correctness_message = race_message(o.stage.kernel, r.findings) + before
            elif o.verdict is Verdict.CORRECT:
                o.correctness_message += ("; racecheck: no shared-memory hazard" if not r.reason
                                          else f"; racecheck {r.reason}")
    failed = [o for o in job.outcomes.values() if o.verdict in MEMCHECKED]
    if san.memcheck_on_failure and failed:
        job.progress("looking for the first bad memory access (compute-sanitizer memcheck)")
        runs = run_many("memcheck", tool, [stage_spec(o) for o in failed], san.n, job.work / "memcheck",
                        san.timeout_s, fence=tool_fence(job.work / "memcheck", failed))
        for o in failed:
            r = runs[o.stage.id]
            if r.findings:
                f = r.findings[0]
                o.correctness_message += (f"\nmemcheck's first finding: {f.brief()}"
                                          + (f"; {'; '.join(f.details[1:3])}" if len(f.details) > 1 else ""))
    return job


def drop_outputs(job: Job) -> Job:
    """The kernels' output matrices are large and checked by now: delete them unless asked to keep them."""
    if not job.keep_outputs:
        for path in job.work.glob("*/*.npy"):
            path.unlink()
    return job
