"""``python -m grader submit SUBMISSION --server URL --token TOKEN``: a student's self-check on the course GPU.

Sends the folder (zipped by :func:`grader.serve.client.make_archive`) or a zip to the grading
service, shows one progress line (queued with its position and an estimate, running, done), then
writes the job's results folder locally (results.json, summary.md, grading.json, the plots) and
prints the same table as ``python -m grader grade`` (:func:`grader.outputs.summary.render_terminal`).

Exit codes:
  0  graded (whatever the score), results written; with --no-wait: submitted
  2  bad usage: no such submission, not a folder or zip, no --server or --token
  3  the grading failed on the service (its message is printed; results written when it left any)
  4  the service refused the submission: bad or expired token (401), archive too large (413),
     too many submissions (429, with when to try again), not a zip (400)
  5  the service cannot be reached, or answered something that is not the grading service
  6  not finished within --timeout: the job goes on; run the same command again to pick it up
  130  interrupted (Ctrl-C) while waiting: the job goes on too
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from grader.occupancy.run import PLOT_FILE as OCCUPANCY_PLOT
from grader.serve.views import about

if TYPE_CHECKING:  # the client (httpx) is imported when a submission is sent: `check` and the rest run without it
    from grader.serve.client import Archive, Client, JobState, ServiceError

EXIT_OK, EXIT_USAGE, EXIT_FAILED, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_TIMEOUT = 0, 2, 3, 4, 5, 6
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports it
DEFAULT_TIMEOUT_S = 3600.0
# What a previous run left in --out that this job may not replace (a stale plot must not pass for this run's).
RESULT_NAMES = ("results.json", "summary.md", "grading.json", "intake.json", "profile.md", "profile.html", "ladder.png",
                "roofline.png", OCCUPANCY_PLOT)


def _console():
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:  # logs and CI: do not squeeze the table into 80 columns
        console = Console(stderr=True, width=150)
    return console


def progress_text(job: JobState, since: float) -> str:
    """The progress line: 'queued, position 3, ~2 min', 'running (40 s)', 'done'."""
    if job.state == "queued":
        parts = ["queued"]
        if job.position is not None:
            parts.append(f"position {job.position}")
        if job.estimate_s is not None:
            parts.append(about(job.estimate_s))
        return ", ".join(parts)
    if job.state == "running":
        return f"running ({time.monotonic() - since:.0f} s)"
    return job.state


def refusal_message(exc: ServiceError, server: str, archive: Archive | None) -> tuple[str, int]:
    """(what to tell the student, exit code) for a ServiceError."""
    from grader.serve.client import Problem, human_size

    p = exc.problem
    if p is Problem.UNAUTHORIZED:
        return (f"the service refused your token: {exc.message} (--token: your instructor issues tokens)",
                EXIT_REFUSED)
    if p is Problem.TOO_LARGE:
        size = f" Your archive is {human_size(archive.size)} ({archive.files} files)." if archive else ""
        return (f"the service refused the archive as too large: {exc.message}.{size} Submit only your "
                "sources and report (build outputs are left out already)", EXIT_REFUSED)
    if p is Problem.RATE_LIMITED:
        return f"the service is not taking more submissions from you now: {exc.message}", EXIT_REFUSED
    if p in (Problem.BAD_REQUEST, Problem.NOT_FOUND):
        return f"the service refused the request: {exc.message}", EXIT_REFUSED
    if p is Problem.UNREACHABLE:
        return (f"cannot reach the grading service at {server}: {exc.message}. Check --server and your "
                "network; the service may be down (try again later)", EXIT_UNREACHABLE)
    return f"the grading service at {server} gave an unexpected answer: {exc.message}", EXIT_UNREACHABLE


def _clear_old_results(out: Path) -> None:
    for name in RESULT_NAMES:
        path = out / name
        if path.is_file() or path.is_symlink():
            path.unlink()


def _print_results(out: Path, submission: str, job: JobState, console) -> None:
    """The table of ``python -m grader grade``, from the job's grading.json; the score alone when
    that file is missing or from another grader version."""
    from grader.grading import GradingFormatError, load_grading
    from grader.outputs.summary import render_terminal

    try:
        grading = load_grading(out / "grading.json")
    except GradingFormatError as exc:
        console.print(f"(no table: {exc})", highlight=False, soft_wrap=True)
        if job.score is not None:
            console.print(f"{submission}: {job.score:g} / {job.max_score or 0:g} points", highlight=False, soft_wrap=True)
        return
    grading.submission = submission  # the student's own path, not the service's copy
    render_terminal(grading, console)


def submit(args: argparse.Namespace) -> int:
    console = _console()
    try:
        from grader.serve.client import Client, ServiceError, human_size, make_archive
    except ModuleNotFoundError as exc:  # the HTTP client is the one dependency only `submit` needs
        console.print(f"error: `submit` needs the {exc.name} package: python3 -m pip install . (in the kit's folder)",
                      highlight=False, soft_wrap=True)
        return EXIT_USAGE
    server = args.server or os.environ.get("GRADER_SERVICE_URL", "")
    token = args.token or os.environ.get("GRADER_SERVICE_TOKEN", "")
    if not server or not token:
        console.print("error: give --server URL and --token TOKEN (or GRADER_SERVICE_URL / GRADER_SERVICE_TOKEN)",
                      highlight=False, soft_wrap=True)
        return EXIT_USAGE
    try:
        archive = make_archive(Path(args.submission))
        client = Client(server, token=token)
    except (OSError, ValueError) as exc:
        console.print(f"error: {exc}", highlight=False, soft_wrap=True)
        return EXIT_USAGE
    note = f"; left out: {', '.join(archive.skipped[:5])}" if archive.skipped else ""
    more = f" and {len(archive.skipped) - 5} more" if len(archive.skipped) > 5 else ""
    console.print(f"sending {args.submission}: {archive.files} files, {human_size(archive.size)}{note}{more}",
                  highlight=False, soft_wrap=True)
    with client:
        try:
            return _submit_and_wait(client, archive, args, console)
        except ServiceError as exc:
            message, code = refusal_message(exc, server, archive)
            console.print(f"error: {message}", highlight=False, soft_wrap=True)
            return code
        except KeyboardInterrupt:  # the job, once submitted, goes on without us
            console.print("stopped waiting (the job goes on; run the same command again to fetch its results)",
                          highlight=False, soft_wrap=True)
            return EXIT_INTERRUPTED


def _submit_and_wait(client: Client, archive: Archive, args: argparse.Namespace, console) -> int:
    sub = client.submit(archive.data, force=args.force)
    again = " (the same files were graded before: the stored job)" if sub.deduplicated else ""
    console.print(f"job {sub.id}{again}: {sub.url}", highlight=False, soft_wrap=True)
    if args.no_wait:
        console.print("not waiting (--no-wait): the page above shows the job; run the same command again "
                      "(without --force) to fetch its results", highlight=False, soft_wrap=True)
        return EXIT_OK
    running_since = time.monotonic()
    shown = [""]
    status = console.status(f"job {sub.id}: {sub.state}") if console.is_terminal else None

    def show(job: JobState) -> None:
        nonlocal running_since
        if job.state != "running":
            running_since = time.monotonic()
        text = progress_text(job, running_since)
        if status is not None:
            status.update(f"job {job.id}: {text}")
        elif text.split(" (")[0] != shown[0]:  # a log: one line per change, not per poll
            console.print(f"job {job.id}: {text}", highlight=False, soft_wrap=True)
        shown[0] = text.split(" (")[0]

    if status is not None:
        status.start()
    try:
        job = client.wait(sub.id, args.timeout, show)
    finally:
        if status is not None:
            status.stop()
    if not job.finished:
        console.print(f"error: job {job.id} is still {progress_text(job, running_since)} after {args.timeout:g} s; "
                      f"it goes on: {sub.url} (run the same command again to fetch its results)", highlight=False, soft_wrap=True)
        return EXIT_TIMEOUT
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    _clear_old_results(out)
    client.download(job.id, job.files, out)
    (out / "service-job.json").write_text(json.dumps({"id": job.id, "url": sub.url, "state": job.state}) + "\n")
    if job.state == "failed":
        console.print(f"error: the grading failed on the service: {job.error or 'no reason given'} ({sub.url})",
                      highlight=False, soft_wrap=True)
        return EXIT_FAILED
    _print_results(out, str(args.submission), job, console)
    console.print(f"results: {out / 'results.json'} (plots and the full table: {sub.url})", highlight=False, soft_wrap=True)
    return EXIT_OK


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("submission", help="your submission folder (gemm/*.cu, occupancy/, report.md), or a zip of it")
    p.add_argument("--server", help="the grading service's URL (or GRADER_SERVICE_URL)")
    p.add_argument("--token", help="your token from the instructor (or GRADER_SERVICE_TOKEN)")
    p.add_argument("--out", default="grading-out", help="where the results folder goes (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="grade again even if these exact files were graded")
    p.add_argument("--no-wait", action="store_true", help="submit, print the job's page and exit")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   help="seconds to wait for the result (default: %(default)g); the job goes on after it")
    p.set_defaults(func=submit)
