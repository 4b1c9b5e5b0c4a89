"""What the rubric says of one stage and its items, as grading.json keeps it (a stage's outcome holds its stage).

Plain typed records: grader/rubric reads rubric.yaml into them (grader/rubric/load.py, grader/rubric/kinds.py)
and checks them; grader/records.py writes and reads them.
"""
from __future__ import annotations

from dataclasses import dataclass

from grader.evidence.compile import Launch
from grader.evidence.params import ItemParams, NoParams, record_of
from grader.model import Bonus
from grader.records import from_jsonable


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
class Item:
    """One graded item: id, student-facing title, points, Gradescope visibility."""

    id: str
    title: str
    points: float
    visibility: str = "visible"
    kind: str | None = None  # a stage item's check (grader/rubric/kinds.py); None: the id says what is graded
    params: ItemParams = NoParams()  # its kind's record (grader/evidence/params.py)
    number: str = ""

    @classmethod
    def from_json_form(cls, data: object) -> object:
        """grading.json's item with its ``params`` read as its kind's record (the codec's hook, grader/records.py)."""
        if not isinstance(data, dict) or isinstance(data.get("params"), ItemParams):
            return data
        kind = data.get("kind")
        if kind is not None and not isinstance(kind, str):
            raise ValueError(f'wrong value type for field "kind" - should be "str" instead of value "{kind!r}"')
        try:
            record = record_of(kind)
        except KeyError:
            raise ValueError(f"unknown item kind {kind!r}") from None
        # Read as grading.json is (grader/grading.py): a key the record does not declare is left out.
        return {**data, "params": from_jsonable(record, data.get("params", {}), strict=False)}
