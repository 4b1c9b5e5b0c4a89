"""Grade a submission's occupancy exercises: build, run, measure, then :func:`grade_occupancy`.

:func:`grade_occupancy_submission` is what :func:`grader.pipeline.grade` calls when the
rubric has an ``occupancy:`` section. Steps (each one's failure is an item
message, never an exception):

1. Read the answers file and the program (paths from the rubric's ``files``,
   relative to the submission; found one folder up or down as well).
2. Static, no GPU: the host-code check of the program's text; ``nvcc -cubin`` of
   the program at every register cap (``-maxrregcount=N -DREGCAP=N -Xptxas -v``) for
   ``heavy``'s ptxas report. With a GPU also the default build's cubin (for ``work``)
   and the host program, all compiled in parallel, each with a time limit.
3. GPU only: run the student's program (time limit, trimmed output, as
   ``$GRADER_STUDENT_USER`` when that is set and the grader is root) and parse its
   JSON; then the trusted child :mod:`grader.children.occupancy` asks the
   Occupancy API about the compiled ``work``, re-runs both sweeps with equal total
   work and times ``heavy`` at every cap.
4. :func:`grader.occupancy.exercises.grade_occupancy` turns all of it into items;
   a PNG of both sweeps goes to the work folder and the Ex 4 conclusion items
   name it.

Everything measured is written to ``WORK/occupancy_measurements.json``
(``tools/occupancy_gpu_check.py`` prints from it).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from grader.run import sandbox
from grader.errors import RubricError
from grader.build.ptxas import KernelResources, entry_names, parse_ptxas
from grader.model import NOT_EVALUATED, ItemResult, ProcRecord, to_jsonable
from grader.occupancy.answers import Answers, answer_schema, parse_answers
from grader.occupancy.config import OccupancyConfig, load_occupancy_config
from grader.occupancy.exercises import api_points, grade_occupancy
from grader.occupancy.grading import NO_DEVICE, STAGE, Measurements
from grader.occupancy.plots import plot_sweeps, sweep_series

from grader import REPO_ROOT  # noqa: E402
Progress = Callable[[str], None]

# The grader's own re-run of the Ex 4 sweeps and of heavy: the same work at every point
# (grid = TOTAL_THREADS / block), like the reference program. Not in the rubric: changing
# them changes no answer, only the run times the conclusions are checked against.
ARRAY_N = 1 << 20
SWEEP_TOTAL_THREADS = 1 << 20
SWEEP_ITERS = 256
HEAVY_TOTAL_THREADS = 1 << 20
HEAVY_ITERS = 64
SWEEP_TIMING = {"warmup": 1, "reps": 15, "min_reps": 5, "max_seconds": 8.0}
HEAVY_TIMING = {"warmup": 1, "reps": 10, "min_reps": 3, "max_seconds": 6.0}

# Time limits (seconds). A normal run takes a few seconds each.
COMPILE_TIMEOUT_S = 120.0  # lowered to the rubric's compile_s when that is smaller
PROGRAM_TIMEOUT_S = 45.0
CHILD_TIMEOUT_S = 60.0
PROGRAM_OUTPUT_LIMIT = 256 * 1024  # bytes kept per stream; the JSON is a few KB
MAX_SOURCE_BYTES = 1 << 20
MAX_ANSWERS_BYTES = 256 * 1024
STUDENT_USER_VAR = "GRADER_STUDENT_USER"
MEASUREMENTS_FILE = "occupancy_measurements.json"
PLOT_FILE = "occupancy_sweeps.png"


# ---------------------------------------------------------------------------------------
# Files of the submission
# ---------------------------------------------------------------------------------------
def find_submission_file(root: Path, rel: str) -> tuple[Path | None, str]:
    """The file ``rel`` in the submission, or (None, why not).

    Looks at ``root/rel``, then at its name directly under ``root`` and one folder
    down (a submission that is the exercise folder itself, or one wrapped in a
    folder). Refuses links that leave the submission, empty and oversized files.
    """
    root = Path(root)
    name = Path(rel).name
    cands = [root / rel, root / name]
    try:
        cands += sorted(d / name for d in root.iterdir()
                        if d.is_dir() and not d.name.startswith((".", "__MACOSX")))
    except OSError:
        pass
    for path in dict.fromkeys(cands):
        if not (path.is_file() or path.is_symlink()):
            continue
        if path.is_symlink():
            try:
                target = path.resolve()
            except OSError:
                return None, f"{rel} is a broken symbolic link"
            if root.resolve() not in target.parents:
                return None, f"{rel} is a symbolic link to a file outside the submission"
        size = path.stat().st_size
        if size == 0:
            return None, f"{rel} is empty"
        if size > MAX_SOURCE_BYTES:
            return None, f"{rel} is {size:,} bytes; the limit is {MAX_SOURCE_BYTES:,}"
        return path, ""
    return None, f"{rel} is not in the submission"


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
    path, problem = find_submission_file(root, cfg.answers_file)
    text = None
    if path is not None:
        text, problem = _read_text(path, MAX_ANSWERS_BYTES)
    if text is None:
        hint = " (start from starter/occupancy/answers.yaml)" if "not in the submission" in problem else ""
        return Answers(error=f"{problem}{hint}; every item that reads the answers needs it"), None
    return parse_answers(text, answer_schema(cfg), filename=cfg.answers_file), path


# ---------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------
@dataclass
class Build:
    label: str  # "default", "r255", ..., "exe"
    cap: int | None
    output: Path
    proc: ProcRecord | None = None
    ok: bool = False
    problem: str = ""
    kernels: dict[str, KernelResources] = field(default_factory=dict)


def _copy_folder(src_dir: Path, dest: Path) -> None:
    """The plain files (no links, no subfolders) of the program's folder: its headers."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in src_dir.iterdir():
        try:
            if entry.is_file() and not entry.is_symlink() and entry.stat().st_size <= MAX_SOURCE_BYTES:
                shutil.copyfile(entry, dest / entry.name)
        except OSError:
            continue


