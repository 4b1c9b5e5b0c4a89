"""The stage time limits' measured values, as ``python -m grader calibrate`` proposes them.

Each stage's time limit derives from ``stages[].limits.reference_s``: how long the reference
kernel's timed benchmark took on the reference GPU (grader/rubric/limits.py). The calibration grades
the reference solutions; each grading's phases (grading.json "phases", grader/clock.py) hold that
time as ``run.bench`` for the stage. This module collects it over the repeats and proposes the
largest (the limit then has its whole margin over the slowest repeat), with the limit it would give.

The derivation takes one benchmark repetition to be ``reference_s / (warmup + reps)``: true when
the reference ran all its reps. A reference that stopped early at ``max_seconds`` breaks that, and
the row says so (raise ``max_seconds`` or set the stage's ``limits.run_s`` by hand).
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field

from grader.evidence.rubric import Stage
from grader.grading import Grading
from grader.rubric.limits import stage_limit
from grader.rubric.types import Rubric

PHASE = "run.bench"  # the stage child's own timing of its benchmark (grader/children/stage.py)


@dataclass
class LimitProposal:
    stage: str
    measured: list[float] = field(default_factory=list)  # run.bench of each repeat that has it
    current: float | None = None  # the rubric's reference_s
    proposed: float | None = None  # what calibrate proposes for reference_s
    limit_s: float | None = None  # the stage's time limit with the proposal
    current_limit_s: float | None = None  # ... and with the rubric as it is
    note: str = ""


def _bench_seconds(grading: Grading, stage_id: str) -> float | None:
    for p in grading.phases:
        if p.name == PHASE and p.stage == stage_id:
            return float(p.seconds)
    return None


def _reps_done(grading: Grading, stage_id: str) -> int | None:
    """How many timed repetitions the stage's benchmark ran; None when it did not run one."""
    o = grading.outcomes.get(stage_id)
    if o is None or o.bench is None:
        return None
    return len(o.bench.student_ms)


def _derived(stage: Stage, rubric: Rubric, reference_s: float | None) -> float:
    """The stage's limit with ``reference_s`` in its rubric, hand-set limits left aside."""
    st = dataclasses.replace(stage, limits=dataclasses.replace(stage.limits, reference_s=reference_s, run_s=None))
    rb = dataclasses.replace(rubric, timeouts=dataclasses.replace(rubric.timeouts, stage_run_s=None))
    return stage_limit(st, rb).seconds


def limit_proposals(rubric: Rubric, references: list[Grading]) -> list[LimitProposal]:
    """One proposal per stage from the reference gradings (one per repeat)."""
    out = []
    for st in rubric.stages:
        p = LimitProposal(st.id, current=st.limits.reference_s)
        p.measured = [s for g in references if (s := _bench_seconds(g, st.id)) is not None]
        short = [n for g in references if (n := _reps_done(g, st.id)) is not None and n < st.bench.reps]
        if not p.measured:
            p.note = "not measured (the stage did not run its benchmark: no GPU, or it failed)"
        else:
            p.proposed = math.ceil(max(p.measured) * 100) / 100
            p.limit_s = _derived(st, rubric, p.proposed)
            if short:
                p.note = (f"the reference stopped after {min(short)} of {st.bench.reps} reps (max_seconds): "
                          "the derived limit is too short; raise max_seconds or set limits.run_s")
        p.current_limit_s = stage_limit(st, rubric).seconds
        out.append(p)
    return out


def render_lines(proposals: list[LimitProposal]) -> list[str]:
    """The proposals for people: one line per stage."""
    lines = ["stage time limits: measured reference_s (the reference's timed benchmark, run.bench; "
             "min / median / max over the repeats) -> proposed stages[].limits.reference_s and the limit it gives"]
    for p in proposals:
        if p.proposed is None:
            lines.append(f"  {p.stage}: {p.note}")
            continue
        spread = " / ".join(f"{v:.2f}" for v in (min(p.measured), statistics.median(p.measured), max(p.measured)))
        now = "unset" if p.current is None else f"{p.current:g}"
        lines.append(f"  {p.stage}: measured {spread} s -> reference_s: {p.proposed:g} (rubric: {now}); "
                     f"limit {p.limit_s:g} s (now {p.current_limit_s:g} s)" + (f"; {p.note}" if p.note else ""))
    return lines
