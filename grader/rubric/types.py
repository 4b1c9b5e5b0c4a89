"""The validated rubric: what grader/rubric/load.py builds from rubric.yaml. Immutable records.

Everything the grader does per stage (compile, run, check, time, score, the handout's tables)
iterates over ``Rubric.stages``; no other module lists stages. The occupancy and report
sections, when the rubric has them, are parsed once, at load, into their own typed configs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from grader.evidence.rubric import Stage
from grader.model import Bonus
from grader.rubric.occupancy import OccupancyConfig
from grader.rubric.peaks import PeakOverride
from grader.rubric.report import ReportConfig

if TYPE_CHECKING:
    from grader.rubric.calibration import Entry

INPUTS = ("fp32", "fp16", "bf16")  # a stage's input precision (bf16: both operands K-major, grader/children/inputs.py)
# How the kernel gets its operands: plain pointers (A, B, C, N), or the Hopper contract: two TMA
# descriptors the grader encodes from the kernel's declared boxes, then the pointers (grader/children/tma.py).
OPERANDS = ("pointers", "tensor_maps")
BONUS_MODES = (Bonus.EXTRA.value, Bonus.SEPARATE.value)  # settings.bonus: how bonus stages' points count


@dataclass(frozen=True)
class Baseline:
    """The library call a stage is timed against."""
    label: str  # as feedback names it
    words: str  # the handout's longer name
    inputs: str  # the input precision it multiplies (a stage's inputs must match)


BASELINES: dict[str, Baseline] = {
    "cublas_sgemm": Baseline("cuBLAS SGEMM", "cuBLAS SGEMM", "fp32"),
    "cublas_gemmex_fp16": Baseline("cublasGemmEx (FP16)", "cublasGemmEx (FP16 in, FP32 out)", "fp16"),
    "cublas_gemmex_bf16": Baseline("cublasGemmEx (BF16)", "cublasGemmEx (BF16 in, FP32 out)", "bf16"),
}
# The parts of a rubric besides its stages, by the id --stages selects them with.
SECTIONS = ("occupancy", "report")


@dataclass(frozen=True)
class RunLimits:
    """How a stage child's time limit derives from its reference (``settings.stage_limits``)."""
    multiple: float = 5.0  # a correct kernel this many times slower than the reference is never stopped
    allowance_s: float = 5.0  # the part that does not scale: process start, CuPy, the CUDA context, the small sizes
    floor_s: float = 10.0  # no derived limit is shorter
    unmeasured_s: float = 240.0  # a stage without a measured reference_s


def baseline_label(stage: Stage) -> str:
    """The name of the stage's baseline, as messages show it."""
    return BASELINES[stage.baseline].label


@dataclass(frozen=True)
class Profile:
    """One Nsight Compute run per submission: every stage kernel, one launch each."""
    enabled: bool = True
    n: int = 2048
    clock_control: str = "none"  # ncu --clock-control; "none" leaves the GPU's clocks alone
    timeout_s: float = 60.0  # the whole ncu run (the reference kernels': docs/measurements/2026-12-06-numbers-from-the-code.md)
    # The code profiled must be the code timed (grader/profile/agreement.py): ncu's duration of its launch
    # against the stage child's own launches at the profile size, and the rate there against the rate at
    # the benchmark size, each within this factor either way; else the stage's ncu items fail. The reference
    # kernels: duration ratios 0.94-1.01, rate ratios 0.75-1.02 on an H100 (2026-12-06-integrity-round3.md).
    duration_agreement: float = 1.5
    rate_agreement: float = 2.0


@dataclass(frozen=True)
class Sanitizer:
    """compute-sanitizer runs: racecheck on shared-memory stages, memcheck on failed ones."""
    racecheck: bool = True
    memcheck_on_failure: bool = True
    n: int = 256
    timeout_s: float = 30.0  # one stage's run under the tool (the reference stages': docs/measurements/2026-12-06-numbers-from-the-code.md)
    # racecheck launches at most this many blocks along x and y of the size-n grid (None: all of them).
    # Its hazards are between the threads of one block, which loop over the whole K depth whatever the
    # grid; the tool's cost grows with the blocks it watches (grader/gpu/sanitize.py).
    racecheck_blocks: tuple[int, int] | None = (2, 2)


@dataclass(frozen=True)
class Timeouts:
    probe_s: float = 60.0
    compile_s: float = 120.0
    # Set by hand: every stage child's limit (a stage's limits.run_s wins over it). None: each stage's
    # limit derives from its reference (settings.stage_limits, grader/rubric/limits.py).
    stage_run_s: float | None = None
    checker_s: float = 300.0
    submission_s: float = 300.0  # the stages' runs together; stages still waiting past it are not run
    # Every compile of a submission together (the stages', occ.cu's), from the first one's start: a
    # compile that would start past it is not run, and one running is cut to what is left.
    static_total_s: float = 300.0


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
    stage_limits: RunLimits = RunLimits()
    # A stage's cubin may declare at most this many bytes of static __device__ memory (read from the
    # cubin): a GEMM kernel needs none, and a large buffer is where precomputed results would hide.
    max_static_device_bytes: int = 16 * 1024 * 1024
    occupancy: OccupancyConfig | None = None  # the occupancy exercises, when the rubric has them
    report: ReportConfig | None = None  # the written report, when the rubric has one
    # sha256 of the rubric file's bytes ("" when built from a dict): recorded in every grading, so a
    # batch re-grades what an older rubric graded.
    sha256: str = ""
    # The rubric file's text, as graded (""  when built from a dict): kept in every grading, so a stored
    # grading can be re-scored under an edited rubric knowing what its measurements were taken under.
    text: str = ""
    # The per-GPU calibration entries beside the rubric file (calibration/*.yaml, grader/rubric/calibration.py);
    # a grading on one of those GPUs grades with its entry's levels and stage limits.
    calibrations: tuple[Entry, ...] = ()

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
        """The total a submission is graded out of; bonus stages are outside it (:attr:`bonus_points`)."""
        sections = [c.max_points for c in (self.occupancy, self.report) if c is not None]
        return sum(s.max_points for s in self.stages if s.bonus is Bonus.NONE) + sum(sections)

    @property
    def bonus_points(self) -> float:
        """The bonus stages' points, with the report's items about them (a transition to a bonus stage)."""
        report = 0.0
        if self.report is not None:
            report = sum(i.points for i in self.report.items() if self.report.bonus_of(i.id) is not Bonus.NONE)
        return sum(s.max_points for s in self.stages if s.bonus is not Bonus.NONE) + report
