"""``python -m grader.deploy.gradescope run``: grade one submission the way Gradescope does.

``run_autograder`` calls this (and writes a fallback results.json if it never returns). Steps:

1. ``python -m grader grade`` grades the submission in a child process of its own (the command line
   the batch's children get, grader/deploy/batch/pool.py: child_command), into a private folder beside
   results.json, under a time limit: run_autograder's deadline less the bridge's margin. The child is in
   its own session and is killed with its whole tree on its time limit or when this process gets
   SIGTERM (grader/sandbox/process.py: run_process). Its files but its own results.json join the
   results folder.
2. The child's grading.json is read back into a typed :class:`~grader.grading.Grading`; results.json's
   record (grader/evidence/results.py: Results) is built from it in memory (grader/outputs/write.py:
   results_for), the no-GPU policy (:mod:`.policy`) applied to it and, when the package names a GPU
   grading service, the service's verdicts merged into it (:mod:`.bridge`: bridge_results), each step
   returning the changed record.
3. results.json is written once, at the end (grader/outputs/results.py: write_results). Whatever
   failed (the child crashed, timed out, was stopped, wrote no or a broken grading.json; the policy
   or the service), it is still written once, saying what failed: an "autograder error" item when
   there is no grading, a sentence on top when a later step failed over a valid grading.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from grader.deploy.batch.pool import DEFAULT_TIMEOUT_S, LOG_LIMIT, Options, child_command, child_env
from grader.deploy.gradescope.bridge import MARGIN_S, URL_KEY, bridge_results, run_deadline
from grader.deploy.gradescope.metadata import SubmissionMetadata
from grader.deploy.gradescope.policy import CONFIG_FILE, apply_no_gpu_policy, read_config, resolve_policy
from grader.evidence.results import Results, ResultsExtra
from grader.grading import Grading, GradingFormatError, load_grading
from grader.model import ProcRecord
from grader.outputs.results import error_results, write_results
from grader.outputs.summary import summary_markdown
from grader.outputs.write import results_for
from grader.sandbox import guard as sandbox
from grader.sandbox.process import Control
from grader.untrusted.export import Submission
from grader.untrusted.safe_copy import remove_tree

LIMIT_KEY = "GRADER_TIME_LIMIT_S"  # run_autograder's limit for this whole run (when it has no deadline to say)
MIN_CHILD_S = 1.0  # the child's limit when the deadline is nearer than the margin: it is started, and stopped
GRADING_LIMIT = 64 * 2**20  # bytes of the child's grading.json read back (a normal one is a few hundred KiB)
SUMMARY_LIMIT = 4 * 2**20  # bytes of its summary.md
LOG_TAIL = 4000  # characters of the child's output quoted in an error item (all of it goes to the log)
CHILD_FOLDER_PREFIX = ".grading-"  # the child's --out, inside the results folder (renamed away at the end)


def _env_flag(value: str | None, default: bool) -> bool:
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


@dataclass
class Settings:
    """What one run grades with: the environment first, then the package's gradescope.env."""

    rubric: Path
    use_gpu: bool
    stages: str | None
    limit_s: float  # the child's wall-clock limit
    service: bool  # the package names a GPU grading service


def settings(source_dir: Path, env: Mapping[str, str], now: float | None = None) -> Settings:
    config = read_config(source_dir / CONFIG_FILE)

    def setting(key: str) -> str | None:
        return env.get(key) if env.get(key) is not None else config.get(key)

    return Settings(rubric=Path(setting("GRADER_RUBRIC") or source_dir / "rubric.yaml"),
                    use_gpu=_env_flag(setting("GRADER_USE_GPU"), True),
                    stages=setting("GRADER_STAGES") or None,
                    limit_s=child_limit(env, setting(LIMIT_KEY), now),
                    service=bool(setting(URL_KEY)))


def child_limit(env: Mapping[str, str], limit: str | None, now: float | None = None) -> float:
    """The child's time limit: up to run_autograder's deadline (``GRADER_RUN_DEADLINE``) less the bridge's
    margin (the merge and the write must still fit before run_autograder's own kill), else
    ``GRADER_TIME_LIMIT_S``, else the batch's default."""
    deadline = run_deadline(env)
    if deadline is not None:
        return max(MIN_CHILD_S, deadline - (time.time() if now is None else now) - MARGIN_S)
    try:
        seconds = float(limit or "nan")
    except ValueError:
        seconds = float("nan")
    return seconds if 0 < seconds < float("inf") else DEFAULT_TIMEOUT_S


