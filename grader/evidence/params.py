"""A stage item's parameters: one frozen record per item kind, as grading.json keeps it (``items[].params``).

Each kind of grader/rubric/kinds.py names its record (``Kind.record``): the registry reads the kind's keys of
rubric.yaml into it, runs the kind's checks on it, and hands it, typed, to the kind's judge, handout wording and
what-if axis. The records live here, beside the Item that holds them, because grading.json holds them: the codec
reads one back as the record of its item's ``kind`` (:data:`RECORDS`; grader/evidence/rubric.py: Item).

The JSON form of a record holds the params the rubric gave (an absent optional one, None, is not written), in
the record's field order with a curve's keys last.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import ClassVar, TypeVar

Knees = list[list[int | float]]  # a curve's [value, fraction of the points] pairs (grader/rubric/curve.py)
ParamValue = str | int | float | bool | list[str] | Knees
CURVE_KEYS = ("partial_from", "curve", "steps")
LEVELS = ("min", "value")  # the params that hold a threshold kind's level
P = TypeVar("P", bound="ItemParams")


@dataclass(frozen=True, kw_only=True)
class ItemParams:
    """What every kind's record answers, whatever its fields: a param by name (a kind's ``level_param``,
    ``other_stage_param``, ``expression_params``), its JSON form, and a copy at another level."""

    KIND: ClassVar[str | None] = None  # the item kind whose record this is (None: an item the section grades by id)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The record's params, in the order its JSON form writes them."""
        own = [f.name for f in fields(cls)]
        return tuple([n for n in own if n not in CURVE_KEYS] + [n for n in own if n in CURVE_KEYS])

    def get(self, name: str) -> ParamValue | None:
        """The param ``name``; None when not given or not one of this kind's."""
        value: ParamValue | None = getattr(self, name) if name in self.names() else None
        return value

    def given(self, name: str) -> bool:
        return self.get(name) is not None

    def with_level(self: P, name: str, level: float) -> P:
        """This record with its level param ``name`` (a speed kind's ``min``, an ncu item's ``value``) at ``level``."""
        if name not in LEVELS or name not in self.names():
            raise KeyError(f"{name} is not a level param of a {self.KIND} item")
        values: dict[str, ParamValue | None] = {f.name: getattr(self, f.name) for f in fields(self)}
        return type(self)(**{**values, name: level})

    def is_technique(self) -> bool:
        """Whether the item is technique evidence (it gates its stage's speed items)."""
        return False

    def comparison(self) -> str:
        """How the kind's measured number is compared with its level."""
        return ">="

    def json_form(self) -> dict[str, ParamValue]:
        """The given params, in :meth:`names` order (grader/records.py writes this)."""
        return {n: v for n in self.names() if (v := getattr(self, n)) is not None}


@dataclass(frozen=True, kw_only=True)
class NoParams(ItemParams):
    """An occupancy or report item's: the section grades it by its id."""


@dataclass(frozen=True, kw_only=True)
class CompilesParams(ItemParams):
    KIND: ClassVar[str | None] = "compiles"


@dataclass(frozen=True, kw_only=True)
class CorrectParams(ItemParams):
    KIND: ClassVar[str | None] = "correct"


@dataclass(frozen=True, kw_only=True)
class NoSpillsParams(ItemParams):
    KIND: ClassVar[str | None] = "no_spills"


@dataclass(frozen=True, kw_only=True)
class SassParams(ItemParams):
    KIND: ClassVar[str | None] = "sass"
    forbid: list[str] | None = None  # opcodes the kernel must not contain
    require: list[str] | None = None  # opcodes it must contain
    technique: bool | None = None  # the item is technique evidence

    def is_technique(self) -> bool:
        return bool(self.technique)


@dataclass(frozen=True, kw_only=True)
class Curved(ItemParams):
    """A threshold kind's record: partial credit below the level (grader/rubric/curve.py), one of these at most."""

    partial_from: int | float | None = None
    curve: Knees | None = None
    steps: Knees | None = None


@dataclass(frozen=True, kw_only=True)
class FractionOfBaselineParams(Curved):
    KIND: ClassVar[str | None] = "fraction_of_baseline"
    min: int | float  # the fraction of the baseline's speed that earns full points


@dataclass(frozen=True, kw_only=True)
class SpeedupOverStageParams(Curved):
    KIND: ClassVar[str | None] = "speedup_over_stage"
    stage: str  # the stage compared with
    min: int | float  # the speedup that earns full points


@dataclass(frozen=True, kw_only=True)
class FractionOfPeakParams(Curved):
    KIND: ClassVar[str | None] = "fraction_of_peak"
    peak: str  # which peak
    min: int | float  # the multiple of the peak that earns full points


@dataclass(frozen=True, kw_only=True)
class NcuParams(Curved):
    KIND: ClassVar[str | None] = "ncu"
    expr: str  # the expression over Nsight Compute metrics
    op: str  # the comparison
    value: int | float | str  # the threshold, a number or an expression in N
    explain: str | None = None  # what to look at next, shown when the item fails
    unit: str | None = None  # the unit values are shown in
    integrity: bool | None = None  # the criterion checks honest work
    technique: bool | None = None  # the item is technique evidence

    def is_technique(self) -> bool:
        return bool(self.technique)

    def comparison(self) -> str:
        return self.op


# Each kind's record by the kind's name: what the codec reads an item's params as.
RECORDS: Mapping[str, type[ItemParams]] = {
    str(c.KIND): c for c in (CompilesParams, CorrectParams, NoSpillsParams, SassParams, FractionOfBaselineParams,
                             SpeedupOverStageParams, FractionOfPeakParams, NcuParams)}


def record_of(kind: str | None) -> type[ItemParams]:
    """The params record of an item of ``kind`` (:class:`NoParams` for a section's item); KeyError for an unknown one."""
    return NoParams if kind is None else RECORDS[kind]
