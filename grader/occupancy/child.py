"""The grader's own GPU measurements of the occupancy program, in the trusted child.

:func:`child_spec` says what :mod:`grader.children.occupancy` measures (from the rubric and the
builds), :func:`run_child` runs it through :func:`grader.sandbox.launch.launch`, and
:func:`apply_child_report` turns its report into :class:`~grader.occupancy.grading.Measurements`,
saying per part (api, sweeps, heavy) what is missing and whose doing that is. In a grading with a
GPU schedule the child starts with the stage runs and waits at its gate before timing anything
(:mod:`grader.occupancy.early`).
"""
from __future__ import annotations

from pathlib import Path

from grader.children.protocol import OCCUPANCY
from grader.compile.student import Fence
from grader.evidence.protocol import HeavySpec, OccupancyResult, OccupancySpec, SweepsSpec
from grader.model import Cause, Gap, ProcRecord
from grader.occupancy.build import Build
from grader.occupancy.exercises import api_points
from grader.occupancy.grading import Measurements
from grader.records import to_jsonable
from grader.rubric.occupancy import OccupancyConfig
from grader.sandbox.launch import launch
from grader.sandbox.process import Control
from grader.untrusted.quote import quote_code

# The grader's own re-run of the Ex 4 sweeps and of heavy: the same work at every point
# (grid = TOTAL_THREADS / block), like the reference program. Not in the rubric: changing
# them changes no answer, only the run times the conclusions are checked against.
ARRAY_N = 1 << 20
SWEEP_TOTAL_THREADS = 1 << 20
SWEEP_ITERS = 256
HEAVY_TOTAL_THREADS = 1 << 20
HEAVY_ITERS = 64
SWEEP_TIMING = {"warmup": 1, "reps": 15, "min_reps": 5, "max_seconds": 8.0}  # SweepsSpec's and HeavySpec's
HEAVY_TIMING = {"warmup": 1, "reps": 10, "min_reps": 3, "max_seconds": 6.0}
CHILD_TIMEOUT_S = 60.0


def child_spec(cfg: OccupancyConfig, builds: dict[str, Build], gate: bool = False) -> OccupancySpec:
    """What :mod:`grader.children.occupancy` measures, from the rubric and the builds."""
    e4, e6 = cfg.ex4, cfg.ex6
    sweeps = SweepsSpec(smem=[(e4.smem_block_size, s) for s in e4.smem_points],
                        block=[(b, e4.block_smem) for b in e4.block_points],
                        total_threads=SWEEP_TOTAL_THREADS, iters=SWEEP_ITERS, warmup=int(SWEEP_TIMING["warmup"]),
                        reps=int(SWEEP_TIMING["reps"]), min_reps=int(SWEEP_TIMING["min_reps"]),
                        max_seconds=SWEEP_TIMING["max_seconds"])
    heavy = HeavySpec(block=e6.block_size, iters=HEAVY_ITERS, total_threads=HEAVY_TOTAL_THREADS,
                      cubins={str(cap): str(builds[f"r{cap}"].output) for cap in e6.register_caps
                              if f"r{cap}" in builds and builds[f"r{cap}"].ok},
                      warmup=int(HEAVY_TIMING["warmup"]), reps=int(HEAVY_TIMING["reps"]),
                      min_reps=int(HEAVY_TIMING["min_reps"]), max_seconds=HEAVY_TIMING["max_seconds"])
    return OccupancySpec(
        source=cfg.program_file, work_kernel=cfg.program.work_kernel, heavy_kernel=cfg.program.heavy_kernel,
        cubin=str(builds["default"].output) if "default" in builds and builds["default"].ok else None,
        work_problem=(builds["default"].problem if "default" in builds else "not built") or None,
        n=ARRAY_N, api_points=[(int(b), int(s)) for b, s in api_points(cfg)], potential_smem=cfg.ex2.dynamic_smem,
        sweeps=sweeps, heavy=heavy, gate=gate)


_PARTS = ("api", "sweeps", "heavy")
# Which measurement parts an error in a child's phase leaves missing.
_PHASE_PARTS = {"setup": _PARTS, "load": ("api", "sweeps"), "api": ("api", "sweeps"),
                "ready": ("sweeps", "heavy"), "sweeps": ("sweeps",), "heavy": ("heavy",)}
_GRADERS = ("setup", "load", "api", "ready")  # phases of the grader's own code
_DOING = {"ready": "waiting for its turn on the GPU"}


