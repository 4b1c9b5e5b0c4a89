"""What the rubric says of one stage and its items, as grading.json keeps it (a stage's outcome holds its stage).

Plain typed records: grader/rubric reads rubric.yaml into them (grader/rubric/load.py, grader/rubric/kinds.py)
and checks them; grader/records.py writes and reads them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

from grader.evidence.compile import Launch
from grader.model import Bonus

Knees = list[list[int | float]]  # a curve's [value, fraction of the points] pairs (grader/rubric/curve.py)
ParamValue = str | int | float | bool | list[str] | Knees


@dataclass(frozen=True)
class Bench:
    n: int = 4096
    warmup: int = 2
    reps: int = 20
    min_reps: int = 5
    max_seconds: float = 20.0
    flush_l2: bool = True
    # A warm-up launch this many times longer than the timed launches' median holds the stage's speed
    # items for review (a kernel may spend its warm-up preparing for the timed launches); every launch
    # gets fresh inputs, so an honest warm-up does what a timed launch does: the reference kernels'
    # warm-ups took 0.99-1.00x their timed median on an H100 (docs/measurements/2026-12-06-integrity-round3.md).
    warmup_review_multiple: float = 3.0


@dataclass(frozen=True)
class StageLimits:
    """A stage's own time-limit keys (``stages[].limits``); grader/rubric/limits.py turns them into the limit."""
    # The reference kernel's timed benchmark, measured (the ``run.bench`` phase of grading.json on the
    # reference GPU); None: not measured, the stage gets ``stage_limits.unmeasured_s``.
    reference_s: float | None = None
    run_s: float | None = None  # set by hand: the stage child's limit, whatever the derivation says


@dataclass(frozen=True)
class Stage:
    id: str
    number: str
    title: str
    file: str
    kernel: str
    inputs: str
    baseline: str
    peak: str
    launch: Launch
    rtol: float
    bench: Bench
    items: tuple[Item, ...]
    summary: str = ""
    # A result this many times faster than the cuBLAS baseline is implausible: its speed items
    # go to a person for review instead of scoring (settings.plausible_max_fraction_of_baseline).
    plausible_max: float = 1.2
    limits: StageLimits = StageLimits()  # stages[].limits: the measured reference time, a hand-set limit
    operands: str = "pointers"  # one of OPERANDS
    # A GPU architecture the stage needs ("sm_90a": WGMMA and TMA exist on Hopper only); on a GPU of
    # another one its items are "not evaluated" and score 0. "": any GPU.
    requires_arch: str = ""
    bonus: Bonus = Bonus.NONE  # a bonus stage's points count as settings.bonus says, never in max_points

    @property
    def launch_symbol(self) -> str:
        return f"{self.kernel}_launch"

    @property
    def tma_symbol(self) -> str:
        """The array declaring a tensor-map stage's TMA boxes (grader/children/tma.py: check_boxes)."""
        return f"{self.kernel}_tma"

    @property
    def max_points(self) -> float:
        return sum(i.points for i in self.items)


@dataclass(frozen=True)
class Params:
    """A stage item's parameters. Each kind (grader/rubric/kinds.py: its ``params``) declares the ones it takes,
    their types and its checks, which the rubric reader runs; the others stay None. The JSON form (grading.json's
    ``items[].params``) holds the given ones, in this order."""

    forbid: list[str] | None = None  # sass: opcodes the kernel must not contain
    require: list[str] | None = None  # sass: opcodes it must contain
    stage: str | None = None  # speedup_over_stage: the stage compared with
    peak: str | None = None  # fraction_of_peak: which peak
    min: int | float | None = None  # the speed kinds: the level that earns full points
    expr: str | None = None  # ncu: the expression over Nsight Compute metrics
    op: str | None = None  # ncu: the comparison
    value: int | float | str | None = None  # ncu: the threshold, a number or an expression in N
    explain: str | None = None  # ncu: what to look at next, shown when the item fails
    unit: str | None = None  # ncu: the unit values are shown in
    integrity: bool | None = None  # ncu: the criterion checks honest work
    technique: bool | None = None  # sass, ncu: the item is technique evidence
    partial_from: int | float | None = None  # a threshold item's curve (grader/rubric/curve.py): one of these three
    curve: Knees | None = None
    steps: Knees | None = None

    def get(self, name: str) -> ParamValue | None:
        """The param ``name`` (a kind's ``level_param``, ``other_stage_param``, ...), None when not given."""
        return getattr(self, name) if name in PARAM_NAMES else None

    def given(self, name: str) -> bool:
        return self.get(name) is not None

    def with_level(self, name: str, level: float) -> Params:
        """These params with the level param ``name`` (a speed kind's ``min``, an ncu item's ``value``) at ``level``."""
        if name == "min":
            return dataclasses.replace(self, min=level)
        if name == "value":
            return dataclasses.replace(self, value=level)
        raise KeyError(f"{name} is not a level param")

    def json_form(self) -> dict[str, ParamValue]:
        """The given params, in the record's order (grader/records.py writes this)."""
        return {f: v for f in PARAM_NAMES if (v := getattr(self, f)) is not None}


PARAM_NAMES = tuple(f.name for f in fields(Params))


@dataclass(frozen=True)
class Item:
    """One graded item: id, student-facing title, points, Gradescope visibility."""

    id: str
    title: str
    points: float
    visibility: str = "visible"
    kind: str | None = None  # a stage item's check (grader/rubric/kinds.py); None: the id says what is graded
    params: Params = Params()
    number: str = ""
