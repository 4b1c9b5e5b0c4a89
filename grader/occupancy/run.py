"""Grade a submission's occupancy exercises: build, run, measure, then :func:`grade_occupancy`.

:func:`grade_occupancy_submission` is what :func:`grader.pipeline.grade` calls when the
rubric has an ``occupancy:`` section. Steps (each one's failure is an item
message, never an exception):

1. Read the answers file and the program (paths from the rubric's ``files``,
   relative to the submission; :func:`grader.compile.locate.locate` finds them one
   folder up or down as well).
2. Static, no GPU: the host-code check of the program's text; ``nvcc -cubin`` of
   the program at every register cap (``-maxrregcount=N -DREGCAP=N``) for
   ``heavy``'s resources, read from each cubin and its SASS (grader/compile/resources.py). With a GPU also the default build's cubin (for ``work``)
   and the host program, all compiled in parallel by :mod:`grader.occupancy.build`
   through the one guarded compile (:mod:`grader.compile.student`). In a grading the
   pipeline starts these builds beside the stages' compiles (:func:`start_builds`) and
   hands them over as ``prebuilt``, so the GPU steps never wait for a compiler.
3. GPU only: run the student's program (:mod:`grader.occupancy.program`: time limit,
   trimmed output, as ``$GRADER_STUDENT_USER`` when that is set and the grader is root)
   and parse its JSON; then the trusted child :mod:`grader.children.occupancy`
   (:mod:`grader.occupancy.child`) asks the
   Occupancy API about the compiled ``work``, re-runs both sweeps with equal total
   work and times ``heavy`` at every cap. In a grading with a GPU schedule both were
   started on it beside the stages (:mod:`grader.occupancy.early`, handed over as
   ``early``), and this step only collects what they found.
4. :func:`grader.occupancy.exercises.grade_occupancy` turns all of it into items;
   a PNG of both sweeps goes to the results folder (``plots_dir``, next to results.json, so
   it travels with the results; the work folder is removed) and the Ex 4 conclusion items
   name it by its file name, never by a path on the grading machine.

Everything measured is written to ``WORK/occupancy_measurements.json``
(``docs/measurements/scripts/occupancy_gpu_check.py`` prints from it).
"""
from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from grader.clock import Clock
from grader.compile.locate import MAX_SOURCE_BYTES, Problem, locate
from grader.compile.student import Deadline, Fence, student_user
from grader.grading import Environment
from grader.model import Cause, Gap, ItemResult, Measured, Status
from grader.occupancy.answers import Answers, answer_schema, parse_answers
from grader.occupancy.build import Build, PendingBuilds, Prebuilt, build_all, ptxas_measurements, start_all, trim
from grader.occupancy.child import CHILD_TIMEOUT_S, apply_child_report, child_spec, run_child
from grader.occupancy.early import ChildRun, CollectedOccupancy, EarlyOccupancy, ProgramRun
from grader.occupancy.exercises import grade_occupancy
from grader.occupancy.grading import NO_DEVICE, STAGE, Measurements
from grader.occupancy.plots import plot_sweeps, sweep_series
from grader.occupancy.program import PROGRAM_OUTPUT_LIMIT, PROGRAM_TIMEOUT_S, parse_program_output, run_program
from grader.records import to_jsonable
from grader.rubric.occupancy import HAND_GRADED, OccupancyConfig
from grader.rubric.types import Rubric
from grader.untrusted.yaml_load import Limits as YamlLimits

# Re-exported: what tests and docs/measurements/scripts/occupancy_gpu_check.py reach through this module.
__all__ = ["CHILD_TIMEOUT_S", "MEASUREMENTS_FILE", "PROGRAM_OUTPUT_LIMIT", "PROGRAM_TIMEOUT_S", "PendingBuilds",
           "Prebuilt", "apply_child_report", "child_spec", "grade_occupancy_submission", "load_answers",
           "parse_program_output", "run_program", "start_builds"]

Progress = Callable[[str], None]

COMPILE_TIMEOUT_S = 120.0  # lowered to the rubric's compile_s when that is smaller
# The answers file's size cap is the bounded YAML loader's own, so the two can never disagree.
MAX_ANSWERS_BYTES = YamlLimits().max_bytes
MEASUREMENTS_FILE = "occupancy_measurements.json"
PLOT_FILE = "occupancy_sweeps.png"


