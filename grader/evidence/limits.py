"""What the rubric and the device fix for a grading: the peaks thresholds read, each stage child's time limit.

Built by grader/rubric/peaks.py and grader/rubric/limits.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Peaks:
    fp32: float | None  # TFLOP/s
    fp16_tensor: float | None
    source: str

    def get(self, which: str) -> float | None:
        return getattr(self, which)


class LimitSource(str, Enum):
    """Where a stage child's time limit came from (recorded in grading.json)."""

    STAGE = "stage"  # stages[].limits.run_s, set by hand
    RUBRIC = "rubric"  # settings.timeouts.stage_run_s, set by hand for every stage
    DERIVED = "derived"  # from stages[].limits.reference_s and settings.stage_limits
    UNMEASURED = "unmeasured"  # no reference_s: settings.stage_limits.unmeasured_s

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class StageLimit:
    """The time limit in force for one stage child, and why (for people: ``why``)."""

    seconds: float
    source: LimitSource
    reference_s: float | None = None  # the measured reference time it derives from (DERIVED only)
    why: str = ""
