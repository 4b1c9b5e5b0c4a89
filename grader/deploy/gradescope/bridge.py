"""The Gradescope bridge: the GPU items of a Gradescope run, graded by the course's grading service.

``run_autograder`` grades statically (Gradescope has no GPU) and applies the no-GPU policy; then,
when the package was built with a service URL (``build --service-url URL --service-secret-file F
--assignment NAME``), :func:`bridge_results`, on results.json's record in memory (grader/deploy/gradescope/run.py
writes it once afterwards):

1. zips the submission deterministically (:func:`grader.serve.client.make_archive`: the same files
   give the same bytes, so the service's dedup answers a regrade with the stored job) and posts it,
   signed with the assignment's secret, with Gradescope's submission id when known;
2. waits for the job within the run's time limit (``GRADER_RUN_DEADLINE``, set by run_autograder,
   less :data:`MARGIN_S`), looking at it after 1 s, then 1.5 times later each time up to 10 s apart
   (``GRADER_SERVICE_POLL_S``: at most that far apart);
3. merges: the service's tests are read into :class:`ServiceVerdict` records (a malformed one is left out,
   its item pending, and said); every item the static run left pending GPU grading takes its name, score,
   status and output; the leaderboard comes from the service's grading; the summary on top links
   to the job's page (the plots, the per-stage table).

A service test the service could not evaluate for want of a GPU is never merged: its item stays
pending. A job the service graded without a GPU (``serve --no-gpu``, or a worker whose CuPy could not
reach its GPU: the job's ``without_gpu``) is not merged at all: the state is ``without_gpu``, every GPU
item stays pending and the sentence on top says so, never "GPU results merged".

A busy service (503, 502, 504, no answer in time, a dropped connection) is posted to again, with a
backoff (:data:`FIRST_RETRY_S` doubled up to :data:`MAX_RETRY_S`, or the service's Retry-After), for
at most :data:`RETRY_S` and within the run's budget; each try is signed afresh (a nonce is good
once), and a post whose answer was lost finds its stored job on the next try (same bytes, same job).

If the service cannot be reached, refuses, fails or is slow, the static results stay exactly as
they are (pending policy) with one sentence on top saying so; a slow job stays queued there and a
later Regrade posts the same archive, gets the stored job back and merges without grading again.
Nothing here raises: every outcome is a :class:`Outcome` record written into ``extra_data.gpu_service``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.deploy.gradescope.metadata import SubmissionMetadata
from grader.deploy.gradescope.policy import CONFIG_FILE, is_gpu_item, read_config
from grader.evidence.results import (
    LeaderboardEntry,
    Results,
    ResultsExtra,
    ResultsTest,
    ResultsTestExtra,
    ServiceOutcome,
)
from grader.outputs.results import write_results
from grader.records import RecordError, from_jsonable

SECRET_FILE = "service.secret"  # in the package's root, mode 0600: readable by the grader (root) only
URL_KEY, ASSIGNMENT_KEY, WAIT_KEY = "GRADER_SERVICE_URL", "GRADER_SERVICE_ASSIGNMENT", "GRADER_SERVICE_WAIT_S"
POLL_KEY = "GRADER_SERVICE_POLL_S"  # the longest pause between two looks at the job (default: the client's, 10 s)
DEADLINE_KEY = "GRADER_RUN_DEADLINE"  # unix seconds at which run_autograder stops the grader
MARGIN_S = 45.0  # left under the deadline for the downloads, the merge, the write and the kill-after
STOP_S = 10.0  # no request lasts past the deadline less this (a slow service: the merge and write still fit)
DEFAULT_WAIT_S = 240.0  # without a deadline (the run command called by hand)
RETRY_S = 180.0  # the longest the post is tried again while the service is busy (within the run's budget too)
FIRST_RETRY_S, MAX_RETRY_S = 2.0, 30.0  # the backoff between tries: doubled each time up to this
SERVICE_FOLDER = "gpu-service"  # the service's own files, kept beside results.json for staff


@dataclass
class BridgeConfig:
    url: str
    assignment: str
    secret: bytes
    wait_s: float | None = None
    poll_s: float | None = None  # None: the client's own pauses (1 s, growing to 10 s)


# What happened, for extra_data.gpu_service and the log (typed: tests and people read the state); the record
# lives with results.json's (grader/outputs/results.py), which holds it.
Outcome = ServiceOutcome


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
    poll = get(POLL_KEY)
    try:
        poll_s = float(poll) if poll else None
    except ValueError:
        poll_s = math.nan
    if poll_s is not None and not 0 < poll_s < math.inf:
        return f"{POLL_KEY}={poll!r} is not a number of seconds above 0"
    return BridgeConfig(url, assignment, secret, wait_s, poll_s)


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


def pending_tests(results: Results) -> list[ResultsTest]:
    """The tests the static run left for a GPU (marked by the pending policy, or with policy keep by the
    grader) and no service verdict merged since."""
    return [t for t in results.tests if not t.extra_data.gpu_service_job  # merged: the service's stands
            and (t.extra_data.pending_gpu is True or is_gpu_item(t.extra_data))]


def submission_id(autograder_dir: Path) -> str | None:
    """Gradescope's id of this submission (submission_metadata.json), recorded by the service."""
    value = SubmissionMetadata.read(autograder_dir).id
    return str(value) if isinstance(value, (int, str)) and str(value).isalnum() else None