# ---------------------------------------------------------------------------------------
# Files of the submission
# ---------------------------------------------------------------------------------------
def _read_text(path: Path, limit: int) -> tuple[str | None, str]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, f"{path.name} cannot be read ({exc.strerror or exc})"
    if len(data) > limit:
        return None, f"{path.name} is {len(data):,} bytes; the limit is {limit:,}"
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError as exc:
        return None, f"{path.name} is not UTF-8 text (byte {exc.start})"


def load_answers(root: Path, cfg: OccupancyConfig) -> tuple[Answers, Path | None]:
    """The parsed answers file; a missing or unreadable file fails every answer item."""
    found = locate(root, cfg.answers_file, nearby=True, limit=MAX_ANSWERS_BYTES)
    path, problem, text = found.path, found.message, None
    if path is not None:
        text, problem = _read_text(path, MAX_ANSWERS_BYTES)
    if text is None:
        hint = " (start from starter/occupancy/answers.yaml)" if found.problem is Problem.MISSING else ""
        return Answers(error=f"{problem}{hint}; every item that reads the answers needs it"), None
    return parse_answers(text, answer_schema(cfg), filename=cfg.answers_file), path


# ---------------------------------------------------------------------------------------
# The whole flow
# ---------------------------------------------------------------------------------------
def _no_device(env: Environment) -> Gap:
    """Why nothing runs when the run has no usable GPU (Cause.NO_GPU, whatever the reason's words)."""
    reason = env.device_reason.strip()
    if not reason:
        return Gap(Cause.NO_GPU, NO_DEVICE)
    # Wording only: a reason already worded "not evaluated: ..." is not said twice.
    return Gap(Cause.NO_GPU, reason if reason.lower().startswith("not evaluated") else f"not evaluated: {reason}")


def _no_section() -> list[ItemResult]:
    return [ItemResult(stage=STAGE, item="config", title="Occupancy exercises", status=Status.NOT_EVALUATED,
                       score=0.0, max_score=0.0, message="not evaluated: the rubric has no occupancy section",
                       visibility="hidden")]


def _internal_error(cfg: OccupancyConfig, tb: str) -> list[ItemResult]:
    msg = ("not evaluated: the grader failed while grading the occupancy exercises (not a judgement "
           "of your work; course staff have the details)")
    # A hand-graded item stays course staff's, whatever happened to the automatic ones.
    return [ItemResult(stage=STAGE, item=spec.id, title=spec.title,
                       status=Status.MANUAL if spec.id in HAND_GRADED else Status.NOT_EVALUATED, score=0.0,
                       max_score=spec.points, message=msg, visibility=spec.visibility,
                       number=spec.number, values=Measured(traceback=tb[-4000:]))
            for spec in cfg.items.values()]


def _program_source(root: Path, cfg: OccupancyConfig) -> tuple[Path | None, str | None, str]:
    """(the program file, its text, "") or (None, None, why it cannot be used)."""
    found = locate(root, cfg.program_file, nearby=True)
    if found.path is None:
        return None, None, found.message
    text, problem = _read_text(found.path, MAX_SOURCE_BYTES)
    return (found.path, text, "") if text is not None else (None, None, problem)


def _compile_timeout(rubric: Rubric) -> float:
    return min(COMPILE_TIMEOUT_S, float(rubric.timeouts.compile_s))


def start_builds(root: Path, rubric: Rubric, env: Environment, work: Path, pool: Executor, *,
                 fence: Fence | None = None, deadline: Deadline | None = None) -> PendingBuilds | None:
    """Start the program's builds on ``pool`` (grader/pipeline.py: compile_stages, so they run beside
    the stages' compiles instead of after the GPU steps): the same builds, flags, limits and fence as
    :func:`grade_occupancy_submission` would make. None when it would build nothing (no section, no
    usable program file, no nvcc); the occupancy step then says why itself."""
    cfg = rubric.occupancy
    nvcc = env.nvcc
    if cfg is None or nvcc is None or nvcc.path is None:
        return None
    try:
        src, _text, _problem = _program_source(Path(root), cfg)
        if src is None:
            return None
        Path(work).mkdir(parents=True, exist_ok=True)
        futures = start_all(src, cfg, nvcc, list(env.arch_flags), Path(work),
                            _compile_timeout(rubric), env.has_gpu, pool,
                            user=student_user(), fence=fence, cuobjdump=env.cuobjdump,
                            deadline=deadline)
    except Exception:  # the grader's own bug: the occupancy step builds itself, and says so
        return None
    return PendingBuilds(src, futures)


