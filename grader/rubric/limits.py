"""How long one stage child may run: derived from what the stage's reference kernel needs.

A stage child (grader/children/stage.py) starts Python and CuPy, loads the kernel, runs it once
at each correctness size, then times it at the benchmark size. One constant for every stage long
enough for the slowest would let a kernel that hangs or floods its output hold the GPU for minutes.
The limit follows the reference kernel of the stage, measured on the reference GPU
(``stages[].limits.reference_s``: the ``run.bench`` phase of its grading.json):

    limit = max(floor_s, allowance_s + M * correctness share + bench(M * per-rep time))

with M = ``settings.stage_limits.multiple``. The parts:

* **allowance_s** is what does not scale with the kernel: the process start, CuPy's import, the
  CUDA context, CuPy's own kernels, the small correctness runs' set-up (2.2-2.6 s per stage:
  docs/measurements/2026-11-30-h200-stage-limits.md).
* **the benchmark** runs ``warmup`` repetitions, then timed ones until ``reps`` are done, or until
  ``max_seconds`` have passed with at least ``min_reps`` done (grader/children/stage.py). The
  reference finishes all of its reps (each takes milliseconds), so one repetition (the student's
  launch, cuBLAS's, the L2 flush, the fresh inputs) takes ``reference_s / (warmup + reps)``. A
  kernel M times slower takes at most M times that per repetition, and :func:`bench_seconds`
  applies the stopping rule to it: while ``M * reference_s`` stays under ``max_seconds`` that is
  simply M times the reference; past it, ``max_seconds`` caps the loop, so the limit never needs to
  grow beyond ``max_seconds`` plus one repetition however slow the kernel is.
* **the correctness runs** at sizes n take (n / bench.n)^3 of a benchmark launch each (a few percent
  at the default sizes); their M-times-slower share is added too.

So a correct kernel up to M times slower than the reference is never stopped, while a kernel that
hangs is stopped at that limit (the floor of 10 s for every stage, with
the rubric's values), and one that floods its output is stopped the moment its output passes
``settings.output_limit_bytes`` (the fence's output cap, grader/sandbox/process.py), whatever its limit.

Set by hand instead: a stage's ``limits.run_s`` wins; else ``settings.timeouts.stage_run_s`` for
every stage; a stage with no ``reference_s`` gets ``settings.stage_limits.unmeasured_s``.
``python -m grader calibrate`` prints the reference_s values it measured (grader/instructor/calibrate.py).
"""
from __future__ import annotations

import math

from grader.evidence.limits import LimitSource, StageLimit
from grader.evidence.rubric import Bench, Stage
from grader.rubric.types import Rubric


def bench_seconds(per_rep_s: float, bench: Bench) -> float:
    """How long the stage child's benchmark loop runs when one repetition takes ``per_rep_s``:
    ``warmup`` repetitions, then timed ones until ``reps`` are done or ``max_seconds`` have passed
    with ``min_reps`` done (the loop looks at the clock after each repetition)."""
    if per_rep_s <= 0:
        return 0.0
    past_max = math.floor(bench.max_seconds / per_rep_s) + 1  # the first repetition that ends past max_seconds
    timed = min(bench.reps, max(bench.min_reps, past_max))
    return (bench.warmup + timed) * per_rep_s


def derived_seconds(reference_s: float, stage: Stage, rubric: Rubric) -> float:
    """What a kernel ``multiple`` times slower than the reference needs, start-up included (see the
    module docstring), rounded up to a tenth of a second; the floor is not applied here."""
    lim, bench = rubric.stage_limits, stage.bench
    slow_rep = lim.multiple * reference_s / (bench.warmup + bench.reps)
    correctness = slow_rep * sum((n / bench.n) ** 3 for n in rubric.correctness_sizes)
    return math.ceil((lim.allowance_s + correctness + bench_seconds(slow_rep, bench)) * 10) / 10


def stage_limit(stage: Stage, rubric: Rubric) -> StageLimit:
    """The time limit of ``stage``'s child: set by hand, derived from its reference, or the default."""
    if stage.limits.run_s is not None:
        return StageLimit(stage.limits.run_s, LimitSource.STAGE, why="set by hand for this stage (limits.run_s)")
    if rubric.timeouts.stage_run_s is not None:
        return StageLimit(rubric.timeouts.stage_run_s, LimitSource.RUBRIC,
                          why="set by hand for every stage (settings.timeouts.stage_run_s)")
    ref, lim = stage.limits.reference_s, rubric.stage_limits
    if ref is None:
        return StageLimit(lim.unmeasured_s, LimitSource.UNMEASURED,
                          why="no reference time measured for this stage (settings.stage_limits.unmeasured_s)")
    needed = derived_seconds(ref, stage, rubric)
    room = (f"a kernel {lim.multiple:g} times slower than the reference kernel, whose timed benchmark took "
            f"{ref:g} s, needs {needed:g} s with start-up")
    if needed < lim.floor_s:
        return StageLimit(lim.floor_s, LimitSource.DERIVED, ref, why=f"the floor of {lim.floor_s:g} s; {room}")
    return StageLimit(needed, LimitSource.DERIVED, ref, why=room)
