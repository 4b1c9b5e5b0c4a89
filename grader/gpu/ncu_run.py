"""The grading step that profiles: which stages get an ncu launch, and what each stage is told.

Called by grader/pipeline.py (its ``profile`` step) after correctness is known and before scoring::

    run = profile_stages(outcomes, rubric, has_gpu=env.has_gpu, gpu_reason=env.device_reason,
                         work_dir=work_root / "ncu", seed=seeds["bench"], device=env.device)

It fills ``StageOutcome.ncu`` / ``ncu_gap`` / ``profile_n`` for every stage. A gap's cause is
``Cause.STUDENT`` when the student's stage gave nothing to profile (did not compile, is not
correct: its ncu items fail; worded "not profiled: ..."), ``Cause.NO_GPU`` when the run has no
usable GPU, and ``Cause.GRADER`` when the grader could not look for another reason (no ncu,
counters locked, profiling switched off): both score 0 as not evaluated, worded "not evaluated:
...". Only correct kernels are profiled, all in one ncu process.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.compile import toolchain
from grader.evidence.protocol import Kernel, LaunchResult, ProbeResult, StagesGo
from grader.grading import StageOutcome
from grader.model import Cause, Gap
from grader.profile import agreement
from grader.profile.ncu import NcuRun, collect, wanted_metrics
from grader.records import to_jsonable
from grader.rubric.types import Rubric
from grader.sandbox.fence import Fence
from grader.sandbox.launch import ChildResult
from grader.sandbox.turns import Party, Schedule


def _tile_fits(o: StageOutcome, n: int) -> bool:
    shape = o.compile.launch if o.compile is not None else None
    return shape is not None and not (n % shape.tile[0] or n % shape.tile[1])


def _why_not(o: StageOutcome, has_gpu: bool, gpu_reason: str, n: int) -> Gap | None:
    """Why this stage is not profiled, or None when it is."""
    if o.compile is None or not o.compile.ok:
        return Gap(Cause.STUDENT, "not profiled: the stage did not compile")
    if not has_gpu:
        return Gap(Cause.NO_GPU, f"not evaluated: {gpu_reason or 'no CUDA device'}")
    if o.correct is False:
        return Gap(Cause.STUDENT, "not profiled: the kernel is not correct")
    if o.correct is None:
        return Gap(Cause.GRADER, "not evaluated: the kernel's correctness was not checked, so it was not profiled")
    if not _tile_fits(o, n):
        assert o.compile.launch is not None  # a compiled stage has its launch shape
        bm, bn = o.compile.launch.tile
        return Gap(Cause.GRADER, f"not evaluated: the launch tile {bm} x {bn} does not divide the profile size N={n}")
    return None


@dataclass
class EarlyProfile:
    """The profile child under ncu, started with the stage children (grader/gpu/session.py: early_profile): it makes
    its context and inputs, then waits at its gate ``launch`` for the kernels to profile."""

    party: Party
    stage_ids: list[str]
    metrics: list[str]


def stage_spec(o: StageOutcome) -> Kernel:
    """One entry of the profile and sanitize children's stages (of a compiled stage)."""
    return o.launch_spec()


def profile_stages(outcomes: dict[str, StageOutcome], rubric: Rubric, *, has_gpu: bool, gpu_reason: str,
                   work_dir: Path, seed: int, ncu_tool=None, fence: Fence | None = None,
                   device: ProbeResult | None = None, early: EarlyProfile | None = None,
                   schedule: Schedule | None = None) -> NcuRun | None:
    """Profile every correct stage kernel in one ncu run; set each outcome's ncu fields.

    ``device``: the probe's record; when its chip is one whose metric list the grader ships, the
    metrics that chip's ncu lacks are left out of the run up front (as ncu's own refusal would
    leave them out, without the failed first run) and their items say so.
    ``early``: the run the session started (on ``schedule``): its gate is opened for the
    kernels to profile when it holds them all with the same metrics; otherwise it is stopped and
    ncu is started now. Returns the run (for grading.json: its command, notes and output), or None
    when nothing ran.
    """
    prof = rubric.profile
    n = prof.n
    for o in outcomes.values():
        o.profile_n = n
        o.ncu = None
    if not prof.enabled:
        _stop(early, schedule)
        for o in outcomes.values():
            o.ncu_gap = Gap(Cause.GRADER,
                            "not evaluated: profiling is switched off in the rubric (settings.profile.enabled)")
        return None
    todo = []
    for o in outcomes.values():
        o.ncu_gap = _why_not(o, has_gpu, gpu_reason, n)
        if o.ncu_gap is None:
            todo.append(o)
    if not todo:
        _stop(early, schedule)
        return None
    tool = ncu_tool if ncu_tool is not None else toolchain.find_ncu()
    metrics, absent, chip = wanted_metrics(rubric, device)
    ids = [o.stage.id for o in todo]
    first = None
    if early is not None and schedule is not None and set(ids) <= set(early.stage_ids) and early.metrics == metrics:
        party = early.party

        def first() -> ChildResult[LaunchResult]:
            schedule.open(party, to_jsonable(StagesGo([stage_spec(o) for o in todo])))
            return schedule.wait(party)
    else:
        _stop(early, schedule)
    run = collect([stage_spec(o) for o in todo], n, seed, metrics, tool,
                  prof.clock_control, prof.timeout_s, Path(work_dir), fence=fence, first=first)
    if absent:
        run.dropped_metrics[:0] = absent
        run.notes.insert(0, f"ncu on {chip} has no metric " + ", ".join(absent) + "; not collected")
    for o in todo:
        o.ncu, o.ncu_gap = run.for_stage(o.stage.id)
        _compare_with_timing(o, rubric)
    return run


def _compare_with_timing(o: StageOutcome, rubric: Rubric) -> None:
    """The code profiled must be the code timed (grader/profile/agreement.py): when ncu's launch and the
    stage child's launches disagree, the stage's ncu items fail (its technique evidence is not the timed
    kernel's); when a timed stage lacks what the comparison needs, they are not evaluated."""
    if o.ncu is None or o.timing is None or o.bench is None:
        return
    prof, bench = rubric.profile, o.bench
    ncu_ns = o.ncu.get(agreement.DURATION_METRIC)
    found = None
    if isinstance(ncu_ns, (int, float)) and bench.profile_n == o.profile_n:
        # With clock_control "base" ncu runs the kernel at base clocks, the stage child at whatever the
        # GPU runs: their durations differ by the clock ratio, so only the rates are compared then.
        duration = prof.duration_agreement if prof.clock_control == "none" else None
        found = agreement.judge(o.profile_n, float(ncu_ns), bench.profile_ms, bench.n, bench.student_ms,
                                duration, prof.rate_agreement)
    o.agreement = found
    if found is None:
        o.ncu = None
        o.ncu_gap = Gap(Cause.GRADER, f"not evaluated: the kernel's launches at the profile size N={o.profile_n} "
                        "were not timed (or ncu gave no duration), so whether Nsight Compute measured the code "
                        "that was timed is not known")
    elif found.problem:
        o.ncu, o.ncu_gap = None, Gap(Cause.STUDENT, found.problem)


def _stop(early: EarlyProfile | None, schedule: Schedule | None) -> None:
    """The early ncu run is not needed: end it at its gate and wait until it has gone."""
    if early is not None and schedule is not None:
        schedule.stop(early.party)
        schedule.wait(early.party)
