"""The Gradescope bridge: the GPU items of a Gradescope run, graded by the course's grading service.

``run_autograder`` grades statically (Gradescope has no GPU) and applies the no-GPU policy; then,
when the package was built with a service URL (``build --service-url URL --service-secret-file F
--assignment NAME``), :func:`bridge_if_configured`:

1. zips the submission deterministically (:func:`grader.serve.client.make_archive`: the same files
   give the same bytes, so the service's dedup answers a regrade with the stored job) and posts it,
   signed with the assignment's secret, with Gradescope's submission id when known;
2. waits for the job within the run's time limit (``GRADER_RUN_DEADLINE``, set by run_autograder,
   less :data:`MARGIN_S`);
3. merges: every item the static run left pending GPU grading takes the service's name, score,
   status and output; the leaderboard comes from the service's grading; the summary on top links
   to the job's page (the plots, the per-stage table).

A service test the service could not evaluate for want of a GPU is never merged: its item stays
pending. A job the service graded without a GPU (``serve --no-gpu``, or a worker whose CuPy could not
reach its GPU: the job's ``without_gpu``) is not merged at all: the state is ``without_gpu``, every GPU
item stays pending and the sentence on top says so, never "GPU results merged".

If the service cannot be reached, refuses, fails or is slow, the static results stay exactly as
they are (pending policy) with one sentence on top saying so; a slow job stays queued there and a
later Regrade posts the same archive, gets the stored job back and merges without grading again.
Nothing here raises: every outcome is a :class:`Outcome` record written into ``extra_data.gpu_service``.
"""
from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grader.deploy.gradescope.policy import CONFIG_FILE, is_gpu_item, read_config

SECRET_FILE = "service.secret"  # in the package's root, mode 0600: readable by the grader (root) only
URL_KEY, ASSIGNMENT_KEY, WAIT_KEY = "GRADER_SERVICE_URL", "GRADER_SERVICE_ASSIGNMENT", "GRADER_SERVICE_WAIT_S"
DEADLINE_KEY = "GRADER_RUN_DEADLINE"  # unix seconds at which run_autograder stops the grader
MARGIN_S = 45.0  # left under the deadline for the downloads, the merge, the write and the kill-after
STOP_S = 10.0  # no request lasts past the deadline less this (a slow service: the merge and write still fit)
DEFAULT_WAIT_S = 240.0  # without a deadline (the run command called by hand)
SERVICE_FOLDER = "gpu-service"  # the service's own files, kept beside results.json for staff


@dataclass
class BridgeConfig:
    url: str
    assignment: str
    secret: bytes
    wait_s: float | None = None


@dataclass
class Outcome:
    """What happened, for extra_data.gpu_service and the log (typed: tests and people read the state)."""

    state: str  # merged | without_gpu | queued | running | failed | refused | unreachable | misconfigured | skipped
    reason: str = ""
    job: str | None = None
    url: str | None = None
    deduplicated: bool = False
    merged_items: int = 0
    still_pending: int = 0
    files: list[str] = field(default_factory=list)


def read_bridge_config(source_dir: Path, env: Mapping[str, str]) -> BridgeConfig | None | str:
    """The service settings (environment first, then gradescope.env), None when there is no service
    URL, or a sentence saying what is wrong with them."""
    config = read_config(Path(source_dir) / CONFIG_FILE)

    def get(key: str) -> str:
        return (env.get(key) or config.get(key) or "").strip()

    url = get(URL_KEY)
    if not url:
        return None
    assignment = get(ASSIGNMENT_KEY)
    from grader.serve.signing import read_secret

    try:
        secret = read_secret(Path(source_dir) / SECRET_FILE)
    except (OSError, ValueError) as exc:
        return f"the package has a service URL but its {SECRET_FILE} cannot be read ({exc})"
    if not secret or not assignment:
        return f"the package has a service URL but no {'secret' if not secret else 'assignment name'}"
    wait = get(WAIT_KEY)
    try:
        wait_s = float(wait) if wait else None
    except ValueError:
        return f"{WAIT_KEY}={wait!r} is not a number of seconds"
    return BridgeConfig(url, assignment, secret, wait_s)


