"""Rubric items -> points. Pure: reads stage outcomes, returns ItemResults.

Each item kind has one evaluator. An item the grader could not look at (no GPU,
no cuobjdump) is ``not_evaluated``: 0 points and a message saying why, never
worded as the student's failure. A stage that failed correctness is never timed
in the feedback: its speed items fail with "not timed".

The static items (``compiles``, ``no_spills``, ``sass``) read only what the build gives
(ptxas, the cubin, the SASS), never the GPU run: a verdict reached without a GPU is the
one a GPU run reaches, so a point earned statically is never taken back. They describe a
kernel, so they count only for a kernel that is evidently an attempt (:func:`attempt`):
the starter's empty kernels compile, but score nothing.
"""
from __future__ import annotations

from dataclasses import replace

from grader.grading import StageOutcome
from grader.model import Cause, Gap, ItemResult, Status
from grader.rubric.items import SPEED_KINDS, Item, curve, is_technique
from grader.rubric.peaks import Peaks
from grader.rubric.types import Stage


def _result(stage: Stage, item: Item, status: Status, fraction: float, message: str, *,
            needs_gpu: bool = False, **values) -> ItemResult:
    score = round(item.points * fraction, 4) if status == Status.PASSED or fraction > 0 else 0.0
    return ItemResult(stage=stage.id, item=item.id, title=item.title, status=status, score=score,
                      max_score=item.points, message=message, visibility=item.visibility,
                      number=f"{stage.number}.{item.id}", values=values, needs_gpu=needs_gpu, bonus=stage.bonus)


def _with_next_step(r: ItemResult, o: StageOutcome) -> ItemResult:
    """A failed speed item points at the stage's Nsight Compute diagnosis."""
    if r.status == Status.FAILED and o.ncu:
        partial = r.score and "on the curve this earns" not in r.message  # the curve's note says it already
        r.message += (f". {'Partial credit: ' + format(r.score, 'g') + ' points. ' if partial else ''}"
                      "summary.md ('What Nsight Compute says') names this kernel's bottleneck and the next step")
    return r


# SASS opcodes that write global memory: stores (STG, and ST through a generic pointer),
# reductions and atomics, and the Hopper TMA / bulk copies from shared memory. Shared (STS)
# and local (STL) stores do not reach C.
GLOBAL_WRITES = frozenset({"STG", "ST", "RED", "REDG", "ATOM", "ATOMG", "UTMASTG", "UTMAREDG", "UBLKCP",
                           "UBLKRED"})


# What to do when a required opcode is missing from the SASS (the first missing one decides).
MISSING_HINTS = {
    "HMMA": "call wmma::mma_sync on half fragments inside the k loop",
    "HGMMA": ("issue wgmma.mma_async (sm_90a) on shared-memory descriptors of the tiles; wmma::mma_sync and mma.sync "
              "compile to HMMA, the previous stage's path"),
    "UTMALDG": ("load the tiles with cp.async.bulk.tensor from the tensor maps the grader passes (tmA, tmB); "
                "cp.async and plain loads do not use the tensor memory accelerator"),
}


def required_ops(stage: Stage) -> list[str]:
    """The opcodes the stage's own ``sass`` items require (FFMA for FP32 stages, HMMA for WMMA)."""
    return list(dict.fromkeys(op for it in stage.items if it.kind == "sass" for op in it.params.get("require", [])))