def grade_occupancy_submission(root: Path, rubric: Rubric, env: Environment, work: Path,
                               progress: Progress = lambda _msg: None, *,
                               fence: Fence | None = None, clock: Clock | None = None,
                               plots_dir: Path | None = None, prebuilt: Prebuilt | None = None,
                               early: EarlyOccupancy | CollectedOccupancy | None = None) -> list[ItemResult]:
    """Every occupancy item for the submission at ``root``; never raises. ``clock`` gets the build's,
    the program's and the measurements' times as detail phases ("measure.wait": the child's wait at its
    gate). The sweeps' plot goes to ``plots_dir`` (the results folder; ``work`` when not given).
    ``prebuilt``: the builds :func:`start_builds` made (else they are made here); ``early``: the runs
    started on the grading's GPU schedule from those builds (else they run here), or their results
    already collected (``CollectedOccupancy``: this then runs on any thread, touching no schedule)."""
    cfg = rubric.occupancy  # validated when the rubric was loaded
    if cfg is None:  # the pipeline calls this only when there is a section; said, not raised
        return _no_section()
    try:
        return _grade(cfg, Path(root), rubric, env, Path(work), progress, fence, clock or Clock(),
                      Path(plots_dir) if plots_dir is not None else Path(work), prebuilt, early)
    except Exception:  # the grader's own bug: every item says so, nothing crashes
        return _internal_error(cfg, traceback.format_exc())


