"""Gradescope's results.json as typed records, its fields in the file's order, and their JSON forms.

Written and read by grader/records.py (:meth:`Results.to_json`, :meth:`Results.from_json`); built by
grader/outputs/results.py (build_results, error_results), changed by the Gradescope run's no-GPU policy and
its bridge to the GPU service (grader/deploy/gradescope).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from grader.evidence.limits import Peaks
from grader.evidence.protocol import ProbeResult
from grader.model import Measured
from grader.records import RecordError, from_jsonable, to_jsonable


def _present(data: dict[str, object], optional: tuple[str, ...]) -> dict[str, object]:
    """``data`` without the ``optional`` keys that are None: Gradescope reads an absent key, never a null one."""
    return {k: v for k, v in data.items() if not (v is None and k in optional)}


def _set(record: object, names: tuple[str, ...]) -> dict[str, object]:
    """The fields ``names`` of ``record`` that are set (not None), in that order: a record's JSON form."""
    return {n: v for n in names if (v := getattr(record, n)) is not None}


@dataclass(kw_only=True)
class ResultsTestExtra:
    """A test's ``extra_data``: the grader's own marks. An item's test has its ``status``, ``stage``, ``item``,
    ``values`` and ``needs_gpu``; a bonus item's adds ``bonus`` and its points; a test shown neutrally its points
    (hand-graded, or pending GPU grading: the no-GPU policy's marks, grader/deploy/gradescope/policy.py); a test
    the GPU service graded its job (grader/deploy/gradescope/bridge.py). The JSON holds the set ones, in order."""

    status: str | None = None  # the item's Status, or "autograder_error"
    stage: str | None = None
    item: str | None = None
    values: Measured | None = None
    needs_gpu: bool | None = None
    bonus: str | None = None
    bonus_points: float | None = None
    bonus_max: float | None = None
    hand_graded_points: float | None = None
    pending_gpu_points: float | None = None
    gpu_service_job: str | None = None
    pending_gpu: bool | None = None
    no_gpu_policy: str | None = None

    def json_form(self) -> dict[str, object]:
        item = {"stage": self.stage} if self.item is not None else {}  # an item's stage is written, even null
        return {**_set(self, ("status",)), **item, **_set(self, _TEST_EXTRA[1:])}

    def with_points(self, key: str, points: float) -> ResultsTestExtra:
        """These marks with a neutral test's points under ``key`` (hand_graded_points or pending_gpu_points)."""
        if key == "hand_graded_points":
            return dataclasses.replace(self, hand_graded_points=points)
        if key == "pending_gpu_points":
            return dataclasses.replace(self, pending_gpu_points=points)
        raise KeyError(key)

    def points(self, key: str) -> float | None:
        return self.hand_graded_points if key == "hand_graded_points" else self.pending_gpu_points


_TEST_EXTRA = ("stage", "item", "values", "needs_gpu", "bonus", "bonus_points", "bonus_max", "hand_graded_points",
               "pending_gpu_points", "gpu_service_job", "pending_gpu", "no_gpu_policy")


@dataclass
class LeaderboardEntry:
    """One entry of Gradescope's ``leaderboard``: a name, a value and (absent when None) the order it ranks in."""

    name: str
    value: float
    order: str | None = None

    def json_form(self) -> dict[str, object]:
        return {"name": self.name, "value": self.value, **({"order": self.order} if self.order is not None else {})}


@dataclass
class ServiceOutcome:
    """What the Gradescope run's bridge to the GPU grading service did (``extra_data.gpu_service``; the bridge's
    record, grader/deploy/gradescope/bridge.py, kept here with the file it is written into)."""

    state: str  # merged | without_gpu | queued | running | failed | superseded | refused | unreachable | misconfigured | skipped
    reason: str = ""
    job: str | None = None
    url: str | None = None
    deduplicated: bool = False
    merged_items: int = 0
    still_pending: int = 0
    files: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class ResultsExtra:
    """results.json's top-level ``extra_data``: the GPU the grading ran on and its peaks (both written whenever
    the peaks are, the device null without one), the hand-graded items, the no-GPU policy's counts and where it
    came from, and the GPU service's outcome. The JSON holds the set ones, in order."""

    device: ProbeResult | None = None
    peaks: Peaks | None = None
    hand_graded_items: list[str] | None = None
    hand_graded_points: float | None = None
    pending_gpu_items: int | None = None
    pending_gpu_points: int | float | None = None  # a sum: 0 (none left after the service's merge) stays 0
    no_gpu_policy: str | None = None
    no_gpu_policy_source: str | None = None
    gpu_service: ServiceOutcome | None = None

    def json_form(self) -> dict[str, object]:
        graded = {"device": self.device, "peaks": self.peaks} if self.peaks is not None else {}
        return {**graded, **_set(self, _RESULTS_EXTRA)}


_RESULTS_EXTRA = ("hand_graded_items", "hand_graded_points", "pending_gpu_items", "pending_gpu_points",
                  "no_gpu_policy", "no_gpu_policy_source", "gpu_service")


@dataclass(kw_only=True)
class ResultsTest:
    """One test of results.json, its fields in the file's order. ``score``, ``max_score`` and ``status`` are
    None (absent from the file) for a test shown neutrally: hand-graded, or pending GPU grading. ``extra_data``
    is the grader's own free-form JSON (the item's values, the policy's and the service's marks)."""

    name: str
    number: str
    score: float | None = None
    max_score: float | None = None
    status: str | None = None
    output: str = ""
    output_format: str = "md"
    visibility: str = "visible"
    tags: list[str] = field(default_factory=list)
    extra_data: ResultsTestExtra = field(default_factory=ResultsTestExtra)

    def to_json(self) -> dict[str, object]:
        return _present(to_jsonable(self), ("score", "max_score", "status"))


@dataclass(kw_only=True)
class Results:
    """Gradescope's results.json, its fields in the file's order; ``leaderboard`` and ``extra_data`` are
    None when the file has none. Built by :func:`build_results` or :func:`error_results`, written by
    :func:`write_results`; the Gradescope run's policy and service merge return changed copies."""

    score: float = 0.0
    execution_time: int = 0
    output: str = ""
    output_format: str = "md"
    visibility: str = "visible"
    stdout_visibility: str = "hidden"
    tests: list[ResultsTest] = field(default_factory=list)
    leaderboard: list[LeaderboardEntry] | None = None
    extra_data: ResultsExtra | None = None

    def to_json(self) -> dict[str, object]:
        """The dict results.json holds (:func:`dumps` writes it)."""
        data = _present(to_jsonable(self), ("leaderboard", "extra_data"))
        data["tests"] = [t.to_json() for t in self.tests]
        return data

    @classmethod
    def from_json(cls, data: object) -> Results:
        """The record a parsed results.json holds; :class:`~grader.records.RecordError` names the key that is
        not what it should be (a key the record does not know is one)."""
        tests = data.get("tests", []) if isinstance(data, dict) else []
        if not isinstance(tests, list):  # dacite would try to read a mapping as a sequence and say nothing useful
            raise RecordError(f"tests: expected a list of tests, found {type(tests).__name__}")
        return from_jsonable(cls, data)

    def total(self) -> float:
        """The sum of the tests' scores (a neutral test counts 0), as the top-level ``score`` says it."""
        return round(sum(t.score or 0.0 for t in self.tests), 4)
