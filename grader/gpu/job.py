"""The evidence one grading gathers from step to step (grader/pipeline.py lists the steps).

Each step takes the :class:`Job` (and the grading's GPU session), records what happened as typed fields
and returns it; :meth:`Job.grading` is the record grading.json holds (grader/grading.py). A Job holds
no live handle: the schedule, its children, the background threads are the GPU session's
(grader/gpu/session.py: GpuSession), which the grading closes whatever happens.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.clock import Clock
from grader.compile.intake import Intake
from grader.compile.student import Deadline
from grader.evidence.protocol import CheckRequest
from grader.evidence.sandbox import PartyTimeline
from grader.grading import Environment, Grading, ProfileRun, StageOutcome
from grader.model import ItemResult
from grader.occupancy.build import Prebuilt
from grader.occupancy.variants import Variant
from grader.rubric.types import Rubric

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
    seeds: dict[int | str, int] = field(default_factory=dict)  # correctness sizes, "bench"
    checks: list[CheckRequest] = field(default_factory=list)  # finished runs, for the reference checker
    items: list[ItemResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    profile: ProfileRun | None = None
    intake: Intake | None = None  # the submission's copy: what it left out, for the items that miss it
    clock: Clock = field(default_factory=Clock)  # the phases' times (grader/clock.py)
    prebuilt_occupancy: Prebuilt | None = None  # occ.cu's builds, made beside the stages' compiles (occupancy/build.py)
    cupy_cache: Path | None = None  # the trusted warm CuPy cache each child's own starts as a copy of (gpu/warm.py)
    timeline: list[PartyTimeline] = field(default_factory=list)  # the GPU schedule's, once the session has closed
    gpu_lock: Path | None = None  # the GPU's lock file: other gradings may hold this GPU meanwhile
    variant: Variant | None = None  # the student's occupancy variant (rubric occupancy.variants); rubric has its numbers
    # Stored gradings of the student's kernels (grade --citations-from): the report's cited values are
    # compared with the one on the GPU the report names when this grading ran on another (writeup/run.py).
    citations_from: list[Grading] = field(default_factory=list)

    @property
    def shares_gpu(self) -> bool:
        return self.gpu_lock is not None

    @property
    def compile_deadline(self) -> Deadline:
        """The submission's compiles (its stages', occ.cu's) all end by this (settings.timeouts.static_total_s)."""
        return Deadline.after(self.started, self.rubric.timeouts.static_total_s)

    def wants(self, part: str) -> bool:
        return self.parts is None or part in self.parts

    def grading(self) -> Grading:
        from grader import code_version

        return Grading(str(self.submission), self.env, self.outcomes, self.items,
                       time.monotonic() - self.started, self.notes, self.profile, list(self.clock.phases),
                       self.rubric.sha256, code_version(), self.timeline, rubric_text=self.rubric.text)