@dataclass
class ChildRun:
    """How the grading child ended, and what of it can be used."""

    proc: ProcRecord
    stopped: bool  # this process got SIGTERM while the child ran
    grading: Grading | None = None
    summary: str = ""
    problem: str = ""  # why there is no grading ("" when there is one)
    moved: list[str] = field(default_factory=list)  # the child's files now in the results folder


def _bounded(path: Path, limit: int) -> Path:
    """``path``, if it is a file of at most ``limit`` bytes (read whole afterwards); else GradingFormatError."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise GradingFormatError(f"{path.name}: cannot read it ({exc.strerror or exc})") from None
    if size > limit:
        raise GradingFormatError(f"{path.name}: {size} bytes, more than the {limit} read back")
    return path


def _tail(proc: ProcRecord) -> str:
    text = (proc.stderr.strip() or proc.stdout.strip())
    return text[-LOG_TAIL:] if text else "(it printed nothing)"


def _what_failed(proc: ProcRecord, stopped: bool, limit_s: float) -> str:
    """The sentence that names how the child failed, for the error item."""
    name = "the grader (python -m grader grade)"
    if stopped:
        return (f"The grader did not finish within its time limit of {limit_s:g} seconds and was stopped: this run "
                f"got SIGTERM (run_autograder's limit) while {name} ran; it was killed with everything it started.")
    if proc.timed_out:
        return (f"The grader did not finish within its time limit of {limit_s:g} seconds: {name} was stopped and "
                "killed with everything it started.")
    if proc.returncode is None:
        return f"{name} could not be started: {proc.stderr}"
    if proc.returncode < 0:
        return f"{name} was killed by signal {-proc.returncode} ({signal.Signals(-proc.returncode).name})."
    if proc.returncode == 2:
        return f"{name} refused to grade (exit code 2: bad usage or an invalid rubric)."
    return f"{name} stopped with exit code {proc.returncode} (its own failure)."


def _adopt(child_out: Path, results_dir: Path) -> list[str]:
    """Move the child's files (summary.md, grading.json, the plots...) into the results folder, all but
    its results.json: the one results.json there is this run's."""
    moved = []
    for entry in sorted(child_out.iterdir()):
        if entry.name == "results.json":
            continue
        target = results_dir / entry.name
        if target.is_dir() and not target.is_symlink():
            remove_tree(target, ignore_errors=True)
        os.replace(entry, target)
        moved.append(entry.name)
    return moved


def gradescope_submitters(autograder: Path | None = None) -> dict | None:
    """The submitters of this submission from Gradescope's submission_metadata.json, in the export's form
    ({":submitters": [{":name", ":sid", ":email"}]}): who the occupancy variants are drawn for."""
    folder = autograder or Path(os.environ.get("GRADER_AUTOGRADER_DIR") or "/autograder")
    people = [{":name": u.get("name"), ":sid": u.get("sid"), ":email": u.get("email")}
              for u in SubmissionMetadata.read(folder).users]
    return {":submitters": people} if people else None


def grade_in_child(submission: Path, results_dir: Path, s: Settings, control: Control) -> ChildRun:
    """Run ``python -m grader grade`` on ``submission`` and read back what it wrote (never raises for the
    child's failure)."""
    child_out = Path(tempfile.mkdtemp(prefix=CHILD_FOLDER_PREFIX, dir=results_dir))
    try:
        cmd = child_command(Submission(submission.name, submission, gradescope_submitters()), child_out,
                            Options(rubric=s.rubric, use_gpu=s.use_gpu, stages=s.stages))
        print(f"grading (limit {s.limit_s:.0f} s): {' '.join(cmd)}", flush=True)
        proc = sandbox.run(cmd, timeout_s=s.limit_s, env=child_env(None), output_limit=LOG_LIMIT, control=control)
        stopped = control.cancel.is_set()
        print(f"--- the grader's output ({proc.brief()}, {proc.wall_s:.1f} s) ---\n{proc.stdout}"
              f"{proc.stderr}\n--- end of the grader's output ---", flush=True)
        run = ChildRun(proc, stopped)
        if stopped or not proc.ok:
            run.problem = _what_failed(proc, stopped, s.limit_s) + "\n\nIts output ends:\n" + _tail(proc)
            return run
        try:
            run.grading = load_grading(_bounded(child_out / "grading.json", GRADING_LIMIT))
        except GradingFormatError as exc:
            run.problem = (f"The grader (python -m grader grade) finished but its grading.json cannot be used: {exc}"
                           "\n\nIts output ends:\n" + _tail(proc))
            return run
        try:
            run.summary = _bounded(child_out / "summary.md", SUMMARY_LIMIT).read_text(encoding="utf-8", errors="replace")
        except (GradingFormatError, OSError):  # the table is rebuilt from the record (without the plots' links)
            run.summary = summary_markdown(run.grading)
        run.moved = _adopt(child_out, results_dir)
        return run
    finally:
        remove_tree(child_out, ignore_errors=True)