def submitter(autograder_dir: Path, secret: bytes) -> str | None:
    """Who submitted, as the service may know it: a keyed hash of Gradescope's user ids (all of a
    group's; their emails when no id is given) from submission_metadata.json, never the ids or
    emails themselves (grader/serve/signing.py). None when the metadata names nobody."""
    ids = []
    for user in SubmissionMetadata.read(autograder_dir).users:
        value = user.get("id") if isinstance(user.get("id"), (int, str)) else user.get("email")
        if isinstance(value, (int, str)) and not isinstance(value, bool) and str(value).strip():
            ids.append(str(value).strip().lower())
    from grader.serve.signing import submitter_id

    return submitter_id(secret, ids) if ids else None


TEST_STATUSES = ("passed", "failed")  # what Gradescope knows (grader/outputs/results.py)


@dataclass(frozen=True)
class ServiceVerdict:
    """One test of the service's results.json, checked: what a pending item takes from it."""

    number: str
    name: str | None = None  # None (absent in the service's): the static item's stays, as every absent key
    output: str | None = None
    score: float | None = None  # None: shown neutrally (a hand-graded item); then no max_score or status
    max_score: float | None = None
    status: str | None = None
    output_format: str | None = None
    visibility: str | None = None
    tags: tuple[str, ...] | None = None
    extra: ResultsTestExtra = field(default_factory=ResultsTestExtra)
    lacks_gpu: bool = False  # the service could not evaluate it for want of a GPU: never merged

    def apply(self, test: ResultsTest, job: str | None) -> ResultsTest:
        """The static run's ``test`` with this verdict: the keys the service gave, and extra_data (the service's,
        marked with its job)."""
        return dataclasses.replace(
            test,
            name=test.name if self.name is None else self.name,
            output=test.output if self.output is None else self.output,
            score=test.score if self.score is None else self.score,
            max_score=test.max_score if self.max_score is None else self.max_score,
            status=test.status if self.status is None else self.status,
            output_format=test.output_format if self.output_format is None else self.output_format,
            visibility=test.visibility if self.visibility is None else self.visibility,
            tags=test.tags if self.tags is None else list(self.tags),
            extra_data=dataclasses.replace(self.extra, gpu_service_job=job, pending_gpu=False))


def _number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where} is {value!r}, expected a finite number")
    return float(value)