def _grade(cfg: OccupancyConfig, root: Path, rubric: Rubric, env: Environment, work: Path, progress: Progress, fence: Fence | None,
           clock: Clock, plots_dir: Path, prebuilt: Prebuilt | None = None,
           early: EarlyOccupancy | CollectedOccupancy | None = None) -> list[ItemResult]:
    t0 = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    log: dict[str, Any] = {"submission": str(root), "steps": {}}
    answers, answers_path = load_answers(root, cfg)
    log["answers_file"] = str(answers_path) if answers_path else None
    log["answers_notes"] = answers.notes

    has_gpu = env.has_gpu
    meas = Measurements(device_available=has_gpu,
                        no_device=Gap(Cause.NO_GPU, NO_DEVICE) if has_gpu else _no_device(env))
    src, meas.program_source, src_problem = _program_source(root, cfg)
    log["program_file"] = str(src) if src else None

    nvcc = env.nvcc
    has_nvcc = nvcc is not None and nvcc.path is not None
    builds: dict[str, Build] = {}
    if src is None:
        meas.ptxas_problem = meas.program_problem = src_problem
        for part in ("api", "sweeps", "heavy"):
            meas.gpu_problems[part] = Gap(Cause.STUDENT, src_problem)
    elif not has_nvcc:
        reason = (nvcc.reason if nvcc is not None else "") or "nvcc not found"
        meas.no_compiler_reason = f"not evaluated: no CUDA compiler ({reason})"
        if has_gpu:  # nothing can be built, so nothing can run: the grader's doing, not the GPU's absence
            meas.device_available = False
            meas.no_device = Gap(Cause.GRADER, meas.no_compiler_reason)
    else:
        assert nvcc is not None  # has_nvcc
        if prebuilt is not None and prebuilt.src == src:  # built beside the stages' compiles
            builds, build_s = prebuilt.builds, prebuilt.seconds
        else:
            progress("occupancy: compiling occ.cu")
            tb = time.monotonic()
            builds = build_all(src, cfg, nvcc, list(env.arch_flags), work,
                               _compile_timeout(rubric), with_gpu=has_gpu, user=student_user(), fence=fence,
                               cuobjdump=env.cuobjdump)
            build_s = time.monotonic() - tb
            clock.add("build", build_s, "occupancy")
        log["steps"]["compile_s"] = round(build_s, 2)
        log["builds"] = {k: {"ok": b.ok, "problem": b.problem, "command": b.proc.command if b.proc else None,
                             "wall_s": b.proc.wall_s if b.proc else None,
                             "kernels": {n: vars(r) for n, r in b.kernels.items()}}
                         for k, b in builds.items()}
        meas.ptxas, meas.ptxas_problem = ptxas_measurements(builds, cfg)

    if meas.device_available and src is not None:
        exe, default = builds.get("exe"), builds.get("default")
        on_schedule = early if early is not None and early.builds is builds else None  # started with the stages
        if exe is not None and exe.ok:
            progress("occupancy: running the program")
            ran = (on_schedule.program_run() if on_schedule is not None else None) or \
                ProgramRun.timed(lambda: run_program(exe.output, work, fence=fence))
            meas.program, meas.program_problem = ran.doc, ran.problem
            log["steps"]["program_s"] = round(ran.seconds, 2)
            clock.add("program", ran.seconds, "occupancy")
            log["program"] = meas.program
            log["program_problem"] = meas.program_problem
            if ran.proc is not None:
                log["program_stderr"] = trim(ran.proc.stderr, 4000)
        else:
            meas.program_problem = exe.problem if exe else "the program was not built"
        if default is not None and (default.ok or meas.ptxas is not None):
            progress("occupancy: the grader's own measurements")
            got = (on_schedule.measured() if on_schedule is not None else None) or \
                ChildRun.timed(lambda: run_child(cfg, builds, work, CHILD_TIMEOUT_S, fence=fence))
            log["steps"]["gpu_child_s"] = round(got.seconds, 2)
            clock.add("measure", got.seconds, "occupancy")
            if got.held_s:  # its wait at its gate, its clock held (grader/occupancy/early.py)
                log["steps"]["gpu_child_wait_s"] = round(got.held_s, 2)
                clock.add("measure.wait", got.held_s, "occupancy")
            log["gpu_report"] = got.report
            log["gpu_child"] = {"brief": got.proc.brief(), "stderr": trim(got.proc.stderr, 2000)}
            apply_child_report(meas, got.report, got.proc)
        else:
            problem = Gap(Cause.STUDENT, default.problem if default else "the program was not built")
            for part in ("api", "sweeps", "heavy"):
                meas.gpu_problems[part] = problem

    results = grade_occupancy(cfg, answers, meas)
    results = _attach_plot(results, cfg, meas, plots_dir, log)
    log["seconds"] = round(time.monotonic() - t0, 2)
    log["measurements"] = {"api": meas.api, "sweep_times": meas.sweep_times,
                           "heavy_times_ms": meas.heavy_times_ms, "ptxas": meas.ptxas,
                           "ptxas_problem": meas.ptxas_problem, "gpu_problems": meas.gpu_problems,
                           "device_available": meas.device_available}
    try:
        (work / MEASUREMENTS_FILE).write_text(json.dumps(to_jsonable(log), indent=1, default=str))
    except OSError:
        pass
    return results


def _attach_plot(results: list[ItemResult], cfg: OccupancyConfig, meas: Measurements, plots_dir: Path,
                 log: dict) -> list[ItemResult]:
    """Draw the sweeps into ``plots_dir`` and name the PNG in the Ex 4 conclusion items' messages by its
    file name: a path on the grading machine means nothing to a student."""
    if not meas.device_available or (meas.api is None and meas.sweep_times is None):
        return results
    e4 = cfg.ex4
    series = sweep_series(meas.api, meas.sweep_times, meas.program,
                          [(e4.smem_block_size, s) for s in e4.smem_points],
                          [(b, e4.block_smem) for b in e4.block_points])
    log["plot_series"] = series
    name = (meas.api or {}).get("device", {}).get("name", "")
    plots_dir.mkdir(parents=True, exist_ok=True)
    path, note = plot_sweeps(plots_dir / PLOT_FILE, series,
                             title=f"Occupancy vs run time ({name})".replace(" ()", ""))
    log["plot"] = PLOT_FILE if path else note
    line = (f"Plot of occupancy and run time for both sweeps: `{PLOT_FILE}` in the results folder, next to "
            "results.json (Gradescope does not show files; when the course's GPU service graded this "
            "submission, its job page shows it)") if path else f"({note})"
    for r in results:
        if r.item in ("ex4.smem_conclusion", "ex4.block_conclusion"):
            r.message = (r.message + "\n" + line) if r.message else line
            if path:
                r.values.plot = PLOT_FILE
    return results

