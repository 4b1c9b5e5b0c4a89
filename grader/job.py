"""The state one grading carries from step to step (grader/pipeline.py lists the steps).

Each step takes the :class:`Job`, records what happened in it (typed fields on the stage
outcomes, items, notes) and returns it; :meth:`Job.grading` is the finished record.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.build.intake import Intake
from grader.grading import Environment, Grading, ProfileRun, StageOutcome
from grader.model import ItemResult
from grader.spec.types import Rubric

Progress = Callable[[str], None]


@dataclass
class Job:
    rubric: Rubric
    submission: Path  # the folder graded (a zip's single top folder already stepped into)
    work: Path  # <out>/work: per-stage folders for the children
    env: Environment
    parts: list[str] | None  # --stages: stage and section ids to grade; None for all
    keep_outputs: bool
    progress: Progress
    started: float = field(default_factory=time.monotonic)
    outcomes: dict[str, StageOutcome] = field(default_factory=dict)
    seeds: dict[int | str, int] = field(default_factory=dict)  # correctness sizes, "bench", "integrity"
    checks: list[dict] = field(default_factory=list)  # finished runs, for the reference checker
    items: list[ItemResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    profile: ProfileRun | None = None
    intake: Intake | None = None  # the submission's copy: what it left out, for the items that miss it

    def wants(self, part: str) -> bool:
        return self.parts is None or part in self.parts

    def grading(self) -> Grading:
        return Grading(str(self.submission), self.env, self.outcomes, self.items,
                       time.monotonic() - self.started, self.notes, self.profile)
