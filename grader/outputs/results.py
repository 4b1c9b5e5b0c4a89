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
from pathlib import Path

from grader.evidence.results import LeaderboardEntry, Results, ResultsExtra, ResultsTest, ResultsTestExtra
from grader.files import replace_whole
from grader.model import Bonus, ItemResult, Status
from grader.records import to_jsonable
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


def _check_visibility(value: str, where: str) -> str:
    if value not in VISIBILITIES:
        raise ValueError(f"{where}: visibility {value!r} is not one of {', '.join(VISIBILITIES)}")
    return value


def _finite(value: float, where: str) -> float:
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


def _finite_or_none(obj: object) -> object:
    """NaN and ±inf (anywhere in a JSON-ready tree) to None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite_or_none(v) for v in obj]
    return obj


def _json_default(obj: object) -> object:
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
