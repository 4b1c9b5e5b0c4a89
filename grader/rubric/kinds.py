"""The stage item kinds: one typed entry per kind, the one place that knows how a kind is read and judged.

A stage item names a ``kind`` and that kind's ``params``. Each :class:`Kind` declares, together:

- its parameters: its own frozen record (``record``, grader/evidence/params.py, where grading.json's records live)
  and how rubric.yaml gives each of them (:class:`Param`: types, required, what it means); whether it is a speed
  kind (its points wait on the stage's technique items: grader/score/stages.py ``gate_speed``), whether it may be
  technique evidence (it takes ``technique``), and its own checks of the record (:func:`stage_item` runs them);
- its judge: ``judge(kind, item, params, outcome, context) -> ItemResult``, given its own entry and the item's
  params as its own record (:meth:`Kind.judged`), reading the stage's record (grader.grading.StageOutcome);
- its measured number: the key of ``ItemResult.values`` that holds it (:meth:`Kind.measured`), and the param
  holding its level (:meth:`Kind.threshold`), which rescore, what-if and the calibration read;
- its handout wording (what "passes when" says), its calibration reading (:meth:`Kind.reading`) or why it is
  not calibrated, and what-if's axis label.

:data:`REGISTRY` holds the course's kinds. The callers take a :class:`Registry` (this one by default), so a
copy with one entry replaced (:meth:`Registry.replace`) changes the scoring, the handout and the calibration
together.

An item the grader could not look at (no GPU, no cuobjdump) is ``not_evaluated``: 0 points and a message
saying why, never worded as the student's failure. A stage that failed correctness is never timed in the
feedback: its speed items fail with "not timed". The static kinds (``compiles``, ``no_spills``, ``sass``) read
only what the build gives (ptxas, the cubin, the SASS), never the GPU run: a verdict reached without a GPU is
the one a GPU run reaches, so a point earned statically is never taken back. They describe a kernel, so they
count only for a kernel that is evidently an attempt (:func:`attempt`): the starter's empty kernels compile,
but score nothing.

The ``ncu`` kind: ``expr`` (and ``value`` when it is a string) is written in the rubric's expression language
(grader/rubric/expr.py), e.g.::

    expr: smsp__inst_executed_op_shared_ld.sum / (sm__sass_thread_inst_executed_op_ffma_pred_on.sum / 32)
    op: "<="
    value: 0.5

A stage whose kernel is not correct is never credited for its counters (FAILED,
"not profiled: ..."); when the grader could not profile (no ncu, counters locked, no GPU) the item is
NOT_EVALUATED with the reason. The status follows the cause of the stage's ``ncu_gap``, never its wording.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from grader.evidence.limits import Peaks
from grader.evidence.params import (
    CompilesParams,
    CorrectParams,
    Curved,
    FractionOfBaselineParams,
    FractionOfPeakParams,
    ItemParams,
    NcuParams,
    NoSpillsParams,
    ParamValue,
    SassParams,
    SpeedupOverStageParams,
)
from grader.evidence.profile import TimingSummary
from grader.evidence.rubric import Item, Stage
from grader.grading import StageOutcome
from grader.model import Cause, Gap, ItemResult, Measured, NcuValue, Status
from grader.rubric.curve import Curve, check_curve, curve_of
from grader.rubric.errors import RubricError
from grader.rubric.expr import (
    COMPARE,
    METRIC_RE,
    ExprError,
    MissingMetric,
    check_expression,
    evaluate_expr,
    fmt,
    passes,
)
from grader.rubric.items import read_item
from grader.rubric.metric_names import NOT_PROFILED_PREFIX, missing_metric_message
from grader.rubric.peaks import PEAKS
from grader.rubric.reader import Reader, Types
from grader.rubric.types import BASELINES, Rubric, baseline_label

NCU_OPS = tuple(COMPARE)
P = TypeVar("P", bound=ItemParams)


def _number(value: ParamValue | None) -> float:
    """A param that holds a number (a threshold kind's level) as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {value!r}")
    return float(value)


PEAK_WORDS = {"fp32": "FP32 CUDA-core peak", "fp16_tensor": "FP16/BF16 Tensor Core peak"}


@dataclass(frozen=True)
class Param:
    """One parameter of a kind: the types its value may have, whether it must be given, and what it means."""

    types: Types
    required: bool
    doc: str


@dataclass(frozen=True)
class JudgeContext:
    """What a judge may read beyond its own stage: the other stages (speedups), the device's peaks."""

    outcomes: Mapping[str, StageOutcome] = field(default_factory=dict)
    peaks: Peaks = field(default_factory=lambda: Peaks(None, None, "no device"))


@dataclass(frozen=True)
class Reading:
    """What the calibration reads of one item's result: the value, the level it is compared with, the comparison
    (``"sass"``: a pass or fail with no number), and whether it passed (the item's status is PASSED)."""

    value: float | None
    threshold: float | None
    op: str
    passed: bool


def _no_check(params: ItemParams, r: Reader) -> None:
    """A kind whose params need no check beyond their types."""


@dataclass(frozen=True)
class Kind(Generic[P]):
    """One stage item kind (see the module docstring), over its params record ``P``."""

    name: str
    summary: str  # what the kind checks, in a line
    record: type[P]  # its params record (grader/evidence/params.py), the one its judge, handout and axis receive
    params: Mapping[str, Param]  # how rubric.yaml gives each field of ``record``
    # The verdict, given its own entry (its curve) and the item's params as ``record``.
    judge: Callable[[Kind[P], Item, P, StageOutcome, JudgeContext], ItemResult]
    # What "passes when" says in the handout (grader/instructor/handout.py adds the gate), given its own entry.
    handout: Callable[[Kind[P], Item, P, Stage, Rubric], str]
    # The params' own checks, after their types (RubricError names the key).
    validate: Callable[[P, Reader], None] = _no_check
    speed: bool = False  # scored on the timing; its points wait on the stage's technique items
    needs_compile: bool = True  # judged only once the stage compiled (score/stages.py says so otherwise)
    # Judged from the build alone (nvcc, ptxas -v, the SASS): no run of the kernel feeds it, so a change of how the
    # stage is run or timed leaves it as graded (grader/instructor/rescore.py).
    from_build: bool = False
    measured_key: str | None = None  # the key of ItemResult.values holding the number it is graded on
    level_param: str | None = None  # the param holding the level that number is compared with
    other_stage_param: str | None = None  # the param naming another stage it is measured against
    expression_params: tuple[str, ...] = ()  # params holding Nsight Compute expressions (the stored profile's)
    calibrated: bool = False  # has a calibration reading for every item (a threshold); else as technique only
    not_calibrated: str = ""  # why the calibration does not read it (the static kinds)
    axis: Callable[[P, Mapping[str, Stage]], str] | None = None  # what-if's histogram axis (threshold kinds)
    # How a title may state its threshold (grader/rubric/titles.py checks the numbers it states): "N%" over this
    # scale (100: the level is a fraction; with a ``unit`` param, only when the unit is "%"), "N x", "at least N".
    title_percent: float | None = None
    title_times: bool = False
    title_bounds: bool = False

    def __post_init__(self) -> None:
        fields_ = {f.name: f for f in dataclasses.fields(self.record)}
        if set(fields_) != set(self.params) or self.record.KIND != self.name:
            raise TypeError(f"kind {self.name}: its params {sorted(self.params)} are not the fields of "
                            f"{self.record.__name__} ({sorted(fields_)}, kind {self.record.KIND})")
        mismatched = [n for n, p in self.params.items() if p.required == (fields_[n].default is None)]
        if mismatched:
            raise TypeError(f"kind {self.name}: {mismatched} required in its params but not its record, or the "
                            "other way round")

    def read(self, r: Reader, item_id: str) -> Item:
        """The item of this kind at ``r``: each of its params read as its Param says (the reader checks each value's
        type), into its record; :meth:`check` then runs the kind's own checks."""
        given: dict[str, ParamValue] = {}
        for name, param in self.params.items():
            value = r.get(name, param.types) if param.required else r.get(name, param.types, None)
            if value is not None:
                given[name] = value
        return read_item(r, item_id, self.name, params=self.record(**given))

    def check(self, item: Item, r: Reader) -> None:
        """The kind's own checks of the item's params (RubricError names the key)."""
        self.validate(self.params_of(item), r)

    def params_of(self, item: Item) -> P:
        """The item's params, as this kind's record (TypeError for an item of another kind)."""
        p = item.params
        if not isinstance(p, self.record):
            raise TypeError(f"item {item.id} of kind {item.kind} has params {type(p).__name__}, not "
                            f"{self.record.__name__}")
        return p

    def handout_text(self, item: Item, stage: Stage, rubric: Rubric) -> str:
        """What "passes when" says of the item in the handout, by this kind's wording and curve."""
        return self.handout(self, item, self.params_of(item), stage, rubric)

    def judged(self, item: Item, o: StageOutcome, context: JudgeContext) -> ItemResult:
        """The item's verdict by this kind's judge, which reads this entry (its curve), not the shipped registry's."""
        return self.judge(self, item, self.params_of(item), o, context)

    def axis_label(self, item: Item, stages: Mapping[str, Stage]) -> str:
        """What-if's histogram axis for the item ("" for a kind without one)."""
        return self.axis(self.params_of(item), stages) if self.axis is not None else ""

    @property
    def technique_allowed(self) -> bool:
        """Whether an item of this kind may be technique evidence (it takes ``technique``)."""
        return "technique" in self.params

    @property
    def needs_profile(self) -> bool:
        """Whether it is graded from the stored Nsight Compute metrics."""
        return bool(self.expression_params)

    @property
    def threshold_kind(self) -> bool:
        """Graded by a number against a level (what-if and rescore read its number)."""
        return self.measured_key is not None

    def title_percent_scale(self, item: Item) -> float | None:
        """The scale of an "N%" in the item's title, None when its title states no percentage."""
        if "unit" in self.params and item.params.get("unit") != "%":
            return None
        return self.title_percent

    def op(self, item: Item) -> str:
        """How its number is compared with its level."""
        return self.params_of(item).comparison()

    def curve(self, item: Item) -> Curve:
        """The item's partial-credit curve (grader/rubric/curve.py; all or nothing without one)."""
        p = self.params_of(item)
        if self.level_param is None or not isinstance(p, Curved):
            raise TypeError(f"kind {self.name} has no curve")  # only threshold kinds have one
        level = p.get(self.level_param)
        return curve_of(p, float(level) if isinstance(level, (int, float)) else math.nan, self.op(item))

    def measured(self, result: ItemResult | None) -> float | None:
        """The number the item was graded on, from its result; None when nothing was measured (not timed,
        not profiled, no GPU) or the kind is not graded by a number."""
        if self.measured_key is None or result is None:
            return None
        value = getattr(result.values, self.measured_key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return None
        return float(value)

    def threshold(self, item: Item, result: ItemResult | None = None) -> float | None:
        """The level the item must reach: its level param, or (an expression in N) the one a result recorded."""
        value = item.params.get(self.level_param) if self.level_param else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        stored = result.values.threshold if result is not None else None
        return float(stored) if isinstance(stored, (int, float)) and not isinstance(stored, bool) else None

    def reading(self, item: Item, result: ItemResult | None) -> Reading:
        """The calibration's reading of one result (grader/instructor/calibrate.py)."""
        passed = bool(result and result.status == Status.PASSED)
        if self.measured_key is None:
            return Reading(None, None, self.name, passed)
        level: float | None
        if self.needs_profile or self.level_param is None:
            # An Nsight Compute level may be an expression in N or in metrics: the one its judge computed.
            level = result.values.threshold if result else None
        else:
            level = _number(item.params.get(self.level_param))
        value = getattr(result.values, self.measured_key) if result is not None else None
        return Reading(float(value) if isinstance(value, (int, float)) else None, level, self.op(item), passed)


# ---------------------------------------------------------------------------------------------
# What the judges share
# ---------------------------------------------------------------------------------------------
def result(stage: Stage, item: Item, status: Status, fraction: float, message: str, *,
           needs_gpu: bool = False, values: Measured | None = None) -> ItemResult:
    """One item's result: ``fraction`` of its points when it passed or earned part of them on its curve."""
    score = round(item.points * fraction, 4) if status == Status.PASSED or fraction > 0 else 0.0
    return ItemResult(stage=stage.id, item=item.id, title=item.title, status=status, score=score,
                      max_score=item.points, message=message, visibility=item.visibility,
                      number=f"{stage.number}.{item.id}", values=values or Measured(), needs_gpu=needs_gpu,
                      bonus=stage.bonus)


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
    return list(dict.fromkeys(op for it in stage.items for op in _sass_required(it)))


def _sass_required(item: Item) -> list[str]:
    return list(item.params.require or []) if isinstance(item.params, SassParams) else []


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


def timing_gap(o: StageOutcome) -> Gap | None:
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


def _on_curve(kind: Kind, item: Item, value: float) -> tuple[Status, float]:
    """(status, fraction of points) for a value on the item's curve (grader/rubric/curve.py)."""
    frac = kind.curve(item).fraction(value)
    return (Status.PASSED, 1.0) if frac >= 1.0 else (Status.FAILED, frac)


def _curve_note(kind: Kind, item: Item, value: float, show: Callable[[float], str]) -> str:
    """What ``value`` earned on the item's curve and what the next points need."""
    return kind.curve(item).note(item.points, value, show)


def _untimed(item: Item, o: StageOutcome) -> ItemResult | None:
    """A speed item's verdict when the stage has no usable timing (not timed, or implausibly fast); None when timed."""
    st = o.stage
    gap = timing_gap(o)
    if gap:
        return result(st, item, gap.cause.status, 0, gap.message, needs_gpu=gap.cause is Cause.NO_GPU)
    t = o.timing
    assert t is not None  # timing_gap said it is timed
    if t.fraction_of_baseline > st.plausible_max:
        base = baseline_label(st)
        return result(st, item, Status.REVIEW, 0, f"flagged for review, not scored: {t.tflops:.1f} TFLOP/s is "
                      f"{t.fraction_of_baseline:.2f}x {base} on the same inputs, more than the plausible "
                      f"{st.plausible_max:g}x; course staff will look at this kernel",
                      values=Measured(fraction_of_baseline=t.fraction_of_baseline))
    warm = long_warmup(t, st.bench.warmup_review_multiple)
    if warm:
        return result(st, item, Status.REVIEW, 0, f"flagged for review, not scored: {warm}; course staff will "
                      "look at this kernel", values=Measured(fraction_of_baseline=t.fraction_of_baseline))
    return None


def long_warmup(t: TimingSummary, multiple: float) -> str:
    """Why the warm-up looks like preparation for the timed launches ("" when it does not): a warm-up
    launch more than ``multiple`` times the timed launches' median. Not a failure: a person looks."""
    slow = [(k, ms) for k, ms in enumerate(t.warmup_ms or [], 1) if ms > multiple * t.median_ms]
    if not slow:
        return ""
    k, ms = max(slow, key=lambda p: p[1])
    return (f"warm-up launch {k} took {ms:.3f} ms, {ms / t.median_ms:.1f}x the timed launches' median of "
            f"{t.median_ms:.3f} ms (more than {multiple:g}x, settings.bench.warmup_review_multiple): warm-up "
            "launches get fresh inputs as the timed ones do, so they should take about as long")


def sizes_words(rubric: Rubric) -> str:
    """The correctness sizes, as the handout lists them."""
    return ", ".join(str(n) for n in rubric.correctness_sizes)


def _curve_words(kind: Kind, item: Item, show: Callable[[float], str]) -> str:
    """The item's curve in words, after a "; " (nothing without a curve)."""
    text = kind.curve(item).words(show)
    return "; " + text if text else ""


# ---------------------------------------------------------------------------------------------
# compiles
# ---------------------------------------------------------------------------------------------
def _judge_compiles(kind: Kind[CompilesParams], item: Item, p: CompilesParams, o: StageOutcome,
                    context: JudgeContext) -> ItemResult:
    st, c = o.stage, o.compile
    k, launch = (c.kernel, c.launch) if c is not None and c.ok else (None, None)
    if c is not None and k is not None and launch is not None:
        msg = (f"compiled; {k.registers} registers, {k.shared_bytes} B static shared memory, "
               f"launch {launch.block[0]}x{launch.block[1]} threads, tile {launch.tile[0]}x"
               f"{launch.tile[1]} ({c.launch_source})")
        if c.notes:  # e.g. a file of the folder that no build reads, whose #include would be refused
            msg += ". Note: " + "; ".join(c.notes)
        tried, why = attempt(o)
        if tried is None:
            return result(st, item, Status.NOT_EVALUATED, 0, f"{msg}; not evaluated: {why}")
        if not tried:
            return result(st, item, Status.FAILED, 0, f"{msg}. No credit yet: {why}; this item counts once "
                          f"{st.kernel} writes C", values=Measured(registers=k.registers))
        return result(st, item, Status.PASSED, 1, msg, values=Measured(registers=k.registers))
    if c is None:
        return result(st, item, Status.FAILED, 0, "not compiled")
    return result(st, item, c.cause.status, 0, c.problem)


def _handout_compiles(kind: Kind[CompilesParams], item: Item, p: CompilesParams, stage: Stage, rubric: Rubric) -> str:
    tma = (f", and `{stage.tma_symbol}` declares valid TMA boxes" if stage.operands == "tensor_maps" else "")
    return (f"`nvcc` compiles `{stage.file}`, it defines `extern \"C\" {stage.kernel}`, and the launch shape "
            f"(`{stage.launch_symbol}` or the default) is valid{tma}")


# ---------------------------------------------------------------------------------------------
# correct
# ---------------------------------------------------------------------------------------------
def _judge_correct(kind: Kind[CorrectParams], item: Item, p: CorrectParams, o: StageOutcome,
                   context: JudgeContext) -> ItemResult:
    st = o.stage
    if o.correct is None:
        return result(st, item, Status.NOT_EVALUATED, 0,
                      o.correctness_message or f"not evaluated: {o.gpu_reason}", needs_gpu=bool(o.gpu_reason))
    return result(st, item, Status.PASSED if o.correct else Status.FAILED, 1 if o.correct else 0,
                  o.correctness_message)


def _handout_correct(kind: Kind[CorrectParams], item: Item, p: CorrectParams, stage: Stage, rubric: Rubric) -> str:
    return (f"every element within rtol = {stage.rtol:g} at N = {sizes_words(rubric)} and again at N = "
            f"{stage.bench.n} after timing")


# ---------------------------------------------------------------------------------------------
# no_spills
# ---------------------------------------------------------------------------------------------
def _judge_no_spills(kind: Kind[NoSpillsParams], item: Item, p: NoSpillsParams, o: StageOutcome,
                     context: JudgeContext) -> ItemResult:
    st, c = o.stage, o.compile
    k = c.kernel if c is not None else None
    assert k is not None  # needs_compile: score/stages.py judged an uncompiled stage's item already
    msg = (f"{k.registers} registers/thread, {k.spill_stores} B spill stores, {k.spill_loads} B spill "
           f"loads, {k.stack_frame} B stack frame ({k.source})")
    # Static, like the compile item: an empty or stub kernel spills nothing, so its register use
    # counts only once the SASS shows the stage's own work. Correctness is never read here, so a
    # GPU run cannot take these points back.
    tried, why = attempt(o, arithmetic=True)
    if tried is None:
        return result(st, item, Status.NOT_EVALUATED, 0, f"{msg}; not evaluated: {why}")
    if not k.spills_read:
        return result(st, item, Status.NOT_EVALUATED, 0, f"not evaluated: {st.kernel} has a {k.stack_frame} B "
                      "stack frame and its SASS was not read, so its spills are unknown")
    if not tried:
        return result(st, item, Status.FAILED, 0, f"{msg}. No credit yet: {why}, and a kernel that does "
                      "not do the work spills nothing", values=Measured(registers=k.registers))
    if k.spills:
        return result(st, item, Status.FAILED, 0, msg + ": expected 0 B of spills. Registers spill to local "
                      "memory (slow, global-memory traffic). __launch_bounds__(threads, minBlocks) caps "
                      "registers at 65536 / (threads x minBlocks); a smaller per-thread tile needs fewer",
                      values=Measured(registers=k.registers))
    return result(st, item, Status.PASSED, 1, msg, values=Measured(registers=k.registers))


def _handout_no_spills(kind: Kind[NoSpillsParams], item: Item, p: NoSpillsParams, stage: Stage,
                       rubric: Rubric) -> str:
    return "`ptxas -v`: 0 bytes spill stores and 0 bytes spill loads, and the kernel is correct"


# ---------------------------------------------------------------------------------------------
# sass
# ---------------------------------------------------------------------------------------------
def _judge_sass(kind: Kind[SassParams], item: Item, p: SassParams, o: StageOutcome,
                context: JudgeContext) -> ItemResult:
    st = o.stage
    if o.sass is None or not o.sass.available:
        return result(st, item, Status.NOT_EVALUATED, 0,
                      f"not evaluated: {o.sass.reason if o.sass else 'no SASS'}")
    ops = o.sass.opcodes.get(st.kernel)
    if ops is None:
        return result(st, item, Status.NOT_EVALUATED, 0, f"not evaluated: no SASS for {st.kernel}")
    forbidden = {op: ops[op] for op in (p.forbid or []) if ops.get(op)}
    missing = [op for op in (p.require or []) if not ops.get(op)]
    if forbidden:
        found = ", ".join(f"{op} x{n}" for op, n in forbidden.items())
        return result(st, item, Status.FAILED, 0, f"the SASS of {st.kernel} contains {found}: this stage must "
                      "run on FP32 CUDA cores (FFMA only), not Tensor Cores. Look for wmma / mma.h, "
                      "__half arithmetic or TF32 conversions in this file", values=Measured(opcodes=dict(forbidden)))
    if missing:
        hint = MISSING_HINTS.get(missing[0], "the body is empty (still the TODO?) or the compiler removed "
                                 "the loop because nothing it computes reaches C")
        return result(st, item, Status.FAILED, 0, f"the SASS of {st.kernel} has no {', '.join(missing)} "
                      f"instruction, which this stage needs: {hint}")
    shown = ", ".join(f"{op} x{ops[op]}" for op in (p.require or []))
    none_of = " none of " + "/".join(p.forbid) if p.forbid else ""
    return result(st, item, Status.PASSED, 1, f"SASS checked: {sum(ops.values())} instructions"
                  + (f"; {shown}" if shown else "") + (f";{none_of}" if none_of else ""))


def _validate_sass(params: SassParams, r: Reader) -> None:
    for key in ("forbid", "require"):
        ops = params.forbid if key == "forbid" else params.require
        if not all(isinstance(op, str) and op.strip() for op in ops or []):
            raise RubricError(r.path(key), f"is {ops!r}", "a list of SASS opcodes (strings)")
    if not (params.forbid or params.require):
        raise RubricError(r.where, "has neither forbid nor require", "a list of SASS opcodes in one of them")


def _handout_sass(kind: Kind[SassParams], item: Item, p: SassParams, stage: Stage, rubric: Rubric) -> str:
    parts = ["*technique*"] if p.is_technique() else []
    if p.require:
        parts.append("the SASS contains " + ", ".join(p.require))
    if p.forbid:
        parts.append("none of " + ", ".join(p.forbid))
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# The speed kinds: fraction_of_baseline, fraction_of_peak, speedup_over_stage
# ---------------------------------------------------------------------------------------------
def _validate_speed(params: FractionOfBaselineParams | SpeedupOverStageParams | FractionOfPeakParams,
                    r: Reader) -> None:
    check_curve(params, float(params.min), ">=", r.path)


def _validate_peak(params: FractionOfPeakParams, r: Reader) -> None:
    r.choice("peak", PEAKS)
    _validate_speed(params, r)


def _judge_fraction_of_baseline(kind: Kind[FractionOfBaselineParams], item: Item, p: FractionOfBaselineParams,
                                o: StageOutcome, context: JudgeContext) -> ItemResult:
    untimed = _untimed(item, o)
    if untimed is not None:
        return untimed
    st, t = o.stage, o.timing
    assert t is not None  # _untimed said it is timed
    status, frac = _on_curve(kind, item, t.fraction_of_baseline)
    base = baseline_label(st)
    msg = (f"{t.tflops:.2f} TFLOP/s = {100 * t.fraction_of_baseline:.1f}% of {base} "
           f"({t.median_ms:.3f} ms vs {t.baseline_median_ms:.3f} ms, median of {t.reps} interleaved "
           f"runs at N={t.n}); needs at least {100 * p.min:.0f}% for full points"
           + _curve_note(kind, item, t.fraction_of_baseline, lambda v: f"{100 * v:.1f}%"))
    return _with_next_step(result(st, item, status, frac, msg, values=Measured(fraction_of_baseline=t.fraction_of_baseline)), o)


def _judge_fraction_of_peak(kind: Kind[FractionOfPeakParams], item: Item, p: FractionOfPeakParams, o: StageOutcome,
                            context: JudgeContext) -> ItemResult:
    untimed = _untimed(item, o)
    if untimed is not None:
        return untimed
    st, t, peaks = o.stage, o.timing, context.peaks
    assert t is not None  # _untimed said it is timed
    peak = peaks.get(p.peak)
    if not peak:
        return result(st, item, Status.NOT_EVALUATED, 0, f"not evaluated: {peaks.source}")
    value = t.tflops / peak
    status, frac = _on_curve(kind, item, value)
    label = "FP32 CUDA-core" if p.peak == "fp32" else "FP16 Tensor Core"
    msg = (f"{t.tflops:.1f} TFLOP/s = {value:.2f} x the {label} peak of {peak:.1f} TFLOP/s "
           f"({peaks.source}); needs at least {p.min:g} x for full points"
           + _curve_note(kind, item, value, lambda v: f"{v:.2f} x"))
    return _with_next_step(result(st, item, status, frac, msg, values=Measured(tflops=t.tflops, ratio=value)), o)


def _judge_speedup(kind: Kind[SpeedupOverStageParams], item: Item, p: SpeedupOverStageParams, o: StageOutcome,
                   context: JudgeContext) -> ItemResult:
    untimed = _untimed(item, o)
    if untimed is not None:
        return untimed
    st, t = o.stage, o.timing
    assert t is not None  # _untimed said it is timed
    other = context.outcomes.get(p.stage)
    gap = timing_gap(other) if other else Gap(Cause.STUDENT, "stage not graded in this run")
    if gap:
        return result(st, item, gap.cause.status, 0,
                      f"needs a timed `{p.stage}` stage to compare with: {gap.message}",
                      needs_gpu=gap.cause is Cause.NO_GPU)
    assert other is not None and other.timing is not None  # timing_gap said it is timed
    # Same baseline in both runs, so the ratio of fractions cancels GPU-state drift.
    value = t.fraction_of_baseline / other.timing.fraction_of_baseline
    status, frac = _on_curve(kind, item, value)
    msg = (f"{value:.2f}x faster than your {other.stage.title} kernel; needs at least {p.min:g}x"
           " for full points" + _curve_note(kind, item, value, lambda v: f"{v:.2f}x"))
    return result(st, item, status, frac, msg, values=Measured(speedup=value))


def _handout_fraction_of_baseline(kind: Kind[FractionOfBaselineParams], item: Item, p: FractionOfBaselineParams,
                                  stage: Stage, rubric: Rubric) -> str:
    words = _curve_words(kind, item, lambda v: f"{100 * v:g}%")
    return (f"at least {100 * p.min:g}% of {BASELINES[stage.baseline].words}'s speed (its median time / "
            f"yours, interleaved runs at N = {stage.bench.n}) for full points{words}")


def _handout_fraction_of_peak(kind: Kind[FractionOfPeakParams], item: Item, p: FractionOfPeakParams, stage: Stage,
                              rubric: Rubric) -> str:
    words = _curve_words(kind, item, lambda v: f"{v:g} x")
    return (f"at least {p.min:g} x the {PEAK_WORDS[p.peak]} (TFLOP/s at N = {stage.bench.n}) for full "
            f"points{words}")


def _handout_speedup(kind: Kind[SpeedupOverStageParams], item: Item, p: SpeedupOverStageParams, stage: Stage,
                     rubric: Rubric) -> str:
    words = _curve_words(kind, item, lambda v: f"{v:g} x")
    return f"at least {p.min:g} x faster than your `{p.stage}` kernel{words}"


def _axis_fraction_of_baseline(p: FractionOfBaselineParams, stages: Mapping[str, Stage]) -> str:
    return "fraction of the baseline's speed"


def _axis_fraction_of_peak(p: FractionOfPeakParams, stages: Mapping[str, Stage]) -> str:
    return f"multiple of the {p.peak} peak"


def _axis_speedup(p: SpeedupOverStageParams, stages: Mapping[str, Stage]) -> str:
    other = stages.get(p.stage)
    return f"times faster than stage {other.number if other else p.stage}"


# ---------------------------------------------------------------------------------------------
# ncu
# ---------------------------------------------------------------------------------------------
def measure(p: NcuParams, metrics: Mapping[str, NcuValue], n: int) -> tuple[float, float]:
    """(measured value, threshold) of an ncu item's params on one kernel's metrics."""
    return evaluate_expr(p.expr, metrics, n), evaluate_expr(p.value, metrics, n)


def _with_unit(x: float, unit: str) -> str:
    if unit == "%":
        return fmt(x) + "%"
    return fmt(x) + (f" {unit}" if unit else "")


def _ncu_result(o: StageOutcome, item: Item, status: Status, message: str, *, needs_gpu: bool = False,
                fraction: float = 0.0, values: Measured | None = None) -> ItemResult:
    # A passed ncu item earns its points exactly as given (result() rounds them to 4 places).
    st = o.stage
    score = item.points if status == Status.PASSED else round(item.points * fraction, 4)
    return ItemResult(stage=st.id, item=item.id, title=item.title, status=status,
                      score=score, max_score=item.points,
                      message=message, visibility=item.visibility, number=f"{st.number}.{item.id}",
                      values=values or Measured(), needs_gpu=needs_gpu, bonus=st.bonus)


def _metric_values(metrics: Mapping[str, NcuValue], names: Iterable[str], sep: str) -> str:
    """``name = value`` of the named metrics that have a number, for an ncu item's message."""
    return sep.join(f"{m} = {fmt(float(v))}" for m in names
                    if isinstance(v := metrics.get(m), (int, float)) and not isinstance(v, bool))


def judge_ncu(item: Item, o: StageOutcome, context: JudgeContext | None = None) -> ItemResult:
    """The verdict on one ``ncu`` item for one stage under the shipped registry's ``ncu`` kind (see the module
    docstring for statuses); scoring calls the kind's own judge, so a replaced kind's curve applies."""
    return REGISTRY[NCU].judged(item, o, context or JudgeContext())


def _judge_ncu(kind: Kind[NcuParams], item: Item, p: NcuParams, o: StageOutcome, context: JudgeContext) -> ItemResult:
    explain = (p.explain or "").strip()
    tail = f" {explain}" if explain else ""
    if o.correct is False:
        return _ncu_result(o, item, Status.FAILED, f"{NOT_PROFILED_PREFIX} the kernel is not correct, so its "
                           "counters earn nothing; fix correctness first.")
    if o.ncu is None:
        gap = o.ncu_gap or Gap(Cause.GRADER, "not evaluated: no Nsight Compute metrics for this stage")
        return _ncu_result(o, item, gap.cause.status, gap.message, needs_gpu=gap.cause is Cause.NO_GPU)
    n = o.profile_n
    try:
        value, threshold = measure(p, o.ncu, n)
    except MissingMetric as exc:
        return _ncu_result(o, item, Status.NOT_EVALUATED, missing_metric_message(exc.args[0], o.ncu))
    except ExprError as exc:
        return _ncu_result(o, item, Status.NOT_EVALUATED, f"not evaluated: the rubric's expression is invalid (a "
                           f"course-staff problem): {exc}")
    except ZeroDivisionError:
        used = _metric_values(o.ncu, METRIC_RE.findall(p.expr), ", ")
        return _ncu_result(o, item, Status.FAILED, f"cannot compute {item.title!r}: the expression divides by zero "
                           f"for your kernel ({used}).{tail}")
    unit = (p.unit or "")
    ok = passes(p.op, value, threshold)
    # every metric of the expression has a number here: evaluate_expr raised MissingMetric otherwise
    inputs = _metric_values(o.ncu, dict.fromkeys(METRIC_RE.findall(p.expr)), "; ")
    verdict = "passed" if ok else "not met"
    ratio = f" = {value / n**3:.2f} x N^3" if "ffma" in p.expr and p.op == "==" and n else ""
    # The explanation ends with what to look at next: it belongs to a failed item only.
    # A declared curve gives part of the points short of the threshold (its value is a number then).
    c = kind.curve(item)
    frac = 1.0 if ok else c.fraction(value) if c.knees else 0.0
    note = "" if ok or not c.knees else c.note(item.points, value, lambda v: _with_unit(v, unit))
    message = (f"{verdict}: measured {_with_unit(value, unit)}{ratio}, needs {p.op} {_with_unit(threshold, unit)} "
               f"(Nsight Compute, one launch at N={n}; {inputs}){note}." + ("" if ok else tail))
    return _ncu_result(o, item, Status.PASSED if ok else Status.FAILED, message, fraction=frac,
                       values=Measured(value=value, threshold=threshold))


def _validate_ncu(params: NcuParams, r: Reader) -> None:
    r.choice("op", NCU_OPS)
    for key in ("expr", "value"):
        text = params.get(key)
        problem = check_expression(text) if isinstance(text, str) else ""
        if problem:
            raise RubricError(r.path(key), problem, "arithmetic over ncu metric names, numbers and N")
    value = params.value
    check_curve(params, None if isinstance(value, str) else float(value), params.op, r.path)
    if params.technique and params.integrity:
        raise RubricError(r.path("technique"), "is given beside integrity: true",
                          "one of them: technique evidence tells a stage from the one before, integrity does not")


def _handout_ncu(kind: Kind[NcuParams], item: Item, p: NcuParams, stage: Stage, rubric: Rubric) -> str:
    unit = (p.unit or "")
    unit = "%" if unit == "%" else (f" {unit}" if unit else "")
    value = str(p.value).replace("**", "^")
    words = _curve_words(kind, item, lambda v: f"{v:g}{unit}") if not isinstance(p.value, str) else ""
    mark = "*technique*: " if p.is_technique() else ""
    return (f"{mark}`{p.expr}` {p.op} {value}{unit} (Nsight Compute, one launch at N = "
            f"{rubric.profile.n}){words}")


def _axis_ncu(p: NcuParams, stages: Mapping[str, Stage]) -> str:
    unit = (p.unit or "")
    return f"{p.expr}" + (f" ({unit})" if unit else "")


# ---------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------
# The kinds' names, as their records (grader/evidence/params.py) name them for the codec.
COMPILES, CORRECT, NO_SPILLS, SASS = (str(r.KIND) for r in (CompilesParams, CorrectParams, NoSpillsParams, SassParams))
FRACTION_OF_BASELINE, SPEEDUP_OVER_STAGE, FRACTION_OF_PEAK, NCU = (
    str(r.KIND) for r in (FractionOfBaselineParams, SpeedupOverStageParams, FractionOfPeakParams, NcuParams))
# A registry's entry: a kind over one of the records.
AnyKind = (Kind[CompilesParams] | Kind[CorrectParams] | Kind[NoSpillsParams] | Kind[SassParams]
           | Kind[FractionOfBaselineParams] | Kind[SpeedupOverStageParams] | Kind[FractionOfPeakParams]
           | Kind[NcuParams])

# A threshold item's partial credit (grader/rubric/curve.py), one of these keys at most.
_CURVE = {
    "partial_from": Param((int, float), False, "the value from which part of the points is earned (linear to min)"),
    "curve": Param(list, False, "[[value, fraction of the points], ...]: partial credit between the knees"),
    "steps": Param(list, False, "[[value, fraction of the points], ...]: partial credit in steps"),
}
# `technique: true` on a sass or ncu item: the evidence that the stage's technique is there. The stage's
# speed items earn nothing until every technique item passes, so a fast kernel of the previous stage
# earns no speed points here; the calibration asks that the stage's textbook kernel passes it and that
# the previous stage's kernels fail it.
_TECHNIQUE = {"technique": Param(bool, False, "the item is technique evidence: the stage's speed items wait on it")}
_MIN = Param((int, float), True, "the level that earns full points")
_STATIC = "a static check (ptxas, the SASS or the checker's verdict) with no threshold to calibrate"


@dataclass(frozen=True)
class Registry:
    """The kinds by name. Immutable: :meth:`replace` gives a copy with one entry changed."""

    kinds: Mapping[str, AnyKind]

    def __getitem__(self, name: str) -> AnyKind:
        return self.kinds[name]

    def __iter__(self) -> Iterator[AnyKind]:
        return iter(self.kinds.values())

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.kinds)

    def get(self, name: str | None) -> AnyKind | None:
        return self.kinds.get(name) if name is not None else None

    def of(self, item: Item) -> AnyKind:
        """The kind of a stage item (ValueError for an item with none or an unknown one: rubric validation
        prevents both)."""
        kind = self.get(item.kind)
        if kind is None:
            raise ValueError(f"unknown item kind {item.kind}")
        return kind

    def replace(self, kind: AnyKind) -> Registry:
        """This registry with ``kind`` in place of the entry of the same name."""
        if kind.name not in self.kinds:
            raise KeyError(kind.name)
        return Registry({**self.kinds, kind.name: kind})


_KINDS: tuple[AnyKind, ...] = (
    Kind(COMPILES, "nvcc compiles the file and the kernel with a valid launch shape", CompilesParams, {},
         _judge_compiles, _handout_compiles, needs_compile=False, not_calibrated=_STATIC, from_build=True),
    Kind(CORRECT, "the checker's verdict on every correctness size", CorrectParams, {}, _judge_correct,
         _handout_correct, not_calibrated=_STATIC),
    Kind(NO_SPILLS, "ptxas -v reports no spill stores or loads", NoSpillsParams, {}, _judge_no_spills,
         _handout_no_spills, not_calibrated=_STATIC, from_build=True),
    Kind(SASS, "the SASS has the required opcodes and none of the forbidden", SassParams, {
        "forbid": Param(list, False, "SASS opcodes the kernel must not contain"),
        "require": Param(list, False, "SASS opcodes the kernel must contain"),
        **_TECHNIQUE}, _judge_sass, _handout_sass, validate=_validate_sass, from_build=True,
         not_calibrated="calibrated only as technique evidence (a pass or fail, no number)"),
    Kind(FRACTION_OF_BASELINE, "the stage's speed as a fraction of its baseline's", FractionOfBaselineParams,
         {"min": _MIN, **_CURVE},
         _judge_fraction_of_baseline, _handout_fraction_of_baseline, validate=_validate_speed, speed=True,
         measured_key="fraction_of_baseline", level_param="min", calibrated=True, axis=_axis_fraction_of_baseline,
         title_percent=100.0),
    Kind(SPEEDUP_OVER_STAGE, "the stage's speed over another stage's", SpeedupOverStageParams, {
        "stage": Param(str, True, "the id of the stage compared with"), "min": _MIN, **_CURVE},
         _judge_speedup, _handout_speedup, validate=_validate_speed, speed=True, measured_key="speedup",
         level_param="min", other_stage_param="stage", calibrated=True, axis=_axis_speedup, title_times=True,
         title_bounds=True),
    Kind(FRACTION_OF_PEAK, "the stage's TFLOP/s as a multiple of the device's peak", FractionOfPeakParams, {
        "peak": Param(str, True, "which peak: " + " or ".join(PEAKS)), "min": _MIN, **_CURVE},
         _judge_fraction_of_peak, _handout_fraction_of_peak, validate=_validate_peak, speed=True,
         measured_key="ratio", level_param="min", calibrated=True, axis=_axis_fraction_of_peak,
         title_percent=100.0, title_times=True),
    # An Nsight Compute criterion: `expr` over metric names (and N, the profile size),
    # compared with `value` (a number or an expression in N). See grader/rubric/expr.py.
    # `integrity: true`: the criterion checks that the work is done honestly, not that the stage moved
    # on, so the previous stage's kernel may pass it too (the calibration then asks only that the
    # reference passes). Without it, only an `==` criterion is one.
    Kind(NCU, "an expression over Nsight Compute metrics against a threshold", NcuParams, {
        "expr": Param(str, True, "arithmetic over ncu metric names, numbers and N (the profile size)"),
        "op": Param(str, True, "the comparison: " + ", ".join(NCU_OPS)),
        "value": Param((int, float, str), True, "the threshold: a number or an expression in N"),
        "explain": Param(str, False, "what to look at next, shown when the item fails"),
        "unit": Param(str, False, "the unit the values are shown in"),
        "integrity": Param(bool, False, "the criterion checks honest work, so the previous stage may pass it"),
        **_TECHNIQUE, **_CURVE}, _judge_ncu, _handout_ncu, validate=_validate_ncu, measured_key="value",
         level_param="value", expression_params=("expr", "value"), calibrated=True, axis=_axis_ncu,
         title_percent=1.0, title_bounds=True),
)
REGISTRY = Registry({k.name: k for k in _KINDS})


def curve(item: Item, registry: Registry = REGISTRY) -> Curve:
    """The item's partial-credit curve (all or nothing without one); a threshold kind's only."""
    return registry.of(item).curve(item)


def stage_item(raw: object, where: str, registry: Registry = REGISTRY) -> Item:
    """One entry of a stage's ``items`` list: its kind, that kind's params (its record), then the kind's checks."""
    r = Reader(raw, where)
    item_id = r.text("id")
    kind = registry[r.choice("kind", registry.names)]
    item = kind.read(r, item_id)
    r.done()
    kind.check(item, r)
    return item