def _with_policy(results: Results, grading: Grading, s: Settings, source_dir: Path,
                 env: Mapping[str, str]) -> Results:
    """``results`` under the no-GPU policy; a policy that cannot be applied is said on top."""
    try:
        policy, where = resolve_policy(source_dir, s.rubric, env)
        results = apply_no_gpu_policy(results, {"device_reason": grading.env.device_reason}, policy,
                                      service=s.service)
    except ValueError as exc:  # a misspelt policy: the grader's own "not evaluated" items stay
        results = dataclasses.replace(results, output=(
            f"> **The no-GPU policy was not applied**: {exc}. Items that need a GPU show the "
            "grader's own words. Please tell course staff.\n\n" + results.output))
        where = f"not applied: {exc}"
    return dataclasses.replace(results, extra_data=dataclasses.replace(results.extra_data or ResultsExtra(),
                                                                        no_gpu_policy_source=where))


def results_of(run: ChildRun, submission: Path, results_dir: Path, source_dir: Path, s: Settings,
               env: Mapping[str, str], stopped: threading.Event, started: float) -> Results:
    """results.json's record for this run (in memory): the grading with its policy and the service's
    verdicts, or the error item naming what failed."""
    if run.grading is None:
        return error_results(run.problem, time.monotonic() - started)
    results = _with_policy(results_for(run.grading, run.summary), run.grading, s, source_dir, env)
    if stopped.is_set():  # SIGTERM after the grading: no time for the service; the grading stands
        results = dataclasses.replace(results, output=(
            "> **GPU grading was not asked for**: this run was stopped (SIGTERM) after the "
            "static grading.\n\n" + results.output))
    else:
        results, _ = bridge_results(results, results_dir, submission, source_dir, env)
    extra = results.extra_data or ResultsExtra()
    print(f"score {results.score} (no-GPU policy {extra.no_gpu_policy or 'n/a'}, "
          f"pending GPU items {extra.pending_gpu_items or 0})", flush=True)
    return results


def run(submission: Path, results_dir: Path, source_dir: Path, env: Mapping[str, str] | None = None) -> int:
    """Grade ``submission`` into ``results_dir/results.json`` (written once, whatever happens); 0, or the
    child's exit code when it failed (1 when it timed out, was stopped or never started)."""
    started = time.monotonic()
    env = os.environ if env is None else env
    # Absolute: the child and the service step must name the same folders whatever their working folder.
    submission, results_dir, source_dir = (Path(p).absolute() for p in (submission, results_dir, source_dir))
    control = Control()  # SIGTERM cancels the child: run_process then kills its whole tree
    previous = signal.signal(signal.SIGTERM, lambda _sig, _frame: control.cancel.set())
    code = 1
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        s = settings(source_dir, env)
        child = grade_in_child(submission, results_dir, s, control)
        rc = child.proc.returncode
        code = 0 if child.grading is not None else rc if rc is not None and rc > 0 else 1
        results = results_of(child, submission, results_dir, source_dir, s, env, control.cancel, started)
    except Exception:  # this run's own bug: said in the staff-only item, never left as a bare traceback
        results = error_results("The Gradescope run (python -m grader.deploy.gradescope run) failed:\n"
                                + traceback.format_exc(), time.monotonic() - started)
        code = code or 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    try:
        write_results(results_dir / "results.json", results)
    except (OSError, ValueError, TypeError) as exc:  # run_autograder's fallback says it then
        print(f"error: could not write {results_dir / 'results.json'}: {exc}", file=sys.stderr, flush=True)
        return code or 1
    return code
