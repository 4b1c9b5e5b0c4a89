"""Where a grading's time goes: a flat list of timed phases, kept in grading.json.

The pipeline times each of its steps (``step`` phases, which add up to the grading's wall time
less the probe and the intake, also timed) and, inside them, the pieces worth seeing apart: each
stage's compile and run, the parts of a run as the stage child measured them (CuPy's start-up,
correctness, the timed benchmark), racecheck and memcheck, the occupancy program's build and run.
``detail`` phases overlap the step that holds them, so only steps are summed.
``python tools/phase_times.py OUT/grading.json`` prints the breakdown.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Phase:
    name: str  # "probe", "compile_stages", "compile", "run.bench", "outputs", ...
    seconds: float
    stage: str = ""  # the stage or section it belongs to, "" for the whole grading
    detail: bool = False  # a piece of a step (overlaps it), not a step of its own
    # Wall-clock time (time.time()) when it was recorded: the end of a phase timed in this process, so
    # [ended - seconds, ended] places it among other processes' phases (a batch's GPU turns). Not compared.
    ended: float = field(default=0.0, compare=False)


@dataclass
class Clock:
    phases: list[Phase] = field(default_factory=list)

    @contextmanager
    def step(self, name: str, stage: str = "") -> Iterator[None]:
        """Time a step of the grading (summed into the total)."""
        with self._timed(name, stage, detail=False):
            yield

    @contextmanager
    def detail(self, name: str, stage: str = "") -> Iterator[None]:
        """Time a piece of the current step (shown under it, not summed)."""
        with self._timed(name, stage, detail=True):
            yield

    def add(self, name: str, seconds: float, stage: str = "", detail: bool = True) -> None:
        """Record a time measured elsewhere (a child's own account of its phases)."""
        self.phases.append(Phase(name, round(max(seconds, 0.0), 3), stage, detail, round(time.time(), 3)))

    @contextmanager
    def _timed(self, name: str, stage: str, detail: bool) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.add(name, time.monotonic() - t0, stage, detail)


def breakdown(phases: list[Phase], total_s: float | None = None) -> list[tuple[str, float, str]]:
    """Rows (label, seconds, share of the total) for people: each step, its details indented under it.

    Details are listed after the step that contains them (they were recorded before it ended)."""
    steps = [p for p in phases if not p.detail]
    total = total_s if total_s else sum(p.seconds for p in steps) or 1.0
    rows: list[tuple[str, float, str]] = []
    pending: list[Phase] = []
    for p in phases:
        if p.detail:
            pending.append(p)
            continue
        rows.append((p.name + (f" [{p.stage}]" if p.stage else ""), p.seconds, f"{100 * p.seconds / total:.0f}%"))
        rows += [(f"  {d.name}" + (f" [{d.stage}]" if d.stage else ""), d.seconds, "") for d in pending]
        pending = []
    rows += [(f"  {d.name}" + (f" [{d.stage}]" if d.stage else ""), d.seconds, "") for d in pending]
    return rows
