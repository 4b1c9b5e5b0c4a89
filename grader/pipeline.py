"""Grade one submission: compile -> run -> check -> time -> score -> results.json.

The grading process creates no CUDA context; every GPU step is a child process
(see docs/design.md). Each step returns records; a student's failure is data.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grader.run import sandbox

from grader.build import toolchain
from grader.build.compile import compile_stage
from grader.spec.peaks import Peaks, device_peaks
from grader.profile.collect import profile_stages, stage_spec
from grader.run.sanitize import race_message, run_many
from grader.model import ItemResult, ProcRecord
from grader.spec.rubric import Rubric
from grader.build.sass import dump_sass
from grader.score.stages import StageOutcome, score
from grader.run.timing import summarize

from grader import REPO_ROOT  # noqa: E402
Progress = Callable[[str], None]


@dataclass
class Environment:
    device: dict | None
    device_reason: str
    nvcc: object
    cuobjdump: object
    arch_flags: list[str]
    peaks: Peaks

    @property
    def has_gpu(self) -> bool:
        return bool(self.device and self.device.get("ok"))


@dataclass
class Grading:
    submission: str
    env: Environment
    outcomes: dict[str, StageOutcome]
    items: list[ItemResult]
    seconds: float
    notes: list[str] = field(default_factory=list)
    ncu_run: object = None  # grader.profile.ncu.NcuRun of the one profiling run, when there was one

    @property
    def score(self) -> float:
        return round(sum(i.score for i in self.items), 4)

    @property
    def max_score(self) -> float:
        return sum(i.max_score for i in self.items)


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env["CUPY_TF32"] = "0"
    return env


def _py(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def detect_environment(rubric: Rubric, use_gpu: bool = True) -> Environment:
    device, reason = None, "GPU use switched off (--no-gpu)"
    if use_gpu:
        proc = sandbox.run(_py("grader.children.probe"), timeout_s=rubric.timeouts.probe_s, env=_child_env(),
                           output_limit=20_000)
        try:
            device = json.loads(proc.stdout.strip().splitlines()[-1])
            reason = device.get("reason", "") if not device.get("ok") else ""
        except (ValueError, IndexError):
            device, reason = None, f"the device probe failed ({proc.brief()}): {proc.stderr.strip()[-300:]}"
    cc = tuple(device["cc"]) if device and device.get("ok") else None
    return Environment(device, reason, toolchain.find_nvcc(), toolchain.find_cuobjdump(),
                       toolchain.nvcc_arch_flags(cc, rubric.arch_without_device), device_peaks(rubric, device))


def resolve_submission(path: Path, rubric: Rubric) -> tuple[Path, str]:
    """Gradescope zips often wrap everything in one folder: step into it when that is the case."""
    def has_any(root: Path) -> bool:
        return any((root / s.file).exists() for s in rubric.stages)

    if has_any(path):
        return path, ""
    subdirs = [d for d in path.iterdir() if d.is_dir() and not d.name.startswith((".", "__MACOSX"))] \
        if path.is_dir() else []
    if len(subdirs) == 1 and has_any(subdirs[0]):
        return subdirs[0], f"files were found one folder down, in {subdirs[0].name}/; graded from there"
    return path, ""


def _runner_spec(o: StageOutcome, work: Path, seeds: dict, rubric: Rubric, env: Environment) -> Path:
    st, launch = o.stage, o.compile.launch
    spec = {
        "cubin": o.compile.cubin, "kernel": st.kernel, "inputs": st.inputs, "baseline": st.baseline,
        "launch": {"block": list(launch.block), "tile": list(launch.tile), "smem": launch.smem},
        "correctness": [{"n": n, "seed": seeds[n]} for n in rubric.correctness_sizes],
        "bench": {"n": st.bench.n, "seed": seeds["bench"], "integrity_seed": seeds["integrity"],
                  "warmup": st.bench.warmup, "reps": st.bench.reps,
                  "min_reps": st.bench.min_reps, "max_seconds": st.bench.max_seconds,
                  "flush_l2": st.bench.flush_l2},
        "out_dir": str(work), "l2_bytes": env.device.get("l2_bytes", 0),
    }
    path = work / "spec.json"
    path.write_text(json.dumps(spec))
    return path


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _run_problem(proc: ProcRecord, report: dict | None, rubric: Rubric) -> str:
    """Why a run did not finish, in words, or '' when it did."""
    done = len((report or {}).get("correctness", []))
    sizes = rubric.correctness_sizes
    where = (f"during the correctness run at N={sizes[done]}" if done < len(sizes)
             else "while timing at the benchmark size")
    printed = proc.stdout_bytes + proc.stderr_bytes
    noisy = (f"; it printed {printed:,} bytes (shown trimmed): printf in a kernel's hot path slows it "
             "enormously" if printed > rubric.output_limit_bytes else "")
    if proc.timed_out:
        return (f"timed out after {proc.timeout_s:g} s {where}: the kernel did not finish "
                f"(look for a loop that never ends or a barrier some threads never reach){noisy}")
    if report and report.get("error"):
        return f"the kernel failed {where}: {report['error']}"
    if report is None or not report.get("loaded"):
        tail = (proc.stderr or proc.stdout).strip()[-800:]
        return f"the kernel could not be loaded or run ({proc.brief()}): {tail}"
    if not proc.ok:
        return f"the run ended abnormally ({proc.brief()}) {where}"
    return ""


def _correctness(o: StageOutcome, verdict: dict | None) -> None:
    if verdict is None:
        o.correct, o.correctness_message = False, "the checker produced no verdict for this stage"
        return
    o.cases = verdict["cases"]
    bad = [c for c in o.cases if not c.get("passed")]
    if bad:
        o.correct = False
        lines = [c.get("description") or f"N={c['n']}: {c.get('problem')}" for c in bad]
        o.correctness_message = "\n".join(lines)
        return
    o.correct = True
    worst = max(c["max_scaled_err"] for c in o.cases)
    sizes = ", ".join(f"{c['n']}{' (after timing)' if c['kind'] == 'bench' else ''}" for c in o.cases
                      if c["kind"] != "timed")
    timed = [c["description"] for c in o.cases if c["kind"] == "timed"]
    o.correctness_message = (f"correct at N = {sizes}; max scaled error {worst:.2e} (rtol {o.stage.rtol:g})"
                             + (f"; {timed[0]}" if timed else ""))


def _uses_shared_memory(o: StageOutcome) -> bool:
    return bool(o.compile.kernel.shared_bytes or o.compile.launch.smem)


def _sanitize(outcomes: dict[str, StageOutcome], rubric: Rubric, work_root: Path, progress: Progress) -> None:
    """racecheck on correct shared-memory stages (a hazard fails them); memcheck on failed ones."""
    san = rubric.sanitizer
    tool = toolchain.find_compute_sanitizer()
    # Wrong kernels too: a race is the likeliest explanation of a shared-memory stage's wrong numbers.
    shared = [o for o in outcomes.values() if o.compile.ok and o.correct is not None and _uses_shared_memory(o)
              and not o.correctness_message.startswith("timed out")]
    if san.racecheck and shared:
        progress("checking shared-memory races (compute-sanitizer racecheck)")
        runs = run_many("racecheck", tool, [stage_spec(o) for o in shared], san.n, work_root / "racecheck",
                        _child_env(), san.timeout_s)
        for o in shared:
            r = runs[o.stage.id]
            if r.findings:
                before = "" if o.correct else "\n" + o.correctness_message
                o.correct, o.timing = False, None
                o.correctness_message = race_message(o.stage.kernel, r.findings) + before
            elif o.correct:
                o.correctness_message += ("; racecheck: no shared-memory hazard" if not r.reason
                                          else f"; racecheck {r.reason}")
    failed = [o for o in outcomes.values() if o.compile.ok and o.correct is False
              and not o.correctness_message.startswith(("timed out", "shared-memory race"))]
    if san.memcheck_on_failure and failed:
        progress("looking for the first bad memory access (compute-sanitizer memcheck)")
        runs = run_many("memcheck", tool, [stage_spec(o) for o in failed], san.n, work_root / "memcheck",
                        _child_env(), san.timeout_s)
        for o in failed:
            r = runs[o.stage.id]
            if r.findings:
                f = r.findings[0]
                o.correctness_message += (f"\nmemcheck's first finding: {f.brief()}"
                                          + (f"; {'; '.join(f.details[1:3])}" if len(f.details) > 1 else ""))


def grade(submission: Path, rubric: Rubric, out_dir: Path, *, stages: list[str] | None = None,
          use_gpu: bool = True, keep_outputs: bool = False, progress: Progress = lambda _msg: None,
          env: Environment | None = None) -> Grading:
    t0 = time.monotonic()
    out_dir = Path(out_dir).resolve()  # children run in other folders
    out_dir.mkdir(parents=True, exist_ok=True)
    work_root = out_dir / "work"
    selected = [s for s in rubric.stages if stages is None or s.id in stages]
    progress("probing the GPU and tools")
    env = env or detect_environment(rubric, use_gpu)
    root, note = resolve_submission(Path(submission), rubric)
    notes = [note] if note else []
    outcomes: dict[str, StageOutcome] = {}
    sizes = list(rubric.correctness_sizes)
    for st in selected:
        progress(f"compiling {st.id}")
        work = work_root / st.id
        work.mkdir(parents=True, exist_ok=True)
        o = StageOutcome(stage=st, gpu_reason="" if env.has_gpu else (env.device_reason or "no CUDA device"))
        o.compile = compile_stage(st, root, work, env.nvcc, env.arch_flags, rubric, sizes + [st.bench.n],
                                  user=os.environ.get("GRADER_STUDENT_USER") or None)
        if o.compile.ok:
            o.sass = dump_sass(o.compile.cubin, env.cuobjdump)
        outcomes[st.id] = o

    runnable = [o for o in outcomes.values() if o.compile.ok and env.has_gpu]
    seeds = {n: secrets.randbelow(2**31) for n in sizes}
    seeds["bench"] = secrets.randbelow(2**31)
    seeds["integrity"] = secrets.randbelow(2**31)
    checks = []
    for o in runnable:
        used = time.monotonic() - t0
        if used > rubric.timeouts.submission_s:
            o.correct = False
            o.correctness_message = (f"not run: the submission's time budget ({rubric.timeouts.submission_s:g} s "
                                     f"for all stages) was used up by the stages before it ({used:.0f} s)")
            continue
        progress(f"running {o.stage.id}")
        work = work_root / o.stage.id
        spec = _runner_spec(o, work, seeds, rubric, env)
        proc = sandbox.run(_py("grader.children.stage", str(spec)), timeout_s=rubric.timeouts.stage_run_s,
                           cwd=str(work), env=_child_env(), output_limit=rubric.output_limit_bytes)
        report = _read_json(work / "run.json")
        o.run_output = (proc.stdout + proc.stderr).strip()
        problem = _run_problem(proc, report, rubric)
        o.correct = False if problem else None
        o.correctness_message = problem
        cases = [{"n": c["n"], "seed": c["seed"], "file": c["file"], "kind": "check"}
                 for c in (report or {}).get("correctness", [])]
        bench = (report or {}).get("bench") or {}
        if not problem and bench.get("file"):
            cases.append({"n": bench["n"], "seed": bench.get("last_seed", bench["seed"]), "file": bench["file"],
                          "kind": "bench",
                          "fingerprints": {"file": bench["fingerprints"], "count": bench.get("timed_launches", 0),
                                           "integrity_seed": seeds["integrity"]} if bench.get("fingerprints") else None})
        if not problem:
            checks.append({"id": o.stage.id, "inputs": o.stage.inputs, "rtol": o.stage.rtol,
                           "out_dir": str(work), "cases": cases})
        o.bench = bench

    if checks:
        progress("checking results against float64 references")
        spec_path = work_root / "checker_spec.json"
        spec_path.write_text(json.dumps({"stages": checks}))
        verdict_path = work_root / "verdicts.json"
        proc = sandbox.run(_py("grader.children.check", str(spec_path), str(verdict_path)),
                           timeout_s=rubric.timeouts.checker_s, env=_child_env(), output_limit=20_000)
        verdicts = _read_json(verdict_path) or {}
        if not proc.ok:
            notes.append(f"the reference checker failed ({proc.brief()}): {proc.stderr.strip()[-500:]}")
        for chk in checks:
            o = outcomes[chk["id"]]
            _correctness(o, verdicts.get(chk["id"]))
            bench = o.bench
            if o.correct and bench.get("student_ms"):
                o.timing = summarize(bench["n"], bench["student_ms"], bench["baseline_ms"],
                                     env.peaks.get(o.stage.peak))
    if env.has_gpu:
        _sanitize(outcomes, rubric, work_root, progress)
    if not keep_outputs:
        for path in work_root.glob("*/*.npy"):
            path.unlink()
    if any(i.kind == "ncu" for o in outcomes.values() for i in o.stage.items):
        progress("profiling with Nsight Compute")
    ncu_run = profile_stages(outcomes, rubric, has_gpu=env.has_gpu, gpu_reason=env.device_reason,
                             child_env=_child_env(), work_dir=work_root / "ncu", seed=seeds["bench"])
    items = score(outcomes, env.peaks)
    if "occupancy" in rubric.extra and (stages is None or "occupancy" in stages):
        from grader.occupancy.run import grade_occupancy_submission

        progress("grading the occupancy exercises")
        items += grade_occupancy_submission(root, rubric, env, work_root / "occupancy", progress)
    if "report" in rubric.extra and (stages is None or "report" in stages):
        from grader.writeup.run import grade_report_submission

        progress("checking the written report")
        items += grade_report_submission(root, rubric, outcomes)
    return Grading(str(root), env, outcomes, items, time.monotonic() - t0, notes, ncu_run)


def remove_work(out_dir: Path) -> None:
    shutil.rmtree(out_dir / "work", ignore_errors=True)