def service_verdict(test: Any, index: int) -> ServiceVerdict:
    """The service's ``tests[index]`` as a record; ValueError naming the test and the key that is wrong."""
    if not isinstance(test, dict):
        raise ValueError(f"tests[{index}] is {type(test).__name__}, expected an object")
    number = test.get("number")
    where = f"tests[{index}] (number {number!r})"
    if not isinstance(number, str) or not number:
        raise ValueError(f"{where}: number must be a non-empty string")
    for key in ("name", "output", "output_format", "visibility"):
        if test.get(key) is not None and not isinstance(test[key], str):
            raise ValueError(f"{where}: {key} is {type(test[key]).__name__}, expected a string")
    status = test.get("status")
    if status is not None and status not in TEST_STATUSES:
        raise ValueError(f"{where}: status {status!r} is not one of {', '.join(TEST_STATUSES)}")
    tags = test.get("tags")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        raise ValueError(f"{where}: tags must be a list of strings")
    extra = test.get("extra_data")
    if extra is not None and not isinstance(extra, dict):
        raise ValueError(f"{where}: extra_data is {type(extra).__name__}, expected an object")
    try:  # the grader's own marks (a key another grader version added is not kept)
        marks = from_jsonable(ResultsTestExtra, extra or {}, strict=False)
    except RecordError as exc:
        raise ValueError(f"{where}: extra_data: {exc}") from None
    return ServiceVerdict(number=number, name=test.get("name"), output=test.get("output"),
                          score=_number(test.get("score"), f"{where}: score"),
                          max_score=_number(test.get("max_score"), f"{where}: max_score"), status=status,
                          output_format=test.get("output_format"), visibility=test.get("visibility"),
                          tags=None if tags is None else tuple(tags), extra=marks, lacks_gpu=is_gpu_item(marks))


def service_verdicts(service: Mapping[str, Any]) -> tuple[dict[str, ServiceVerdict], list[str]]:
    """{number: verdict} of the service's results.json, and a sentence for each test left out as malformed."""
    verdicts: dict[str, ServiceVerdict] = {}
    problems: list[str] = []
    for i, test in enumerate(service.get("tests") or []):
        try:
            v = service_verdict(test, i)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        verdicts[v.number] = v
    return verdicts, problems


def merge(results: Results, service: Mapping[str, Any], outcome: Outcome,
          leaderboard: list[LeaderboardEntry] | None) -> Results:
    """``results`` with the service's verdicts in every pending test (a changed copy; ``outcome`` counts them).
    Static items are never touched; a pending test the service did not grade, graded with a malformed
    entry, or could not evaluate for want of a GPU, stays pending."""
    theirs, problems = service_verdicts(service)
    pending = {id(t) for t in pending_tests(results)}
    tests = []
    for t in results.tests:
        v = theirs.get(t.number) if id(t) in pending else None
        tests.append(t if v is None or v.lacks_gpu else v.apply(t, outcome.job))
    merged = sum(a is not b for a, b in zip(tests, results.tests))
    after = dataclasses.replace(results, tests=tests)
    left = pending_tests(after)
    outcome.merged_items, outcome.still_pending = merged, len(left)
    note = (f"> **GPU results merged** from the course's GPU grading service (job `{outcome.job}`): "
            f"{merged} items. The per-stage table with % of cuBLAS, the ladder and roofline plots: {outcome.url}\n")
    if left:
        note += f">\n> {len(left)} items are still pending GPU grading (the service did not grade them).\n"
    if problems:
        note += (f">\n> {len(problems)} of the service's tests were malformed and left out (they stay pending): "
                 + "; ".join(problems[:3]) + ".\n")
    points = sum(float((t.max_score if t.extra_data.pending_gpu_points is None else t.extra_data.pending_gpu_points)
                       or 0) for t in left)
    return dataclasses.replace(
        after, score=after.total(), output=note + "\n" + str(service.get("output") or ""),
        leaderboard=results.leaderboard if leaderboard is None else leaderboard,
        extra_data=dataclasses.replace(results.extra_data or ResultsExtra(), pending_gpu_items=len(left),
                                       pending_gpu_points=points))


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
    if outcome.state == "superseded":
        return (f"> **GPU grading moved to your newer submission**: this one (job `{outcome.job}`) waited in the GPU "
                f"service's queue when a newer submission of yours arrived (job `{outcome.reason}`), and only the "
                "newest is graded; its GPU results are on that submission. The GPU items here stay pending.\n\n")
    if outcome.state == "failed":
        return (f"> **GPU grading failed** on the course's GPU service (job `{outcome.job}`): {outcome.reason} "
                "Please tell course staff.\n\n")
    if outcome.state == "misconfigured":
        return (f"> **GPU grading could not start**: this autograder's service settings are incomplete "
                f"({outcome.reason}). Please tell course staff.\n\n")
    if outcome.state == "refused":
        return f"> **GPU grading could not start**: the course's GPU service refused it: {outcome.reason}\n\n"
    return (f"> **GPU grading could not start**: the course's GPU grading service could not be reached "
            f"({outcome.reason}). The GPU items stay pending, outside this score, and nothing is lost: ask course "
            "staff to Regrade this submission once the service answers again (a Regrade sends it to the service "
            "again), or submit again later.\n\n")


