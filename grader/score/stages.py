"""Rubric items -> points. Pure: reads stage outcomes, returns ItemResults.

Each item kind's judge is its entry in grader/rubric/kinds.py (the registry); this module holds what is
not per kind: a stage the machine cannot grade, a stage that did not compile, the technique gate on
the speed items, and the scoring of every stage.
"""
from __future__ import annotations

from dataclasses import replace

from grader.evidence.limits import Peaks
from grader.evidence.rubric import Item, Stage
from grader.grading import StageOutcome
from grader.model import ItemResult, Status
from grader.rubric.items import is_technique
from grader.rubric.kinds import REGISTRY, JudgeContext, Registry, result


def evaluate(item: Item, o: StageOutcome, outcomes: dict[str, StageOutcome], peaks: Peaks,
             registry: Registry = REGISTRY) -> ItemResult:
    st, c = o.stage, o.compile
    kind = registry.of(item)
    if o.unsupported:  # the machine cannot grade this stage at all (grader/compile/toolchain.py: unsupported_reason)
        return result(st, item, Status.NOT_EVALUATED, 0, o.unsupported)
    # A compiled stage has its ptxas record and launch shape (compile_stage sets ok only then).
    if kind.needs_compile and (c is None or not c.ok or c.kernel is None):
        return result(st, item, Status.FAILED, 0, "no credit: the stage did not compile; its compile item shows "
                      "why, and every other item of the stage waits on it")
    return kind.judged(item, o, JudgeContext(outcomes, peaks))


def gate_speed(stage: Stage, results: list[ItemResult], registry: Registry = REGISTRY) -> list[ItemResult]:
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
        if not registry.of(it).speed or r.status not in (Status.PASSED, Status.FAILED) or r.values.empty:
            out.append(r)
            continue
        would = f" (the speed alone would earn {r.score:g} of {r.max_score:g} points)" if r.score else ""
        if unread:
            why = "; ".join(dict.fromkeys(u.message for u in unread))
            out.append(replace(r, status=Status.NOT_EVALUATED, score=0.0, needs_gpu=any(u.needs_gpu for u in unread),
                               values=replace(r.values, gated_by=[u.number for u in waiting]),
                               message=f"{r.message}. Speed points wait on this stage's technique evidence "
                                       f"({names}), which could not be read: {why}{would}"))
            continue
        out.append(replace(r, status=Status.FAILED, score=0.0,
                           values=replace(r.values, gated_by=[u.number for u in waiting]),
                           message=f"{r.message}. No speed points yet: they count once this stage's technique "
                                   f"items pass ({names}: see those items){would}"))
    return out


def score(outcomes: dict[str, StageOutcome], peaks: Peaks, registry: Registry = REGISTRY) -> list[ItemResult]:
    return [r for o in outcomes.values()
            for r in gate_speed(o.stage, [evaluate(item, o, outcomes, peaks, registry) for item in o.stage.items],
                                registry)]
