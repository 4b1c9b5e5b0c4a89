"""The state one grading carries from step to step (grader/pipeline.py lists the steps).

Each step takes the :class:`Job`, records what happened as typed fields and returns it;
:meth:`Job.grading` is the record grading.json holds (grader/grading.py). The GPU session's fields
are built by grader/gpu/session.py alone.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from grader.children.protocol import CheckRequest
from grader.clock import Clock
from grader.compile.intake import Intake
from grader.compile.sass import SassDumps
from grader.compile.student import Deadline
from grader.gpu.ncu_run import EarlyProfile
from grader.grading import Environment, Grading, ProfileRun, StageOutcome
from grader.model import ItemResult
from grader.occupancy.build import Prebuilt
from grader.occupancy.early import EarlyOccupancy
from grader.occupancy.variants import Variant
from grader.rubric.types import Rubric
from grader.sandbox.turns import Party, PartyTimeline, Schedule

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
    # The GPU session: the schedule (sandbox/turns.py) and every party on it, all built by
    # grader/gpu/session.py: a child per stage, the checker, racecheck per stage id, the ncu child, the
    # occupancy measurements and program. None / empty until the session starts (never without a GPU).
    schedule: Schedule | None = None
    stage_runs: dict[str, Party] = field(default_factory=dict)  # stage id -> its child's party
    checker: Party | None = None
    early_racecheck: dict[str, Party] = field(default_factory=dict)
    early_profile: EarlyProfile | None = None
    early_occupancy: EarlyOccupancy | None = None
    sass_dumps: SassDumps | None = None  # the compiled stages' SASS, read in the background (compile/sass.py)
    timeline: list[PartyTimeline] = field(default_factory=list)  # the schedule's, once it has closed
    gpu_lock: Path | None = None  # the GPU's lock file: other gradings may hold this GPU meanwhile
    variant: Variant | None = None  # the student's occupancy variant (rubric occupancy.variants); rubric has its numbers
    # The occupancy items, graded on another thread while ncu profiles (pipeline.profile), once the
    # occupancy runs have ended; None when the occupancy step grades them itself.
    occupancy_ahead: Future[list[ItemResult]] | None = None
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