def apply_child_report(meas: Measurements, report: OccupancyResult | None, proc: ProcRecord | None) -> None:
    """Fill ``meas`` from the child's report; say in ``meas.gpu_problems`` what is missing and whose
    doing that is (the child marks its errors ``student``; a crash while the grader's own set-up or
    API calls run is the grader's, one while the student's kernels run is the student's)."""
    problems: dict[str, list[Gap]] = {}

    def add(parts: tuple[str, ...], gap: Gap) -> None:
        for part in parts:
            problems.setdefault(part, [])
            if gap not in problems[part]:
                problems[part].append(gap)

    for err in report.errors if report else []:
        msg = err.message.strip()
        gap = (Gap(Cause.STUDENT, msg) if err.student else
               Gap(Cause.GRADER, "not evaluated: the grader's GPU measurements failed: " + msg))
        add(_PHASE_PARTS.get(err.phase, _PARTS), gap)

    phase = report.phase if report else None
    if proc is not None and not proc.ok and phase != "finished":
        if report is None or phase is None:
            add(_PARTS, Gap(Cause.GRADER, f"not evaluated: the grader's GPU measurement process failed "
                                          f"({proc.brief()}): {quote_code((proc.stderr or proc.stdout).strip()[-400:], 400)}"))
        elif phase in _GRADERS:
            add(_PHASE_PARTS[phase], Gap(Cause.GRADER, f"not evaluated: the grader's GPU measurement process "
                                                       f"{proc.brief()} while {_DOING.get(phase, phase)}: "
                                                       f"{quote_code(proc.stderr.strip()[-400:], 400)}"))
        else:
            kernel = "heavy" if phase == "heavy" else "work"
            if proc.timed_out:
                msg = (f"the grader's run of your `{kernel}` kernel did not finish within {proc.timeout_s:g} s "
                       f"(look for a loop that never ends)")
            else:
                msg = f"the grader's run of your `{kernel}` kernel ended abnormally ({proc.brief()})"
            add(_PHASE_PARTS[phase] if phase == "heavy" else ("sweeps", "heavy"), Gap(Cause.STUDENT, msg))

    meas.api = to_jsonable(report.api) if report and report.api is not None else None
    sweeps = report.sweep_times if report else None
    try:  # the point keys are whole numbers written as JSON keys
        if sweeps is not None:
            meas.sweep_times = {name: {int(k): v for k, v in sweeps.get(name, {}).items()} for name in ("smem", "block")}
        heavy = report.heavy_times_ms if report else None
        if heavy is not None and "heavy" not in problems:
            meas.heavy_times_ms = {int(k): v for k, v in heavy.items()}
    except ValueError as exc:
        add(_PARTS, Gap(Cause.GRADER, f"not evaluated: the grader's GPU measurements are not readable ({exc})"))
    for part in _PARTS:
        if part in problems:
            # The student's failures decide (the items fail with all of them); else the grader's first.
            gaps = problems[part]
            students = [g.message for g in gaps if g.cause is Cause.STUDENT]
            meas.gpu_problems[part] = Gap(Cause.STUDENT, "\n".join(students)) if students else gaps[0]
        elif part == "api" and meas.api is None:
            meas.gpu_problems[part] = Gap(Cause.GRADER, "not evaluated: the grader's Occupancy API calls did not run")
        elif part == "sweeps" and meas.sweep_times is None:
            meas.gpu_problems[part] = Gap(Cause.GRADER, "not evaluated: the grader's re-run of the sweeps did not run")
        elif part == "heavy" and meas.heavy_times_ms is None:
            meas.gpu_problems[part] = Gap(Cause.GRADER, "not evaluated: the grader's timing of heavy did not run")


def run_child(cfg: OccupancyConfig, builds: dict[str, Build], work: Path, timeout_s: float | None = None, *,
              fence: Fence | None = None, gate: bool = False,
              control: Control | None = None) -> tuple[OccupancyResult | None, ProcRecord]:
    """Run :mod:`grader.children.occupancy` on the builds; (its report or None, the process). ``gate``:
    it waits at its gate ``sweeps`` before timing anything (grader/occupancy/early.py opens it);
    ``control``: the schedule's hold on its clock while it waits, and its cancel."""
    spec = child_spec(cfg, builds, gate)
    child = launch(OCCUPANCY, spec, work, timeout_s or CHILD_TIMEOUT_S, 20_000, fence=fence, control=control)
    return child.result, child.proc
