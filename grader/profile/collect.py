"""The grading step that profiles: which stages get an ncu launch, and what each stage is told.

Called by grade.py after correctness is known and before scoring::

    run = profile_stages(outcomes, rubric, has_gpu=env.has_gpu, gpu_reason=env.device_reason,
                         child_env=_child_env(), work_dir=work_root / "ncu", seed=seeds["bench"])

It fills ``StageOutcome.ncu`` / ``ncu_reason`` / ``profile_n`` for every stage. Reasons start
with "not profiled:" when the student's stage gave nothing to profile (did not compile, is
not correct: its ncu items fail) and with "not evaluated:" when the grader could not look
(no GPU, no ncu, counters locked, profiling switched off: its ncu items score 0 as
not evaluated). Only correct kernels are profiled, all in one ncu process.
"""
from __future__ import annotations

from pathlib import Path

from grader.build import toolchain
from grader.profile.ncu import NcuRun, collect, metrics_needed


def _why_not(o, has_gpu: bool, gpu_reason: str, n: int) -> str:
    """Why this stage is not profiled, or '' when it is."""
    if o.compile is None or not o.compile.ok:
        return "not profiled: the stage did not compile"
    if not has_gpu:
        return f"not evaluated: {gpu_reason or 'no CUDA device'}"
    if o.correct is False:
        return "not profiled: the kernel is not correct"
    if o.correct is None:
        return "not evaluated: the kernel's correctness was not checked, so it was not profiled"
    bm, bn = o.compile.launch.tile
    if n % bm or n % bn:
        return f"not evaluated: the launch tile {bm} x {bn} does not divide the profile size N={n}"
    return ""


def stage_spec(o) -> dict:
    """One entry of the profile_child spec."""
    launch = o.compile.launch
    return {"id": o.stage.id, "cubin": str(Path(o.compile.cubin).resolve()), "kernel": o.stage.kernel,
            "inputs": o.stage.inputs,
            "launch": {"block": list(launch.block), "tile": list(launch.tile), "smem": launch.smem}}


def profile_stages(outcomes: dict, rubric, *, has_gpu: bool, gpu_reason: str, child_env: dict, work_dir: Path,
                   seed: int, ncu_tool=None) -> NcuRun | None:
    """Profile every correct stage kernel in one ncu run; set each outcome's ncu fields.

    Returns the run (for grading.json: its command, notes and output), or None when nothing ran.
    """
    prof = rubric.profile
    n = prof.n
    for o in outcomes.values():
        o.profile_n = n
        o.ncu = None
    if not prof.enabled:
        for o in outcomes.values():
            o.ncu_reason = "not evaluated: profiling is switched off in the rubric (settings.profile.enabled)"
        return None
    todo = []
    for o in outcomes.values():
        o.ncu_reason = _why_not(o, has_gpu, gpu_reason, n)
        if not o.ncu_reason:
            todo.append(o)
    if not todo:
        return None
    tool = ncu_tool if ncu_tool is not None else toolchain.find_ncu()
    run = collect([stage_spec(o) for o in todo], n, seed, metrics_needed(rubric), tool, prof.clock_control,
                  prof.timeout_s, child_env, Path(work_dir))
    for o in todo:
        o.ncu, o.ncu_reason = run.for_stage(o.stage.id)
    return run