def _leaderboard(grading_bytes: bytes | None, service: Mapping[str, Any]) -> list[LeaderboardEntry] | None:
    """The leaderboard from the service's grading.json (this package's stages), else its results.json's."""
    if grading_bytes:
        from grader.grading import Grading, GradingFormatError
        from grader.outputs.leaderboard import leaderboard_entries

        try:
            return leaderboard_entries(Grading.from_json(json.loads(grading_bytes)))
        except (GradingFormatError, ValueError):
            pass
    board = service.get("leaderboard")
    if not isinstance(board, list):
        return None
    try:
        return [from_jsonable(LeaderboardEntry, e) for e in board]
    except RecordError:
        return None


def _submit(client, archive: bytes, sub_id: str | None, who: str | None, give_up_at: float):
    """``client.submit``, tried again while the service is busy (see the module docstring) until
    ``give_up_at``; the last ServiceError, its sentence saying how often and how long, otherwise."""
    from grader.serve.client import ServiceError

    delay, tries, began = FIRST_RETRY_S, 0, time.time()
    while True:
        tries += 1
        try:
            return client.submit(archive, submission_id=sub_id, submitter=who)
        except ServiceError as exc:
            if not exc.passing:
                raise
            wait = min(max(delay, exc.retry_after or 0.0), MAX_RETRY_S)
            if time.time() + wait >= give_up_at:
                exc.message = (f"{exc.message} (tried {tries} time{'s' if tries != 1 else ''} over "
                               f"{time.time() - began:.0f} s while the service was busy)")
                raise
            print(f"gpu service: busy ({exc.message}); trying again in {wait:.0f} s", flush=True)
            time.sleep(wait)
            delay = min(delay * 2, MAX_RETRY_S)


def _exchange(config: BridgeConfig, results_dir: Path, submission: Path, env: Mapping[str, str],
              results: Results) -> tuple[Results, Outcome]:
    """Post, wait, fetch and merge: the merged results, or ``results`` as they were and an Outcome saying why."""
    from grader.serve.client import Client, Problem, ServiceError, make_archive

    try:
        archive = make_archive(submission)
    except (OSError, ValueError) as exc:
        return results, Outcome("refused", f"the submission could not be packed: {exc}")
    autograder = Path(env.get("GRADER_AUTOGRADER_DIR") or "/autograder")
    outcome = Outcome("unreachable")
    deadline = run_deadline(env)
    try:
        with Client(config.url, assignment=config.assignment, secret=config.secret, timeout_s=30.0,
                    deadline=None if deadline is None else deadline - STOP_S) as client:
            sub = _submit(client, archive.data, submission_id(autograder), submitter(autograder, config.secret),
                          time.time() + min(RETRY_S, wait_budget(config, env)))
            outcome = Outcome(sub.state, job=sub.id, url=sub.url, deduplicated=sub.deduplicated)
            budget = wait_budget(config, env)  # after the upload, which took some of the time
            print(f"gpu service: job {sub.id} ({'stored' if sub.deduplicated else 'new'}, {sub.state}); "
                  f"waiting up to {budget:.0f} s", flush=True)
            if config.poll_s is None:
                job = client.wait(sub.id, budget)
            else:
                job = client.wait(sub.id, budget, first_delay_s=min(1.0, config.poll_s), max_delay_s=config.poll_s)
            outcome.state = job.state
            if job.state == "failed" and job.superseded_by:
                outcome.state, outcome.reason = "superseded", job.superseded_by
                return results, outcome
            if job.state == "failed":
                outcome.reason = job.error or "no reason given"
                return results, outcome
            if job.state != "done":
                where = f"position {job.position}" if job.position is not None else job.state
                outcome.reason = f"{where}; not finished within {budget:.0f} s"
                return results, outcome
            if job.without_gpu:  # nothing of it is a GPU verdict: the static results stand, the items wait
                outcome.state, outcome.reason = "without_gpu", job.without_gpu
                outcome.still_pending = len(pending_tests(results))
                return results, outcome
            service = json.loads(client.file(job.id, "results.json"))
            grading = client.file(job.id, "grading.json") if "grading.json" in job.files else None
    except ServiceError as exc:
        outcome.state = "unreachable" if exc.problem in (Problem.UNREACHABLE, Problem.SERVER) else "refused"
        outcome.reason = exc.message
        return results, outcome
    except ValueError as exc:  # a results.json that is not JSON
        outcome.state, outcome.reason = "failed", f"the service's results.json is not JSON ({exc})"
        return results, outcome
    if not isinstance(service, dict) or not isinstance(service.get("tests"), list):
        outcome.state, outcome.reason = "failed", "the service's results.json has no tests"
        return results, outcome
    folder = results_dir / SERVICE_FOLDER
    folder.mkdir(exist_ok=True)
    (folder / "results.json").write_text(json.dumps(service, indent=1) + "\n", encoding="utf-8")
    if grading:
        (folder / "grading.json").write_bytes(grading)
    outcome.state, outcome.files = "merged", job.files
    return merge(results, service, outcome, _leaderboard(grading, service)), outcome


