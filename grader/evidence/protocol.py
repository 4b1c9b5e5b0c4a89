"""The records of the child protocol: each child mode's spec (SPEC.json) and result (RESULT.json), and what a
child launches. Plain typed dataclasses, written and read by grader/records.py.

A runtime file (grader/children/__init__.py: RUNTIME_FILES): the child processes import these records as the
grading process does, so this module imports nothing but the standard library. grader/children/protocol.py is
the protocol itself (the modes, reading and writing the files, the gates).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


# ---- what children launch -----------------------------------------------------------------------------
@dataclass
class LaunchShape:
    """The launch of a stage's kernel: its block, the [BM, BN] tile of C each block computes, dynamic smem."""

    block: list[int]
    tile: list[int]
    smem: int


@dataclass
class Kernel:
    """A compiled stage's kernel as every child launches it (grading.py: StageOutcome.launch_spec): the
    cubin, the kernel's name, its inputs and operands and, for a tensor-map stage, the TMA boxes
    ``[k, a_rows, b_rows, swizzle]`` (grader/children/tma.py)."""

    cubin: str
    kernel: str
    inputs: str
    launch: LaunchShape
    operands: str = "pointers"
    boxes: list[int] | None = None
    id: str = ""  # the stage's id, in the profile and sanitize children's lists


@dataclass(frozen=True)
class Boxes:
    """What a Hopper kernel declared: both operands are K-major (row-major N x K)."""
    k: int  # box width along K, in elements
    a_rows: int
    b_rows: int
    swizzle: int  # bytes: 0, 32, 64 or 128


@dataclass
class KernelGo:
    """The stage child's go at its correctness gate: the compiled kernel."""

    kernel: Kernel


@dataclass
class StagesGo:
    """The go of the profile, sanitize and check children's gates: what to launch or judge."""

    stages: list[Kernel]


# ---- probe ------------------------------------------------------------------------------------------
@dataclass
class ProbeSpec:
    """The probe is told nothing: the GPU is the one CUDA_VISIBLE_DEVICES shows."""


@dataclass
class ProbeResult:
    """The GPU, or (``ok`` false) why there is none."""

    ok: bool
    reason: str = ""
    index: int = 0
    count: int = 0
    name: str = ""
    cc: list[int] = field(default_factory=list)
    sms: int = 0
    clock_khz: int = 0
    l2_bytes: int = 0
    total_mem: int = 0
    runtime_version: int = 0
    driver_version: int = 0
    cupy_version: str = ""

    @property
    def capability(self) -> tuple[int, int] | None:
        """(major, minor) of a present GPU; None without one."""
        return (self.cc[0], self.cc[1]) if self.ok and len(self.cc) == 2 else None


# ---- stage ------------------------------------------------------------------------------------------
@dataclass
class Case:
    n: int
    seed: int


@dataclass
class BenchSpec:
    n: int
    seed: int
    warmup: int
    reps: int
    min_reps: int
    max_seconds: float
    flush_l2: bool
    # After the timed launches, this many launches at profile_n (the Nsight Compute size), timed the same
    # way, so the grader can tell whether the profiled code is the timed code (grader/profile/agreement.py).
    profile_n: int | None = None
    profile_launches: int = 3


@dataclass
class StageSpec:
    """One stage's run: its inputs, baseline, correctness cases and benchmark; its kernel now, or (``gate``)
    handed over at the correctness gate (:class:`KernelGo`)."""

    id: str
    inputs: str
    baseline: str
    correctness: list[Case]
    out_dir: str
    bench: BenchSpec | None = None
    l2_bytes: int = 0
    gate: bool = False
    kernel: Kernel | None = None


@dataclass
class CaseRun:
    """One correctness launch: its size, seed, saved output and wall time."""

    n: int
    seed: int
    file: str
    wall_ms: float = 0.0


@dataclass
class BenchRun:
    """The benchmark: per-repetition times of the kernel and its baseline, and what the checker needs of
    the timed launches (the last output, its seed, the fingerprints, each launch's inputs' seed and each
    fingerprint vector's seed, all drawn from the OS after the launch before). ``warmup_ms``: each warm-up
    launch's time (its inputs' seeds in ``warmup_seeds``); ``profile_ms``: the launches at ``profile_n``."""

    n: int
    seed: int
    student_ms: list[float] = field(default_factory=list)
    baseline_ms: list[float] = field(default_factory=list)
    file: str | None = None
    last_seed: int | None = None
    timed_launches: int = 0
    fingerprints: str | None = None
    vector_seeds: list[int] = field(default_factory=list)
    input_seeds: list[int] = field(default_factory=list)
    warmup_ms: list[float] = field(default_factory=list)
    warmup_seeds: list[int] = field(default_factory=list)
    profile_n: int | None = None
    profile_ms: list[float] = field(default_factory=list)
    baseline_inputs_redrawn: int = 0  # times the baseline's pristine inputs had changed and were drawn again


@dataclass
class StageResult:
    prepared: bool = False
    loaded: bool = False
    correctness: list[CaseRun] = field(default_factory=list)
    bench: BenchRun | None = None
    error: str | None = None
    traceback: str | None = None
    stopped: str | None = None
    attributes: Mapping[str, int] = field(default_factory=dict)
    times: Mapping[str, float] = field(default_factory=dict)