def attempt(o: StageOutcome, *, arithmetic: bool = False) -> tuple[bool | None, str]:
    """Is the compiled kernel evidently an attempt at the stage? (True, "") when its SASS writes
    global memory (it can write C) and, with ``arithmetic``, executes the instructions the
    stage's sass items require; (False, what is missing) when not; (None, why not known) without
    its SASS. Read from the cubin alone, so the answer is the same with or without a GPU; the
    starter's empty kernels (EXIT only) are never an attempt, whatever their source says."""
    kernel = o.stage.kernel
    if o.sass is None or not o.sass.available:
        return None, f"whether {kernel} writes C is read from its SASS, and there is none: " + (
            o.sass.reason if o.sass else "no SASS")
    ops = o.sass.opcodes.get(kernel)
    if ops is None:
        return None, f"whether {kernel} writes C is read from its SASS, and cuobjdump printed none for {kernel}"
    if not any(ops.get(op) for op in GLOBAL_WRITES):
        return False, (f"the SASS of {kernel} has no store to global memory, so it never writes C (is the body "
                       "still the starter's TODO?)")
    missing = [op for op in required_ops(o.stage) if not ops.get(op)] if arithmetic else []
    if missing:
        return False, (f"the SASS of {kernel} has no {', '.join(missing)} instruction, so it does not yet compute "
                       "this stage's product")
    return True, ""


def _threshold(value: float, item: Item) -> tuple[Status, float]:
    """(status, fraction of points) for a value on the item's curve (grader/rubric/curve.py)."""
    frac = curve(item).fraction(value)
    return (Status.PASSED, 1.0) if frac >= 1.0 else (Status.FAILED, frac)


def curve_note(item: Item, value: float, show) -> str:
    """What ``value`` earned on the item's curve and what the next points need (grader/rubric/curve.py)."""
    return curve(item).note(item.points, value, show)


def _timing_gap(o: StageOutcome) -> Gap | None:
    """Why this stage has no timing (None when it has one)."""
    if o.timing is not None:
        return None
    if o.compile is None or not o.compile.ok:
        return Gap(Cause.STUDENT, "not timed: the stage did not compile")
    if o.gpu_reason:  # set by the pipeline exactly when the run has no usable GPU
        return Gap(Cause.NO_GPU, f"not evaluated: {o.gpu_reason}")
    if o.correct is False:
        return Gap(Cause.STUDENT, "not timed: the kernel is not correct (a speed is never reported for a wrong result)")
    return Gap(Cause.STUDENT, "not timed: no timing was recorded")