def nvcc_command(nvcc, arch_flags: list[str], source: str, output: Path, *, cubin: bool,
                 cap: int | None = None) -> list[str]:
    cmd = [nvcc.path]
    if cubin:
        cmd += ["-cubin", *arch_flags, "-O3", "-Xptxas", "-v"]
    else:
        cmd += ["-O2", *arch_flags]
    if cap is not None:
        cmd += [f"-maxrregcount={cap}", f"-DREGCAP={cap}"]
    cmd += [f"-I{d}" for d in getattr(nvcc, "include_dirs", []) or []]
    return cmd + ["-o", str(output), source]


def _trim(text: str, limit: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def _compile(build: Build, cmd: list[str], cwd: Path, env: dict, timeout_s: float, file: str,
             need: tuple[str, ...]) -> Build:
    proc = sandbox.run(cmd, timeout_s=timeout_s, cwd=str(cwd), env=env, output_limit=64_000)
    proc.command = [Path(cmd[0]).name, *cmd[1:]]
    build.proc = proc
    what = f"{file} (-maxrregcount={build.cap})" if build.cap is not None else file
    if not proc.ok or not build.output.is_file():
        build.problem = f"{what} did not compile: nvcc {proc.brief()}:\n{_trim(proc.stderr or proc.stdout)}"
        return build
    report = proc.stderr + "\n" + proc.stdout
    build.kernels = parse_ptxas(report)
    missing = [k for k in need if k not in build.kernels]
    if missing:
        found = entry_names(report)
        hint = ""
        if any(m in f for m in missing for f in found):
            hint = ' (the name is C++-mangled: declare it extern "C" __global__)'
        build.problem = (f"{file} has no kernel named " + ", ".join(f"`{m}`" for m in missing)
                         + f"; found: {', '.join(found) or 'no kernels'}{hint}")
        return build
    build.ok = True
    return build


def build_all(src: Path, cfg: OccupancyConfig, nvcc, arch_flags: list[str], work: Path,
              timeout_s: float, with_gpu: bool) -> dict[str, Build]:
    """Compile the program: a cubin per register cap (always), plus the default cubin and
    the host program when there is a GPU to run them on. In parallel; never raises."""
    build_dir = work / "build"
    if build_dir.exists():
        shutil.rmtree(build_dir, ignore_errors=True)
    _copy_folder(src.parent, build_dir)
    env = dict(os.environ)
    env.update(getattr(nvcc, "env", {}) or {})
    prog = cfg.program
    jobs: dict[str, tuple[Build, list[str], tuple[str, ...]]] = {}
    for cap in cfg.ex6.register_caps:
        b = Build(f"r{cap}", cap, build_dir / f"occ_r{cap}.cubin")
        jobs[b.label] = (b, nvcc_command(nvcc, arch_flags, src.name, b.output, cubin=True, cap=cap),
                         (prog.heavy_kernel,))
    if with_gpu:
        b = Build("default", None, build_dir / "occ_default.cubin")
        jobs[b.label] = (b, nvcc_command(nvcc, arch_flags, src.name, b.output, cubin=True),
                         (prog.work_kernel,))
        b = Build("exe", None, build_dir / "occ")
        jobs[b.label] = (b, nvcc_command(nvcc, arch_flags, src.name, b.output, cubin=False), ())
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {label: pool.submit(_compile, b, cmd, build_dir, env, timeout_s, cfg.program_file, need)
                   for label, (b, cmd, need) in jobs.items()}
    return {label: f.result() for label, f in futures.items()}


def ptxas_measurements(builds: dict[str, Build], cfg: OccupancyConfig) -> tuple[dict | None, str | None]:
    """(``{cap: heavy's KernelResources}``, None) or (None, the first build's problem)."""
    out = {}
    for cap in cfg.ex6.register_caps:
        b = builds.get(f"r{cap}")
        if b is None or not b.ok:
            return None, (b.problem if b else f"-maxrregcount={cap} was not built")
        out[cap] = b.kernels[cfg.program.heavy_kernel]
    return out, None


# ---------------------------------------------------------------------------------------
# The student's program
# ---------------------------------------------------------------------------------------
_NON_JSON_NUMBER = re.compile(r"(?<=[:\[,\s])[-+]?(?:nan|inf(?:inity)?)(?=\s*[,\]\}])", re.I)


def parse_program_output(stdout: str) -> tuple[dict | None, str | None]:
    """The program's JSON document from its stdout: (document, None) or (None, why not).

    Lenient about text before the document and about C's ``nan``/``inf`` (read as null);
    strict about it being one JSON object.
    """
    text = stdout.strip()
    if not text:
        return None, "the program printed nothing on stdout (expected one JSON document)"
    start = text.find("{")
    if start < 0:
        return None, f"the program's stdout holds no JSON object: {_trim(text, 300)}"
    decoder = json.JSONDecoder()
    body = _NON_JSON_NUMBER.sub("null", text[start:])
    try:
        doc, end = decoder.raw_decode(body)
    except ValueError as exc:
        line = body.count("\n", 0, getattr(exc, "pos", 0) or 0) + 1
        return None, (f"the program's output is not valid JSON (line {line} of the document: "
                      f"{getattr(exc, 'msg', exc)})")
    except RecursionError:
        return None, "the program's output is nested too deeply to be the documented format"
    if not isinstance(doc, dict):
        return None, f"the program's output is a JSON {type(doc).__name__}, not an object"
    return doc, None


def run_program(exe: Path, work: Path,
                timeout_s: float | None = None) -> tuple[dict | None, str | None, ProcRecord | None]:
    """Run the student's program (all sections); (document, problem, process record)."""
    timeout_s = timeout_s or PROGRAM_TIMEOUT_S
    user = os.environ.get(STUDENT_USER_VAR) or None
    if user:
        for path, mode in ((work, 0o755), (exe.parent, 0o755), (exe, 0o755)):
            try:
                os.chmod(path, mode)
            except OSError:
                pass
    try:
        proc = sandbox.run([str(exe)], timeout_s=timeout_s, cwd=str(exe.parent),
                           output_limit=PROGRAM_OUTPUT_LIMIT, user=user)
    except ValueError as exc:  # an unknown user: the grader's set-up, not the student's
        return None, f"not evaluated: the program could not be started ({exc})", None
    if proc.timed_out:
        return None, (f"the program did not finish within {timeout_s:g} s (look for a kernel or loop "
                      f"that never ends); its last output:\n{_trim(proc.stderr or proc.stdout, 600)}"), proc
    if proc.returncode is None:
        return None, f"not evaluated: the program could not be started: {_trim(proc.stderr, 300)}", proc
    if proc.returncode != 0:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        msg = f"the program ended with {proc.brief()}" + (f": {lines[-1][:200]}" if lines else "")
        if len(lines) > 1:
            msg += "\nits stderr ends with:\n" + _trim(proc.stderr, 800)
        return None, msg, proc
    if proc.stdout_bytes > PROGRAM_OUTPUT_LIMIT:
        return None, (f"the program printed {proc.stdout_bytes:,} bytes on stdout; the grader reads at "
                      f"most {PROGRAM_OUTPUT_LIMIT:,} (print the JSON document only; tables go to "
                      f"stderr)"), proc
    doc, problem = parse_program_output(proc.stdout)
    if doc is not None and doc.get("format") not in (None, "occupancy-v1"):
        problem, doc = (f"the program's output has format {doc.get('format')!r}; expected "
                        f"\"occupancy-v1\""), None
    return doc, problem, proc


# ---------------------------------------------------------------------------------------
# The grader's own measurements (trusted child)
# ---------------------------------------------------------------------------------------
def child_spec(cfg: OccupancyConfig, builds: dict[str, Build]) -> dict:
    """What :mod:`grader.children.occupancy` measures, from the rubric and the builds."""
    e4, e6 = cfg.ex4, cfg.ex6
    return {
        "source": cfg.program_file,
        "work_kernel": cfg.program.work_kernel,
        "heavy_kernel": cfg.program.heavy_kernel,
        "cubin": str(builds["default"].output) if "default" in builds and builds["default"].ok else None,
        "work_problem": (builds["default"].problem if "default" in builds else "not built") or None,
        "n": ARRAY_N,
        "api_points": [list(p) for p in api_points(cfg)],
        "potential_smem": cfg.ex2.dynamic_smem,
        "sweeps": {"smem": [[e4.smem_block_size, s] for s in e4.smem_points],
                   "block": [[b, e4.block_smem] for b in e4.block_points],
                   "total_threads": SWEEP_TOTAL_THREADS, "iters": SWEEP_ITERS, **SWEEP_TIMING},
        "heavy": {"block": e6.block_size, "iters": HEAVY_ITERS, "total_threads": HEAVY_TOTAL_THREADS,
                  "cubins": {str(cap): str(builds[f"r{cap}"].output) for cap in e6.register_caps
                             if f"r{cap}" in builds and builds[f"r{cap}"].ok},
                  **HEAVY_TIMING},
    }


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


_PARTS = ("api", "sweeps", "heavy")
# Which measurement parts an error in a child's phase leaves missing.
_PHASE_PARTS = {"setup": _PARTS, "load": ("api", "sweeps"), "api": ("api", "sweeps"),
                "sweeps": ("sweeps",), "heavy": ("heavy",)}


def apply_child_report(meas: Measurements, report: dict | None, proc: ProcRecord | None) -> None:
    """Fill ``meas`` from the child's report; say in ``meas.gpu_problems`` what is missing."""
    report = report or {}
    problems: dict[str, list[str]] = {}

    def add(parts, message: str) -> None:
        for part in parts:
            problems.setdefault(part, [])
            if message not in problems[part]:
                problems[part].append(message)

    for err in report.get("errors", []):
        msg = str(err.get("message", "")).strip()
        if not err.get("student"):
            msg = "not evaluated: the grader's GPU measurements failed: " + msg
        add(_PHASE_PARTS.get(err.get("phase"), _PARTS), msg)

    phase = report.get("phase")
    if proc is not None and not proc.ok and phase != "finished":
        if not report:
            add(_PARTS, f"not evaluated: the grader's GPU measurement process failed ({proc.brief()}): "
                        f"{_trim(proc.stderr or proc.stdout, 400)}")
        elif phase in ("setup", "load", "api"):
            add(_PHASE_PARTS[phase], f"not evaluated: the grader's GPU measurement process {proc.brief()} "
                                     f"while {phase}: {_trim(proc.stderr, 400)}")
        else:
            kernel = "heavy" if phase == "heavy" else "work"
            if proc.timed_out:
                msg = (f"the grader's run of your `{kernel}` kernel did not finish within {proc.timeout_s:g} s "
                       f"(look for a loop that never ends)")
            else:
                msg = f"the grader's run of your `{kernel}` kernel ended abnormally ({proc.brief()})"
            add(_PHASE_PARTS[phase] if phase == "heavy" else ("sweeps", "heavy"), msg)

    meas.api = report.get("api")
    sweeps = report.get("sweep_times")
    if isinstance(sweeps, dict):
        meas.sweep_times = {name: {int(k): float(v) for k, v in (sweeps.get(name) or {}).items()}
                            for name in ("smem", "block")}
    heavy = report.get("heavy_times_ms")
    if isinstance(heavy, dict) and "heavy" not in problems:
        meas.heavy_times_ms = {int(k): float(v) for k, v in heavy.items()}
    for part in _PARTS:
        if part in problems:
            msgs = problems[part]
            students = [m for m in msgs if not m.startswith("not evaluated")]
            meas.gpu_problems[part] = "\n".join(students) if students else msgs[0]
        elif part == "api" and meas.api is None:
            meas.gpu_problems[part] = "not evaluated: the grader's Occupancy API calls did not run"
        elif part == "sweeps" and meas.sweep_times is None:
            meas.gpu_problems[part] = "not evaluated: the grader's re-run of the sweeps did not run"
        elif part == "heavy" and meas.heavy_times_ms is None:
            meas.gpu_problems[part] = "not evaluated: the grader's timing of heavy did not run"


def run_child(cfg: OccupancyConfig, builds: dict[str, Build], work: Path,
              timeout_s: float | None = None) -> tuple[dict | None, ProcRecord]:
    """Run :mod:`grader.children.occupancy` on the builds; (its report or None, the process)."""
    spec_path, out_path = work / "gpu_spec.json", work / "gpu_report.json"
    out_path.unlink(missing_ok=True)
    spec_path.write_text(json.dumps(child_spec(cfg, builds), indent=1))
    proc = sandbox.run([sys.executable, "-m", "grader.children.occupancy", str(spec_path), str(out_path)],
                       timeout_s=timeout_s or CHILD_TIMEOUT_S, cwd=str(work), env=child_env(),
                       output_limit=20_000)
    try:
        report = json.loads(out_path.read_text())
    except (OSError, ValueError):
        report = None
    return report, proc


# ---------------------------------------------------------------------------------------
# The whole flow
# ---------------------------------------------------------------------------------------
def _not_evaluated_reason(env) -> str:
    reason = (getattr(env, "device_reason", "") or "").strip()
    if not reason:
        return NO_DEVICE
    return reason if reason.lower().startswith("not evaluated") else f"not evaluated: {reason}"


def _config_problem(exc: Exception) -> list[ItemResult]:
    return [ItemResult(stage=STAGE, item="config", title="Occupancy exercises", status=NOT_EVALUATED,
                       score=0.0, max_score=0.0, message=f"not evaluated: the rubric's occupancy "
                       f"section is invalid: {exc}", visibility="hidden")]


def _internal_error(cfg: OccupancyConfig, tb: str) -> list[ItemResult]:
    msg = ("not evaluated: the grader failed while grading the occupancy exercises (not a judgement "
           "of your work; course staff have the details)")
    return [ItemResult(stage=STAGE, item=spec.id, title=spec.title, status=NOT_EVALUATED, score=0.0,
                       max_score=spec.points, message=msg, visibility=spec.visibility,
                       number=spec.number, values={"traceback": tb[-4000:]})
            for spec in cfg.items.values()]


def grade_occupancy_submission(root: Path, rubric, env, work: Path,
                               progress: Progress = lambda _msg: None) -> list[ItemResult]:
    """Every occupancy item for the submission at ``root``; never raises."""
    try:
        cfg = load_occupancy_config(rubric.extra["occupancy"],
                                    where=f"{getattr(rubric, 'source', 'rubric.yaml')}.occupancy")
    except (RubricError, KeyError, TypeError) as exc:
        return _config_problem(exc)
    try:
        return _grade(cfg, Path(root), rubric, env, Path(work), progress)
    except Exception:  # the grader's own bug: every item says so, nothing crashes
        return _internal_error(cfg, traceback.format_exc())


def _grade(cfg: OccupancyConfig, root: Path, rubric, env, work: Path, progress: Progress) -> list[ItemResult]:
    t0 = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    log: dict[str, Any] = {"submission": str(root), "steps": {}}
    answers, answers_path = load_answers(root, cfg)
    log["answers_file"] = str(answers_path) if answers_path else None
    log["answers_notes"] = answers.notes

    has_gpu = bool(getattr(env, "has_gpu", False))
    meas = Measurements(device_available=has_gpu,
                        no_device_reason=NO_DEVICE if has_gpu else _not_evaluated_reason(env))
    src, src_problem = find_submission_file(root, cfg.program_file)
    if src is not None:
        meas.program_source, read_problem = _read_text(src, MAX_SOURCE_BYTES)
        if meas.program_source is None:
            src, src_problem = None, read_problem
    log["program_file"] = str(src) if src else None

    nvcc = getattr(env, "nvcc", None)
    has_nvcc = nvcc is not None and getattr(nvcc, "path", None) is not None
    builds: dict[str, Build] = {}
    if src is None:
        meas.ptxas_problem = meas.program_problem = src_problem
        for part in ("api", "sweeps", "heavy"):
            meas.gpu_problems[part] = src_problem
    elif not has_nvcc:
        reason = getattr(nvcc, "reason", "") or "nvcc not found"
        meas.no_compiler_reason = f"not evaluated: no CUDA compiler ({reason})"
        if has_gpu:  # nothing can be built, so nothing can run
            meas.device_available = False
            meas.no_device_reason = meas.no_compiler_reason
    else:
        progress("occupancy: compiling occ.cu")
        timeout = min(COMPILE_TIMEOUT_S, float(getattr(getattr(rubric, "timeouts", None), "compile_s",
                                                       COMPILE_TIMEOUT_S)))
        tb = time.monotonic()
        builds = build_all(src, cfg, nvcc, list(getattr(env, "arch_flags", []) or []), work, timeout,
                           with_gpu=has_gpu)
        log["steps"]["compile_s"] = round(time.monotonic() - tb, 2)
        log["builds"] = {k: {"ok": b.ok, "problem": b.problem, "command": b.proc.command if b.proc else None,
                             "wall_s": b.proc.wall_s if b.proc else None,
                             "kernels": {n: vars(r) for n, r in b.kernels.items()}}
                         for k, b in builds.items()}
        meas.ptxas, meas.ptxas_problem = ptxas_measurements(builds, cfg)

    if meas.device_available and src is not None:
        exe, default = builds.get("exe"), builds.get("default")
        if exe is not None and exe.ok:
            progress("occupancy: running the program")
            tr = time.monotonic()
            meas.program, meas.program_problem, proc = run_program(exe.output, work)
            log["steps"]["program_s"] = round(time.monotonic() - tr, 2)
            log["program"] = meas.program
            log["program_problem"] = meas.program_problem
            if proc is not None:
                log["program_stderr"] = _trim(proc.stderr, 4000)
        else:
            meas.program_problem = exe.problem if exe else "the program was not built"
        if default is not None and (default.ok or meas.ptxas is not None):
            progress("occupancy: the grader's own measurements")
            tc = time.monotonic()
            report, cproc = run_child(cfg, builds, work)
            log["steps"]["gpu_child_s"] = round(time.monotonic() - tc, 2)
            log["gpu_report"] = report
            log["gpu_child"] = {"brief": cproc.brief(), "stderr": _trim(cproc.stderr, 2000)}
            apply_child_report(meas, report, cproc)
        else:
            problem = default.problem if default else "the program was not built"
            for part in ("api", "sweeps", "heavy"):
                meas.gpu_problems[part] = problem

    results = grade_occupancy(cfg, answers, meas)
    results = _attach_plot(results, cfg, meas, work, log)
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


def _attach_plot(results: list[ItemResult], cfg: OccupancyConfig, meas: Measurements, work: Path,
                 log: dict) -> list[ItemResult]:
    """Draw the sweeps and name the PNG in the Ex 4 conclusion items' messages."""
    if not meas.device_available or (meas.api is None and meas.sweep_times is None):
        return results
    e4 = cfg.ex4
    series = sweep_series(meas.api, meas.sweep_times, meas.program,
                          [(e4.smem_block_size, s) for s in e4.smem_points],
                          [(b, e4.block_smem) for b in e4.block_points])
    log["plot_series"] = series
    name = (meas.api or {}).get("device", {}).get("name", "")
    path, note = plot_sweeps(work / PLOT_FILE, series, title=f"Occupancy vs run time ({name})".replace(" ()", ""))
    log["plot"] = str(path) if path else note
    line = f"Plot of occupancy and run time for both sweeps: {path}" if path else f"({note})"
    for r in results:
        if r.item in ("ex4.smem_conclusion", "ex4.block_conclusion"):
            r.message = (r.message + "\n" + line) if r.message else line
            if path:
                r.values["plot"] = str(path)
    return results