# ---- check ------------------------------------------------------------------------------------------
@dataclass
class Fingerprints:
    """A benchmark's fingerprints file, the timed launches' count, each launch's inputs' seed and its
    fingerprint vector's seed."""

    file: str
    count: int
    input_seeds: list[int]
    vector_seeds: list[int]

    @classmethod
    def of(cls, bench: BenchRun, file: str) -> Fingerprints:
        """The fingerprints of ``bench``'s timed launches, kept in ``file`` (its ``fingerprints``)."""
        return cls(file=file, count=bench.timed_launches, input_seeds=bench.input_seeds,
                   vector_seeds=bench.vector_seeds)


@dataclass
class CheckCase:
    """One output to judge: ``kind`` check (a correctness size) or bench (the last timed output)."""

    n: int
    seed: int
    file: str
    kind: str
    fingerprints: Fingerprints | None = None


@dataclass
class CheckRequest:
    """One stage's outputs for the checker (grader/gpu/stages.py: _check_request)."""

    id: str
    inputs: str
    rtol: float
    out_dir: str
    cases: list[CheckCase]


@dataclass
class Expect:
    """The references the checker computes ahead: [n, seed, inputs] each."""

    references: list[tuple[int, int, str]] = field(default_factory=list)


@dataclass
class CheckSpec:
    stages: list[CheckRequest] = field(default_factory=list)
    gate: bool = False
    expect: Expect = field(default_factory=Expect)


@dataclass
class CaseVerdict:
    """The checker's verdict on one case (``kind`` check, bench or timed: the fingerprints)."""

    n: int
    kind: str
    passed: bool
    problem: str | None = None
    description: str | None = None
    max_scaled_err: float = 0.0
    max_abs_err: float | None = None
    rtol: float | None = None
    bad_count: int | None = None
    nonfinite_count: int | None = None
    first_bad: list[int] | None = None
    got: float | None = None
    expected: float | None = None


@dataclass
class StageVerdict:
    cases: list[CaseVerdict]
    backend: str = ""


@dataclass
class CheckGo:
    """The checker's go at its gate: the stages to judge."""

    stages: list[CheckRequest]


@dataclass
class CheckResult:
    verdicts: Mapping[str, StageVerdict] = field(default_factory=dict)
    times: Mapping[str, float] = field(default_factory=dict)
    stopped: bool = False


# ---- profile and sanitize ---------------------------------------------------------------------------
@dataclass
class ProfileSpec:
    """One launch of each stage's kernel at size n under ncu; with ``gate`` the stages come at the gate
    ``launch`` (:class:`StagesGo`), the input kinds in ``inputs`` made before it."""

    n: int
    seed: int
    stages: list[Kernel] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    gate: bool = False


@dataclass
class SanitizeSpec:
    """One launch of each stage's kernel under compute-sanitizer; ``blocks``: only that corner of the grid.
    With ``gate`` (the tool's name) the stages come at that gate; ``ids`` name those it may be given."""

    n: int
    seed: int
    stages: list[Kernel] = field(default_factory=list)
    blocks: list[int] | None = None
    gate: str | None = None
    ids: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)


@dataclass
class LaunchResult:
    """The profile and sanitize children's result: each stage whose launch failed, and why; ``stopped``:
    ended at the gate (false, or why)."""

    failures: Mapping[str, str] = field(default_factory=dict)
    stopped: bool | str = False


# ---- occupancy --------------------------------------------------------------------------------------
@dataclass
class SweepsSpec:
    smem: list[tuple[int, int]]  # [block, dynamic smem] per point
    block: list[tuple[int, int]]
    total_threads: int
    iters: int
    warmup: int
    reps: int
    min_reps: int
    max_seconds: float


@dataclass
class HeavySpec:
    block: int
    iters: int
    total_threads: int
    cubins: Mapping[str, str]  # register cap -> its cubin
    warmup: int
    reps: int
    min_reps: int
    max_seconds: float


@dataclass
class OccupancySpec:
    source: str
    work_kernel: str
    heavy_kernel: str
    cubin: str | None
    work_problem: str | None
    n: int
    api_points: list[tuple[int, int]]
    potential_smem: int
    sweeps: SweepsSpec
    heavy: HeavySpec
    gate: bool = False


@dataclass
class OccupancyError:
    phase: str
    message: str
    student: bool


@dataclass
class OccupancyResult:
    """The occupancy child's measurements; ``api`` in the format of grader/occupancy/exercises.py:
    simulated_api (its parts read there)."""

    phase: str
    done: list[str] = field(default_factory=list)
    errors: list[OccupancyError] = field(default_factory=list)
    device: Mapping[str, int | str] | None = None
    api: Mapping[str, Mapping[str, int | str | None] | list[Mapping[str, int | None]] | int] | None = None
    work_attributes: Mapping[str, int] | None = None
    sweep_times: Mapping[str, Mapping[str, float]] | None = None
    sweep_rounds: int | None = None
    sweep_work: Mapping[str, int] | None = None
    heavy_times_ms: Mapping[str, float] | None = None
    heavy_rounds: int | None = None
    heavy_attributes: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: Mapping[str, float] = field(default_factory=dict)


# ---- warm and keep ----------------------------------------------------------------------------------
@dataclass
class Draw:
    n: int
    inputs: str


@dataclass
class WarmStage(StageSpec):
    """A stage run of the warm child, on the grader's own kernel; ``rtol`` for the checker's calls."""

    rtol: float = 1e-3


@dataclass
class WarmSpec:
    runs: list[WarmStage]
    draws: list[Draw] = field(default_factory=list)


@dataclass
class WarmRun:
    inputs: str
    baseline: str
    n: int


@dataclass
class WarmResult:
    ok: bool = False
    runs: list[WarmRun] = field(default_factory=list)
    times: Mapping[str, float] = field(default_factory=dict)
    checked: list[str] = field(default_factory=list)