def evaluate(item: Item, o: StageOutcome, outcomes: dict[str, StageOutcome], peaks: Peaks) -> ItemResult:
    st, c = o.stage, o.compile
    kind = item.kind
    if o.unsupported:  # the machine cannot grade this stage at all (grader/compile/toolchain.py: unsupported_reason)
        return _result(st, item, Status.NOT_EVALUATED, 0, o.unsupported)
    # A compiled stage has its ptxas record and launch shape (compile_stage sets ok only then).
    k, launch = (c.kernel, c.launch) if c is not None and c.ok else (None, None)
    if kind == "compiles":
        if c is not None and k is not None and launch is not None:
            msg = (f"compiled; {k.registers} registers, {k.shared_bytes} B static shared memory, "
                   f"launch {launch.block[0]}x{launch.block[1]} threads, tile {launch.tile[0]}x"
                   f"{launch.tile[1]} ({c.launch_source})")
            tried, why = attempt(o)
            if tried is None:
                return _result(st, item, Status.NOT_EVALUATED, 0, f"{msg}; not evaluated: {why}")
            if not tried:
                return _result(st, item, Status.FAILED, 0, f"{msg}. No credit yet: {why}; this item counts once "
                               f"{st.kernel} writes C", registers=k.registers)
            return _result(st, item, Status.PASSED, 1, msg, registers=k.registers)
        if c is None:
            return _result(st, item, Status.FAILED, 0, "not compiled")
        return _result(st, item, c.cause.status, 0, c.problem)
    if k is None:
        return _result(st, item, Status.FAILED, 0, "no credit: the stage did not compile; its compile item shows "
                       "why, and every other item of the stage waits on it")

    if kind == "no_spills":
        msg = (f"{k.registers} registers/thread, {k.spill_stores} B spill stores, {k.spill_loads} B spill "
               f"loads, {k.stack_frame} B stack frame (ptxas -v)")
        # Static, like the compile item: an empty or stub kernel spills nothing, so its register use
        # counts only once the SASS shows the stage's own work. Correctness is never read here, so a
        # GPU run cannot take these points back.
        tried, why = attempt(o, arithmetic=True)
        if tried is None:
            return _result(st, item, Status.NOT_EVALUATED, 0, f"{msg}; not evaluated: {why}")
        if not tried:
            return _result(st, item, Status.FAILED, 0, f"{msg}. No credit yet: {why}, and a kernel that does "
                           "not do the work spills nothing", registers=k.registers)
        if k.spills:
            return _result(st, item, Status.FAILED, 0, msg + ": expected 0 B of spills. Registers spill to local "
                           "memory (slow, global-memory traffic). __launch_bounds__(threads, minBlocks) caps "
                           "registers at 65536 / (threads x minBlocks); a smaller per-thread tile needs fewer",
                           registers=k.registers)
        return _result(st, item, Status.PASSED, 1, msg, registers=k.registers)

    if kind == "sass":
        if o.sass is None or not o.sass.available:
            return _result(st, item, Status.NOT_EVALUATED, 0,
                           f"not evaluated: {o.sass.reason if o.sass else 'no SASS'}")
        ops = o.sass.opcodes.get(st.kernel)
        if ops is None:
            return _result(st, item, Status.NOT_EVALUATED, 0, f"not evaluated: no SASS for {st.kernel}")
        forbidden = {op: ops[op] for op in item.params.get("forbid", []) if ops.get(op)}
        missing = [op for op in item.params.get("require", []) if not ops.get(op)]
        if forbidden:
            found = ", ".join(f"{op} x{n}" for op, n in forbidden.items())
            return _result(st, item, Status.FAILED, 0, f"the SASS of {st.kernel} contains {found}: this stage must "
                           "run on FP32 CUDA cores (FFMA only), not Tensor Cores. Look for wmma / mma.h, "
                           "__half arithmetic or TF32 conversions in this file", opcodes=dict(forbidden))
        if missing:
            hint = MISSING_HINTS.get(missing[0], "the body is empty (still the TODO?) or the compiler removed "
                                     "the loop because nothing it computes reaches C")
            return _result(st, item, Status.FAILED, 0, f"the SASS of {st.kernel} has no {', '.join(missing)} "
                           f"instruction, which this stage needs: {hint}")
        shown = ", ".join(f"{op} x{ops[op]}" for op in item.params.get("require", []))
        none_of = " none of " + "/".join(item.params["forbid"]) if item.params.get("forbid") else ""
        return _result(st, item, Status.PASSED, 1, f"SASS checked: {sum(ops.values())} instructions"
                       + (f"; {shown}" if shown else "") + (f";{none_of}" if none_of else ""))

    if kind == "ncu":
        from grader.score.ncu import evaluate_ncu_item
        return evaluate_ncu_item(item, o)

    if kind == "correct":
        if o.correct is None:
            return _result(st, item, Status.NOT_EVALUATED, 0,
                           o.correctness_message or f"not evaluated: {o.gpu_reason}", needs_gpu=bool(o.gpu_reason))
        return _result(st, item, Status.PASSED if o.correct else Status.FAILED, 1 if o.correct else 0,
                       o.correctness_message)

    gap = _timing_gap(o)
    if gap:
        return _result(st, item, gap.cause.status, 0, gap.message, needs_gpu=gap.cause is Cause.NO_GPU)
    t = o.timing
    assert t is not None  # _timing_gap said it is timed
    if t.fraction_of_baseline > st.plausible_max:
        base = st.baseline_label
        return _result(st, item, Status.REVIEW, 0, f"flagged for review, not scored: {t.tflops:.1f} TFLOP/s is "
                       f"{t.fraction_of_baseline:.2f}x {base} on the same inputs, more than the plausible "
                       f"{st.plausible_max:g}x; course staff will look at this kernel",
                       fraction_of_baseline=t.fraction_of_baseline)
    if kind == "fraction_of_baseline":
        status, frac = _threshold(t.fraction_of_baseline, item)
        base = st.baseline_label
        msg = (f"{t.tflops:.2f} TFLOP/s = {100 * t.fraction_of_baseline:.1f}% of {base} "
               f"({t.median_ms:.3f} ms vs {t.baseline_median_ms:.3f} ms, median of {t.reps} interleaved "
               f"runs at N={t.n}); needs at least {100 * item.params['min']:.0f}% for full points"
               + curve_note(item, t.fraction_of_baseline, lambda v: f"{100 * v:.1f}%"))
        return _with_next_step(_result(st, item, status, frac, msg, fraction_of_baseline=t.fraction_of_baseline), o)
    if kind == "fraction_of_peak":
        peak = peaks.get(item.params["peak"])
        if not peak:
            return _result(st, item, Status.NOT_EVALUATED, 0, f"not evaluated: {peaks.source}")
        value = t.tflops / peak
        status, frac = _threshold(value, item)
        label = "FP32 CUDA-core" if item.params["peak"] == "fp32" else "FP16 Tensor Core"
        msg = (f"{t.tflops:.1f} TFLOP/s = {value:.2f} x the {label} peak of {peak:.1f} TFLOP/s "
               f"({peaks.source}); needs at least {item.params['min']:g} x for full points"
               + curve_note(item, value, lambda v: f"{v:.2f} x"))
        return _with_next_step(_result(st, item, status, frac, msg, tflops=t.tflops, ratio=value), o)
    if kind == "speedup_over_stage":
        other = outcomes.get(item.params["stage"])
        gap = _timing_gap(other) if other else Gap(Cause.STUDENT, "stage not graded in this run")
        if gap:
            return _result(st, item, gap.cause.status, 0,
                           f"needs a timed `{item.params['stage']}` stage to compare with: {gap.message}",
                           needs_gpu=gap.cause is Cause.NO_GPU)
        assert other is not None and other.timing is not None  # _timing_gap said it is timed
        # Same baseline in both runs, so the ratio of fractions cancels GPU-state drift.
        value = t.fraction_of_baseline / other.timing.fraction_of_baseline
        status, frac = _threshold(value, item)
        msg = (f"{value:.2f}x faster than your {other.stage.title} kernel; needs at least {item.params['min']:g}x"
               " for full points" + curve_note(item, value, lambda v: f"{v:.2f}x"))
        return _result(st, item, status, frac, msg, speedup=value)
    raise ValueError(f"unknown item kind {kind}")  # rubric validation prevents this


