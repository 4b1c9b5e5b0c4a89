"""The validated rubric: what grader/spec/rubric.py builds from rubric.yaml. Immutable records.

Everything the grader does per stage (compile, run, check, time, score, the handout's tables)
iterates over ``Rubric.stages``; no other module lists stages. The occupancy and report
sections, when the rubric has them, are parsed once, at load, into their own typed configs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from grader.spec.items import Item

if TYPE_CHECKING:  # for annotations only: both section modules import grader.spec
    from grader.occupancy.config import OccupancyConfig
    from grader.writeup.config import ReportConfig

INPUTS = ("fp32", "fp16")  # a stage's input precision
BASELINES = ("cublas_sgemm", "cublas_gemmex_fp16")  # the library call a stage is timed against
# The parts of a rubric besides its stages, by the id --stages selects them with.
SECTIONS = ("occupancy", "report")


@dataclass(frozen=True)
class Launch:
    block: tuple[int, int]
    tile: tuple[int, int]  # (BM rows, BN cols) of C per block
    smem: int = 0


@dataclass(frozen=True)
class Bench:
    n: int = 4096
    warmup: int = 2
    reps: int = 20
    min_reps: int = 5
    max_seconds: float = 20.0
    flush_l2: bool = True


@dataclass(frozen=True)
class Stage:
    id: str
    number: str
    title: str
    file: str
    kernel: str
    inputs: str
    baseline: str
    peak: str
    launch: Launch
    rtol: float
    bench: Bench
    items: tuple[Item, ...]
    summary: str = ""
    # A result this many times faster than the cuBLAS baseline is implausible: its speed items
    # go to a person for review instead of scoring (settings.plausible_max_fraction_of_baseline).
    plausible_max: float = 1.2

    @property
    def launch_symbol(self) -> str:
        return f"{self.kernel}_launch"

    @property
    def max_points(self) -> float:
        return sum(i.points for i in self.items)


@dataclass(frozen=True)
class Profile:
    """One Nsight Compute run per submission: every stage kernel, one launch each."""
    enabled: bool = True
    n: int = 2048
    clock_control: str = "none"  # ncu --clock-control; "none" leaves the GPU's clocks alone
    timeout_s: float = 300.0


@dataclass(frozen=True)
class Sanitizer:
    """compute-sanitizer runs: racecheck on shared-memory stages, memcheck on failed ones."""
    racecheck: bool = True
    memcheck_on_failure: bool = True
    n: int = 256
    timeout_s: float = 120.0


@dataclass(frozen=True)
class Timeouts:
    probe_s: float = 60.0
    compile_s: float = 120.0
    stage_run_s: float = 240.0
    checker_s: float = 300.0
    submission_s: float = 1500.0  # all stages' runs together; later stages are skipped past it


@dataclass(frozen=True)
class PeakOverride:
    match: str
    fp32: float
    fp16_tensor: float


@dataclass(frozen=True)
class Rubric:
    title: str
    arch_without_device: str
    correctness_sizes: tuple[int, ...]
    timeouts: Timeouts
    output_limit_bytes: int
    peak_overrides: tuple[PeakOverride, ...]
    peak_per_sm_clock: dict[str, dict[str, float]]
    stages: tuple[Stage, ...]
    source: str = "rubric.yaml"
    profile: Profile = Profile()
    sanitizer: Sanitizer = Sanitizer()
    occupancy: OccupancyConfig | None = None  # the occupancy exercises, when the rubric has them
    report: ReportConfig | None = None  # the written report, when the rubric has one

    def stage(self, stage_id: str) -> Stage:
        for s in self.stages:
            if s.id == stage_id:
                return s
        raise KeyError(stage_id)

    @property
    def part_ids(self) -> list[str]:
        """What --stages may name: every stage id, then each section this rubric has."""
        return [s.id for s in self.stages] + [k for k in SECTIONS if getattr(self, k) is not None]

    @property
    def max_points(self) -> float:
        sections = [c.max_points for c in (self.occupancy, self.report) if c is not None]
        return sum(s.max_points for s in self.stages) + sum(sections)