def run_deadline(env: Mapping[str, str]) -> float | None:
    """When run_autograder stops the grader (unix seconds), if it said."""
    try:
        deadline = float(env.get(DEADLINE_KEY) or "nan")
    except ValueError:
        return None
    return deadline if deadline == deadline else None  # NaN: not set


def wait_budget(config: BridgeConfig, env: Mapping[str, str], now: float | None = None) -> float:
    """Seconds to wait for the job: up to the run's deadline less MARGIN_S, and at most GRADER_SERVICE_WAIT_S."""
    now = time.time() if now is None else now
    budget = config.wait_s if config.wait_s is not None else DEFAULT_WAIT_S
    deadline = run_deadline(env)
    if deadline is not None:
        left = deadline - now - MARGIN_S
        budget = left if config.wait_s is None else min(budget, left)
    return max(0.0, budget)


def pending_tests(results: Mapping[str, Any]) -> list[dict]:
    """The tests the static run left for a GPU (marked by the pending policy, or with policy keep by the
    grader) and no service verdict merged since."""
    out = []
    for t in results.get("tests") or []:
        extra = t.get("extra_data") if isinstance(t, dict) else None
        if not isinstance(extra, dict) or extra.get("gpu_service_job"):  # merged: the service's verdict stands
            continue
        if extra.get("pending_gpu") is True or is_gpu_item(t):
            out.append(t)
    return out