def bridge_results(results: Results, results_dir: Path, submission: Path, source_dir: Path,
                   env: Mapping[str, str] | None = None) -> tuple[Results, Outcome]:
    """The GPU service step of a Gradescope run, on results.json's record in memory (after the static
    grading and its policy): ``results`` with the service's verdicts or the sentence saying why not, and what
    happened. Writes nothing but the service's own files (:data:`SERVICE_FOLDER`); never raises, and on the
    bridge's own failure the static results are kept as they were (never lost)."""
    env = os.environ if env is None else env
    config = read_bridge_config(Path(source_dir), env)
    if config is None:
        return results, Outcome("skipped", "no service URL in this package")
    if any("autograder_error" in t.tags for t in results.tests):
        return results, Outcome("skipped", "the static run ended in an autograder error")
    if not pending_tests(results):
        return results, Outcome("skipped", "no item is pending GPU grading (this run had a GPU)")
    bridged = results
    if isinstance(config, str):
        outcome = Outcome("misconfigured", config)
        print(f"gpu service: not used: {config}", flush=True)
    else:
        try:
            bridged, outcome = _exchange(config, Path(results_dir), Path(submission), env, results)
        except Exception as exc:  # the bridge's own bug: the static results stand, said in one line
            outcome = Outcome("unreachable", f"the bridge failed: {type(exc).__name__}: {exc}")
    if outcome.state != "merged":
        bridged = dataclasses.replace(bridged, output=not_merged_note(outcome) + bridged.output)
    bridged = dataclasses.replace(bridged, extra_data=dataclasses.replace(bridged.extra_data or ResultsExtra(),
                                                                          gpu_service=outcome))
    print(f"gpu service: {outcome.state}" + (f" ({outcome.reason})" if outcome.reason else "")
          + (f"; merged {outcome.merged_items} items" if outcome.state == "merged" else "")
          + (f"; {outcome.still_pending} items still pending" if outcome.state == "without_gpu" else ""), flush=True)
    return bridged, outcome


def bridge_if_configured(results_dir: Path, submission: Path, source_dir: Path,
                         env: Mapping[str, str] | None = None) -> Outcome:
    """:func:`bridge_results` on the results.json already in ``results_dir`` (the step on its own, for
    staff re-running it by hand): rewritten as a whole when the step did something. Never raises."""
    path = Path(results_dir) / "results.json"
    try:
        results = Results.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:  # RecordError is a ValueError: it names the key that is wrong
        return Outcome("skipped", f"no readable results.json ({exc})")
    bridged, outcome = bridge_results(results, Path(results_dir), submission, source_dir, env)
    if outcome.state != "skipped":
        write_results(path, bridged)
    return outcome


__all__ = ["BridgeConfig", "Outcome", "ServiceVerdict", "bridge_if_configured", "bridge_results", "merge", "read_bridge_config"]