def gate_speed(stage: Stage, results: list[ItemResult]) -> list[ItemResult]:
    """A stage's speed items earn points only once every technique item of the stage passed: the
    speed is real, but it is this stage's only when the evidence shows this stage's technique."""
    technique = [r for r, it in zip(results, stage.items) if is_technique(it)]
    waiting = [r for r in technique if r.status != Status.PASSED]
    if not waiting:
        return results
    unread = [r for r in waiting if r.status == Status.NOT_EVALUATED]
    names = ", ".join(r.number for r in waiting)
    out = []
    for r, it in zip(results, stage.items):
        if it.kind not in SPEED_KINDS or r.status not in (Status.PASSED, Status.FAILED) or not r.values:
            out.append(r)
            continue
        would = f" (the speed alone would earn {r.score:g} of {r.max_score:g} points)" if r.score else ""
        if unread:
            why = "; ".join(dict.fromkeys(u.message for u in unread))
            out.append(replace(r, status=Status.NOT_EVALUATED, score=0.0, needs_gpu=any(u.needs_gpu for u in unread),
                               values={**r.values, "gated_by": [u.number for u in waiting]},
                               message=f"{r.message}. Speed points wait on this stage's technique evidence "
                                       f"({names}), which could not be read: {why}{would}"))
            continue
        out.append(replace(r, status=Status.FAILED, score=0.0,
                           values={**r.values, "gated_by": [u.number for u in waiting]},
                           message=f"{r.message}. No speed points yet: they count once this stage's technique "
                                   f"items pass ({names}: see those items){would}"))
    return out


def score(outcomes: dict[str, StageOutcome], peaks: Peaks) -> list[ItemResult]:
    return [r for o in outcomes.values()
            for r in gate_speed(o.stage, [evaluate(item, o, outcomes, peaks) for item in o.stage.items])]