def submission_id(autograder_dir: Path) -> str | None:
    """Gradescope's id of this submission (submission_metadata.json), recorded by the service."""
    try:
        data = json.loads((Path(autograder_dir) / "submission_metadata.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get("id") if isinstance(data, dict) else None
    return str(value) if isinstance(value, (int, str)) and str(value).isalnum() else None


def submitter(autograder_dir: Path, secret: bytes) -> str | None:
    """Who submitted, as the service may know it: a keyed hash of Gradescope's user ids (all of a
    group's; their emails when no id is given) from submission_metadata.json, never the ids or
    emails themselves (grader/serve/signing.py). None when the metadata names nobody."""
    try:
        data = json.loads((Path(autograder_dir) / "submission_metadata.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    users = data.get("users") if isinstance(data, dict) else None
    ids = []
    for user in users if isinstance(users, list) else []:
        if isinstance(user, dict):
            value = user.get("id") if isinstance(user.get("id"), (int, str)) else user.get("email")
            if isinstance(value, (int, str)) and not isinstance(value, bool) and str(value).strip():
                ids.append(str(value).strip().lower())
    from grader.serve.signing import submitter_id

    return submitter_id(secret, ids) if ids else None


def merge(results: dict, service: Mapping[str, Any], outcome: Outcome,
          leaderboard: list[dict] | None) -> dict:
    """Put the service's verdicts into every pending test of ``results`` (in place; returned).
    Static items are never touched; a pending test the service did not grade, or could not evaluate for
    want of a GPU, stays pending."""
    theirs = {t.get("number"): t for t in service.get("tests") or [] if isinstance(t, dict)}
    merged = 0
    for t in pending_tests(results):
        s = theirs.get(t.get("number"))
        if s is None or is_gpu_item(s):
            continue
        for key in ("name", "score", "max_score", "status", "output", "output_format", "visibility", "tags"):
            if key in s:
                t[key] = s[key]
        extra = dict(s.get("extra_data") or {}) if isinstance(s.get("extra_data"), dict) else {}
        extra.update(gpu_service_job=outcome.job, pending_gpu=False)
        t["extra_data"] = extra
        merged += 1
    left = pending_tests(results)
    outcome.merged_items, outcome.still_pending = merged, len(left)
    results["score"] = round(sum(float(t.get("score") or 0) for t in results.get("tests", [])), 4)
    if leaderboard is not None:
        results["leaderboard"] = leaderboard
    note = (f"> **GPU results merged** from the course's GPU grading service (job `{outcome.job}`): "
            f"{merged} items. The per-stage table with % of cuBLAS, the ladder and roofline plots: {outcome.url}\n")
    if left:
        note += f">\n> {len(left)} items are still pending GPU grading (the service did not grade them).\n"
    results["output"] = note + "\n" + str(service.get("output") or "")
    extra = results.setdefault("extra_data", {})
    if isinstance(extra, dict):
        extra["pending_gpu_items"] = len(left)
        extra["pending_gpu_points"] = sum(float(t["extra_data"].get("pending_gpu_points", t.get("max_score")) or 0)
                                          for t in left)
    return results


def not_merged_note(outcome: Outcome) -> str:
    """The sentence on top of results.json when the GPU items stay pending."""
    later = ("A Regrade later (or submitting the same files again) picks up its results without grading again.")
    if outcome.state in ("queued", "running"):
        return (f"> **GPU grading queued as job `{outcome.job}`** on the course's GPU service ({outcome.reason}); "
                f"its results are not in this score yet. {later} Job page: {outcome.url}\n\n")
    if outcome.state == "without_gpu":
        return (f"> **The GPU service graded without a GPU** (job `{outcome.job}`: {outcome.reason}): "
                f"{outcome.still_pending} items are still pending GPU grading, not part of this score yet. "
                "Please tell course staff; a Regrade once the service has its GPU back grades them.\n\n")
    if outcome.state == "failed":
        return (f"> **GPU grading failed** on the course's GPU service (job `{outcome.job}`): {outcome.reason} "
                "Please tell course staff.\n\n")
    if outcome.state == "misconfigured":
        return (f"> **GPU grading could not start**: this autograder's service settings are incomplete "
                f"({outcome.reason}). Please tell course staff.\n\n")
    if outcome.state == "refused":
        return f"> **GPU grading could not start**: the course's GPU service refused it: {outcome.reason}\n\n"
    return (f"> **GPU grading could not start**: the course's GPU grading service could not be reached "
            f"({outcome.reason}). The GPU items stay pending; a Regrade later sends this submission again.\n\n")


def _leaderboard(grading_bytes: bytes | None, service: Mapping[str, Any]) -> list[dict] | None:
    """The leaderboard from the service's grading.json (this package's stages), else its results.json's."""
    if grading_bytes:
        from grader.grading import Grading, GradingFormatError
        from grader.outputs.leaderboard import leaderboard_entries

        try:
            return leaderboard_entries(Grading.from_json(json.loads(grading_bytes)))
        except (GradingFormatError, ValueError):
            pass
    board = service.get("leaderboard")
    if isinstance(board, list) and all(isinstance(e, dict) and {"name", "value"} <= e.keys() for e in board):
        return board
    return None


def _exchange(config: BridgeConfig, results_dir: Path, submission: Path, env: Mapping[str, str],
              results: dict) -> Outcome:
    """Post, wait, fetch and merge; every failure becomes an Outcome."""
    from grader.serve.client import Client, Problem, ServiceError, make_archive

    try:
        archive = make_archive(submission)
    except (OSError, ValueError) as exc:
        return Outcome("refused", f"the submission could not be packed: {exc}")
    autograder = Path(env.get("GRADER_AUTOGRADER_DIR") or "/autograder")
    outcome = Outcome("unreachable")
    deadline = run_deadline(env)
    try:
        with Client(config.url, assignment=config.assignment, secret=config.secret, timeout_s=30.0,
                    deadline=None if deadline is None else deadline - STOP_S) as client:
            sub = client.submit(archive.data, submission_id=submission_id(autograder),
                                submitter=submitter(autograder, config.secret))
            outcome = Outcome(sub.state, job=sub.id, url=sub.url, deduplicated=sub.deduplicated)
            budget = wait_budget(config, env)  # after the upload, which took some of the time
            print(f"gpu service: job {sub.id} ({'stored' if sub.deduplicated else 'new'}, {sub.state}); "
                  f"waiting up to {budget:.0f} s", flush=True)
            job = client.wait(sub.id, budget)
            outcome.state = job.state
            if job.state == "failed":
                outcome.reason = job.error or "no reason given"
                return outcome
            if job.state != "done":
                where = f"position {job.position}" if job.position is not None else job.state
                outcome.reason = f"{where}; not finished within {budget:.0f} s"
                return outcome
            if job.without_gpu:  # nothing of it is a GPU verdict: the static results stand, the items wait
                outcome.state, outcome.reason = "without_gpu", job.without_gpu
                outcome.still_pending = len(pending_tests(results))
                return outcome
            service = json.loads(client.file(job.id, "results.json"))
            grading = client.file(job.id, "grading.json") if "grading.json" in job.files else None
    except ServiceError as exc:
        outcome.state = "unreachable" if exc.problem in (Problem.UNREACHABLE, Problem.SERVER) else "refused"
        outcome.reason = exc.message
        return outcome
    except ValueError as exc:  # a results.json that is not JSON
        outcome.state, outcome.reason = "failed", f"the service's results.json is not JSON ({exc})"
        return outcome
    if not isinstance(service, dict) or not isinstance(service.get("tests"), list):
        outcome.state, outcome.reason = "failed", "the service's results.json has no tests"
        return outcome
    folder = results_dir / SERVICE_FOLDER
    folder.mkdir(exist_ok=True)
    (folder / "results.json").write_text(json.dumps(service, indent=1) + "\n", encoding="utf-8")
    if grading:
        (folder / "grading.json").write_bytes(grading)
    outcome.state, outcome.files = "merged", job.files
    merge(results, service, outcome, _leaderboard(grading, service))
    return outcome


def bridge_results(results: dict, results_dir: Path, submission: Path, source_dir: Path,
                   env: Mapping[str, str] | None = None) -> Outcome:
    """The GPU service step of a Gradescope run, on results.json's dict in memory (after the static
    grading and its policy): ``results`` takes the service's verdicts or the sentence saying why not.
    Writes nothing but the service's own files (:data:`SERVICE_FOLDER`); never raises, and on the
    bridge's own failure ``results`` is what it was (the static results are never lost)."""
    env = os.environ if env is None else env
    config = read_bridge_config(Path(source_dir), env)
    if config is None:
        return Outcome("skipped", "no service URL in this package")
    if any("autograder_error" in (t.get("tags") or []) for t in results.get("tests", []) if isinstance(t, dict)):
        return Outcome("skipped", "the static run ended in an autograder error")
    if not pending_tests(results):
        return Outcome("skipped", "no item is pending GPU grading (this run had a GPU)")
    if isinstance(config, str):
        outcome = Outcome("misconfigured", config)
        print(f"gpu service: not used: {config}", flush=True)
    else:
        before = copy.deepcopy(results)
        try:
            outcome = _exchange(config, Path(results_dir), Path(submission), env, results)
        except Exception as exc:  # the bridge's own bug: the static results stand, said in one line
            results.clear()
            results.update(before)
            outcome = Outcome("unreachable", f"the bridge failed: {type(exc).__name__}: {exc}")
    if outcome.state != "merged":
        results["output"] = not_merged_note(outcome) + str(results.get("output") or "")
    extra = results.setdefault("extra_data", {})
    if isinstance(extra, dict):
        extra["gpu_service"] = asdict(outcome)
    print(f"gpu service: {outcome.state}" + (f" ({outcome.reason})" if outcome.reason else "")
          + (f"; merged {outcome.merged_items} items" if outcome.state == "merged" else "")
          + (f"; {outcome.still_pending} items still pending" if outcome.state == "without_gpu" else ""), flush=True)
    return outcome


def bridge_if_configured(results_dir: Path, submission: Path, source_dir: Path,
                         env: Mapping[str, str] | None = None) -> Outcome:
    """:func:`bridge_results` on the results.json already in ``results_dir`` (the step on its own, for
    staff re-running it by hand): rewritten as a whole when the step did something. Never raises."""
    from grader.outputs.results import write_results

    path = Path(results_dir) / "results.json"
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return Outcome("skipped", f"no readable results.json ({exc})")
    if not isinstance(results, dict):
        return Outcome("skipped", "results.json is not an object")
    outcome = bridge_results(results, Path(results_dir), submission, source_dir, env)
    if outcome.state != "skipped":
        write_results(path, results)
    return outcome


__all__ = ["BridgeConfig", "Outcome", "bridge_if_configured", "bridge_results", "merge", "read_bridge_config"]
