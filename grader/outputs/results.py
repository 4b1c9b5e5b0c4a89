"""Write Gradescope's ``results.json`` from the grader's item verdicts.

Pure and GPU-free: :func:`build_results` turns :class:`~grader.model.ItemResult`
records into the :class:`Results` record of the file Gradescope reads (:meth:`Results.to_json` is its
one JSON form), :func:`write_results` writes it atomically,
and :func:`error_results` is what to write when the grader itself broke (a missing
or malformed file reads on Gradescope as "The autograder failed to execute
correctly", which tells nobody anything).

Format: https://gradescope-autograders.readthedocs.io/en/latest/specs/ -- top level
``score``, ``execution_time`` (seconds), ``output``, ``output_format``,
``visibility``, ``stdout_visibility``, ``tests[]``, ``leaderboard[]``; per test
``name``, ``number``, ``score``, ``max_score``, ``status`` (``passed`` / ``failed``),
``output``, ``output_format``, ``tags``, ``visibility``, ``extra_data`` (the grader's own: ``status``,
``stage``, ``item``, ``values``, ``needs_gpu``).

Hand-graded items (:attr:`Status.MANUAL`: the occupancy explanations, the report's reasoning) are
not the autograder's to score. On Gradescope their points belong to manually graded questions of
the assignment's outline (docs/deployment.md, "The hand-graded part"), and Gradescope adds every
test's ``max_score`` into the autograder's total. So such a test has no ``score``, ``max_score`` or
``status``: it is shown neutrally, neither passed nor failed, says that the answer was recorded
for course staff, and its points go in ``extra_data.hand_graded_points``. Counting them here would
put the same points in the total twice (once here at 0, once in the manual question) and show a
correct, complete submission in red.

A bonus stage's items (rubric ``bonus: true``) have ``max_score`` 0, so Gradescope's total stays the
assignment's own. With ``settings.bonus: extra`` their ``score`` is what they earned, which
Gradescope shows as extra credit above the total; with ``separate`` it is 0 and the points are
reported in ``extra_data.bonus_points`` (and summary.md) as a total of their own.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.evidence.limits import Peaks
from grader.evidence.protocol import ProbeResult
from grader.files import replace_whole
from grader.model import Bonus, ItemResult, Measured, Status
from grader.records import RecordError, from_jsonable, to_jsonable
from grader.rubric.items import VISIBILITIES
from grader.untrusted.quote import fence_block, markdown_safe

OUTPUT_FORMATS = ("text", "html", "md", "simple_format", "ansi")
TEST_STATUSES = ("passed", "failed")  # all Gradescope knows
LEADERBOARD_ORDERS = ("asc", "desc")
ITEM_STATUSES = tuple(s.value for s in Status)

# Said when an item's message is empty. None is worded as the student's failure.
_DEFAULT_MESSAGES = {
    Status.NOT_EVALUATED: "Not evaluated: the grader could not check this item (0 points for now). "
    "This is not a judgement of your code.",
    Status.REVIEW: "Held for review by course staff; 0 points until they have looked at it.",
}
HAND_GRADED_NOTE = ("**Graded by hand.** Course staff grade this answer after the deadline; its points are "
                    "not part of the autograder's score.")

ERROR_MESSAGE = (
    "**Autograder error — contact course staff.**\n\n"
    "The autograder itself failed while grading this submission. This is not a judgement "
    "of your code and the score of 0 is a placeholder: please tell course staff (include "
    "the time of your submission) so they can look at it and re-run it."
)

_TRACEBACK_LIMIT = 50_000  # characters of the traceback kept in the hidden test


def _present(data: dict[str, Any], optional: tuple[str, ...]) -> dict[str, Any]:
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

    def to_json(self) -> dict[str, Any]:
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

    def to_json(self) -> dict[str, Any]:
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


def _check_visibility(value: str, where: str) -> str:
    if value not in VISIBILITIES:
        raise ValueError(f"{where}: visibility {value!r} is not one of {', '.join(VISIBILITIES)}")
    return value


def _finite(value: Any, where: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {value!r} is not a number") from None
    if not math.isfinite(x):
        raise ValueError(f"{where}: {value!r} is not a finite number")
    return x


def _seconds(execution_time: float) -> int:
    try:
        t = float(execution_time)
    except (TypeError, ValueError):
        return 0
    return int(round(t)) if math.isfinite(t) and t > 0 else 0


def build_test(item: ItemResult, index: int = 0) -> ResultsTest:
    """One Gradescope test for one rubric item (``index`` numbers it if it has no number)."""
    where = f"item {item.stage}/{item.item}"
    try:
        status = Status(item.status)
    except ValueError:
        raise ValueError(f"{where}: status {item.status!r} is not one of {', '.join(ITEM_STATUSES)}") from None
    visibility = _check_visibility(item.visibility, where)
    max_score = round(_finite(item.max_score, f"{where}: max_score"), 4)
    if status in (Status.NOT_EVALUATED, Status.MANUAL, Status.REVIEW):
        score = 0.0  # never automatic points, whatever the record says
    else:
        score = round(_finite(item.score, f"{where}: score"), 4)
    extra = ResultsTestExtra(status=status.value, stage=item.stage, item=item.item, values=dataclasses.replace(item.values),
                      needs_gpu=bool(item.needs_gpu))  # the no-GPU policy (grader/deploy/gradescope/policy.py) reads it
    test = ResultsTest(
        name=item.title or f"{item.stage}/{item.item}",
        number=str(item.number) if item.number else str(index + 1),
        score=score,
        max_score=max_score,
        status="passed" if status is Status.PASSED else "failed",
        output=markdown_safe(item.message) or _DEFAULT_MESSAGES.get(status, ""),
        visibility=visibility,
        tags=[item.stage] if item.stage else [],
        extra_data=extra,
    )
    if item.bonus is not Bonus.NONE:  # outside the total: see the module's docstring
        test = dataclasses.replace(test, max_score=0.0, score=score if item.bonus is Bonus.EXTRA else 0.0,
                                   name="Bonus: " + test.name, extra_data=dataclasses.replace(
                                       extra, bonus=item.bonus.value, bonus_points=score, bonus_max=max_score))
    if status is Status.MANUAL:  # neutral and outside the autograder's total: see the module's docstring
        test = dataclasses.replace(make_neutral(test, "hand_graded_points"), output=HAND_GRADED_NOTE + (
            "\n\n" + markdown_safe(item.message) if item.message else ""))
    return test


def make_neutral(test: ResultsTest, points_key: str) -> ResultsTest:
    """``test`` shown neither passed nor failed and outside the autograder's total (no ``score``,
    ``max_score`` or ``status``), its points (its ``max_score``) kept in ``extra_data``'s ``points_key``. For
    items the autograder does not judge in this run: hand-graded ones, and those pending GPU grading."""
    return dataclasses.replace(test, score=None, max_score=None, status=None,
                               extra_data=test.extra_data.with_points(points_key, float(test.max_score or 0)))


def _check_leaderboard(leaderboard: list[LeaderboardEntry]) -> list[LeaderboardEntry]:
    for i, entry in enumerate(leaderboard):
        if entry.order is not None and entry.order not in LEADERBOARD_ORDERS:
            raise ValueError(f"leaderboard[{i}].order {entry.order!r} is not asc or desc")
    return list(leaderboard)


def build_results(
    items: list[ItemResult],
    *,
    execution_time: float,
    output: str,
    visibility: str = "visible",
    stdout_visibility: str = "hidden",
    leaderboard: list[LeaderboardEntry] | None = None,
    extra: ResultsExtra | None = None,
) -> Results:
    """The results.json record for these items.

    ``output`` is the markdown summary shown above the tests. ``extra`` becomes the
    top-level ``extra_data``; ``leaderboard`` is included only when given. Raises
    ``ValueError`` for what rubric validation should have stopped (an unknown
    visibility or status, a non-finite score). Every Markdown text goes through
    :func:`~grader.untrusted.quote.markdown_safe` (raw HTML or an image is shown, never rendered). NaN and inf
    in the records (an item's values, the leaderboard) are written null (:func:`dumps`).
    """
    tests = [build_test(item, i) for i, item in enumerate(items)]
    top = extra if extra is not None else ResultsExtra()
    hand = [t for t in tests if t.extra_data.hand_graded_points is not None]
    if hand:  # what the manually graded questions hold, for the TA's tools (the batch's CSV, the service)
        top = dataclasses.replace(top, hand_graded_items=[t.number for t in hand], hand_graded_points=round(
            sum(t.extra_data.hand_graded_points or 0.0 for t in hand), 4))
    results = Results(
        execution_time=_seconds(execution_time),
        output=markdown_safe(output),
        visibility=_check_visibility(visibility, "results"),
        stdout_visibility=_check_visibility(stdout_visibility, "results stdout"),
        tests=tests,
        leaderboard=None if leaderboard is None else _check_leaderboard(leaderboard),
        extra_data=top if extra is not None or hand else None,
    )
    return dataclasses.replace(results, score=results.total())


def error_results(exc_text: str, execution_time: float) -> Results:
    """Results for when the grader broke: a visible 0-point failed test saying so
    (contact course staff) and a hidden test carrying ``exc_text`` (the traceback)."""
    text = str(exc_text)
    if len(text) > _TRACEBACK_LIMIT:
        cut = len(text) - _TRACEBACK_LIMIT
        text = f"… [{cut:,} characters trimmed] …\n" + text[-_TRACEBACK_LIMIT:]
    return Results(
        score=0.0,
        execution_time=_seconds(execution_time),
        output=ERROR_MESSAGE,
        tests=[_error_test("Autograder error — contact course staff", "0.1", ERROR_MESSAGE, "visible"),
               _error_test("Autograder error: traceback (staff only)", "0.2",
                           fence_block(text, limit=len(text)).strip("\n"), "hidden")],
    )


def _error_test(name: str, number: str, output: str, visibility: str) -> ResultsTest:
    return ResultsTest(name=name, number=number, score=0.0, max_score=0.0, status="failed", output=output,
                       visibility=visibility, tags=["autograder_error"],
                       extra_data=ResultsTestExtra(status="autograder_error"))


def _finite_or_none(obj: Any) -> Any:
    """NaN and ±inf (anywhere in a JSON-ready tree) to None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite_or_none(v) for v in obj]
    return obj


def _json_default(obj: Any) -> Any:
    """Values json does not know: numpy scalars/arrays, paths, sets."""
    if hasattr(obj, "tolist") and callable(obj.tolist):  # numpy scalar or array
        return _finite_or_none(to_jsonable(obj.tolist()))
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        return _finite_or_none(to_jsonable(sorted(obj, key=repr)))
    raise TypeError(f"results.json: cannot encode {type(obj).__name__}")


def dumps(results: Results) -> str:
    """Strict JSON text for ``results`` (non-finite numbers become null)."""
    data = _finite_or_none(results.to_json())
    return json.dumps(data, allow_nan=False, ensure_ascii=False, indent=2, default=_json_default) + "\n"


def write_results(path: str | os.PathLike[str], results: Results) -> None:
    """Write ``results`` to ``path`` atomically (temp file in the same folder, fsync,
    rename), creating parent folders. A reader sees the old file or the whole new one."""
    text = dumps(results)  # encode first: a failure here leaves nothing behind
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    replace_whole(path, text, mode=0o644, durable=True)  # 0644: Gradescope's harness reads it
