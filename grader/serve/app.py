"""The HTTP API (FastAPI on uvicorn) and the web pages of grader/serve/static/.

    POST /api/v1/jobs                      a zip; Bearer token (self-check) or HMAC headers (Gradescope);
                                           ?force=1 grades again. 202 new, 200 the same content's job.
    GET  /api/v1/jobs/{id}                 state, position, estimate_s, times, score, files (error if failed)
    GET  /api/v1/jobs/{id}/files/{name}    one file of the job's results folder
    GET  /api/v1/jobs/{id}/summary         {"html"}: summary.md rendered (raw HTML escaped, no images)
    GET  /api/v1/queue                     workers, queued kinds and times, running, done_last_hour, mean_grade_s
    GET  /api/v1/leaderboard               the best graded self-check per token, under its pseudonym
    GET  /healthz                          {"ok", "queue", "store", "disk", "workers"}; 503 {"ok": false} when the
                                           store is unavailable or the disk has under min_free_mib free
    GET  /                                 static/index.html (its JS calls the API)
    GET  /jobs/{id}, /jobs/{id}/summary    the job's page and its summary.md, rendered here (job_page.py)

Every error answers ``{"error": "<sentence>"}``; one no handler expected is a 500 that says only that
the log has the details (:class:`JsonErrors`). A job's id is its read capability (unguessable);
no listing shows ids or students' names. Submissions are serialised by one lock, so a token's
dedup lookup, limits and new job are one decision (two uploads at once cannot both pass a limit).
A job store that is gone or cannot write answers 503 (:data:`STORE_DOWN`): a job is never accepted
into a store that would lose it.
"""
from __future__ import annotations

import json
import logging
import re
import secrets
import shutil
import threading
import time
import zipfile
from collections import OrderedDict
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from grader.grading import Grading
from grader.serve import job_page as pages
from grader.serve import limits, results, retention, signing, views
from grader.serve.auth import Secrets, Tokens
from grader.serve.connections import AUTHENTICATED, Gate
from grader.serve.queue import JobQueue
from grader.serve.settings import Settings
from grader.serve.store import Job, JobStore, Kind, State, StoreUnavailable, UnreadableRecord
from grader.serve.stores import open_store
from grader.serve.supervisor import Supervisor
from grader.serve.upload import MAX_ZIP_ENTRIES, Receiver, Sender, Upload, zip_entries
from grader.serve.worker import reap, stale_without_gpu

log = logging.getLogger("grader.serve")
STATIC = Path(__file__).resolve().parent / "static"
JOB_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
MEDIA = {".json": "application/json", ".md": "text/markdown; charset=utf-8", ".png": "image/png",
         ".html": "text/html; charset=utf-8", ".svg": "image/svg+xml", ".csv": "text/csv; charset=utf-8",
         ".txt": "text/plain; charset=utf-8"}
# A results page may quote a student's text: it runs in a sandbox (an opaque origin, no scripts).
SANDBOX = {"Content-Security-Policy": "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'",
           "X-Content-Type-Options": "nosniff"}


INTERNAL_ERROR = "internal error; the service log has the details"
STORE_DOWN = ("the service's job store is unavailable, so nothing was stored and no submission is taken until it "
              "is repaired; try again later, and tell the course staff if it lasts")


def error(status: int, message: str, retry_after: int | None = None, close: bool = False) -> JSONResponse:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    if close:
        headers["Connection"] = "close"
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class JsonErrors:
    """Any exception no handler took (the store's server away, a bug): 500 with one sentence, never the
    internals, and the traceback logged once. (Starlette's own handler for ``Exception`` re-raises
    after answering, so uvicorn would log it a second time.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception:
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if not started:  # else the answer is half sent: uvicorn closes the connection
                await error(500, INTERNAL_ERROR)(scope, receive, send)


class Service:
    def __init__(self, settings: Settings, store: JobStore | None = None, queue: JobQueue | None = None):
        self.settings = settings
        self.store = store or open_store(settings)
        self.queue = queue or JobQueue(settings)
        self.tokens, self.secrets = Tokens(settings.data), Secrets(settings.data)
        self.receiver = Receiver(settings, self.tokens, self.secrets, self.store)
        self.key = settings.grading_key()
        self.lock = threading.Lock()
        self._blobs: OrderedDict[str, bytes] = OrderedDict()

    # --- submit -------------------------------------------------------------------------------
    def admit(self, who: Sender, force: bool) -> JSONResponse | None:
        """What is decided before a byte of the body is read (the sender is authenticated already):
        the store must be whole (503, nothing taken in); the content the headers declare may be the
        sender's stored job already (its answer, and the body is never read); a token over a limit
        gets its 429. None: read the body."""
        self.store.check()
        if self.disk_problem() is not None:
            raise limits.Refusal(503, limits.DISK_FULL, retry_after=60)
        if not force and who.declared_sha:
            same = self.store.find_same(who.owner, who.declared_sha, self.key)
            if same is not None and not stale_without_gpu(same, self.settings):  # the sender's own job: a wrong declared sha256 can only name another of its own
                return self._answer(same, 200, deduplicated=True)
        if who.kind is Kind.SELFCHECK:
            self._check_token(who.owner, time.time())
        return None

    def disk_problem(self) -> str | None:
        """Why the data folder's disk cannot take more (for the log and /healthz), or None."""
        try:
            free = shutil.disk_usage(self.settings.data).free
        except OSError as exc:
            return f"the data folder {self.settings.data} cannot be read ({exc.strerror})"
        if free < self.settings.min_free_mib * 1024 * 1024:
            return (f"the disk of the data folder has {free / 1024 / 1024:.0f} MiB free, under min_free_mib "
                    f"({self.settings.min_free_mib:g})")
        return None

    def charge(self, who: Sender, why: str) -> None:
        """A token's refused upload whose body the service read counts against its submissions per hour:
        a failed job without an archive (limits.py). Gradescope's are not limited."""
        if who.kind is not Kind.SELFCHECK:
            return
        now = time.time()
        job = Job(id=secrets.token_urlsafe(16), kind=who.kind, owner=who.owner, label=who.label, archive_sha="",
                  key=self.key, created=now, state=State.FAILED, finished=now, error=f"the upload was refused: {why}")
        try:
            self.store.add(job, b"")
        except StoreUnavailable as exc:  # the refusal is answered all the same
            log.warning("a refused upload of %s was not counted: %s", who.owner, exc)
        log.info("job %s refused and counted: %s", job.id[:8], why)

    def _check_token(self, owner: str, now: float) -> None:
        snap = views.snapshot(self.store, self.settings, now)
        mine = self.store.owner_jobs(owner, now - 3600)
        limits.check_token(mine, self.settings.limits, now, snap.first_done(mine))

    def submit(self, up: Upload, force: bool, submission_id: str) -> JSONResponse:
        """A new job for ``up`` (or the stored one of the same content). The body is read into memory
        only here, after the credentials passed, and only when a job is stored."""
        kind, owner, label = up.kind, up.owner, up.label
        if not up.size:
            raise limits.Refusal(400, "the request has no body: send the submission as a zip archive", charged=True)
        # The cheap check first: the entry count the end record declares, before the central directory is parsed.
        entries = zip_entries(up.path)
        if entries is not None and entries > MAX_ZIP_ENTRIES:
            raise limits.Refusal(400, f"the zip archive has {entries} entries, and at most {MAX_ZIP_ENTRIES} are "
                                      "accepted; leave out build outputs and data folders", charged=True)
        try:
            if entries is None:
                raise zipfile.BadZipFile("it has no zip end record")
            with zipfile.ZipFile(up.path) as zf:
                if not zf.namelist():
                    raise limits.Refusal(400, "the zip archive is empty", charged=True)
        # NotImplementedError: a zip whose version (or multi-disk layout) Python cannot read, still not a 500
        except (zipfile.BadZipFile, ValueError, OSError, NotImplementedError) as exc:
            raise limits.Refusal(400, f"the body is not a zip archive ({exc}); "
                                      "send the submission folder zipped (python -m grader submit does)",
                                 charged=True) from None
        sha, now = up.sha, time.time()
        with self.lock:
            self.store.check()
            same = None if force else self.store.find_same(owner, sha, self.key)
            if same is not None and not stale_without_gpu(same, self.settings):
                return self._answer(same, 200, deduplicated=True)
            if kind is Kind.SELFCHECK:  # again, under the lock: two uploads at once cannot both pass a limit
                self._check_token(owner, now)
            job = Job(id=secrets.token_urlsafe(16), kind=kind, owner=owner, label=label, archive_sha=sha,
                      key=self.key, created=now, force=force, submission_id=submission_id[:200],
                      submitter=up.submitter, demoted=self._over_fair_share(up, now))
            body = up.path.read_bytes()
            source = None if force else self.store.find_done(sha, self.key, kind)
            if source is not None and stale_without_gpu(source, self.settings):
                source = None
            blob = self.store.results(source.id) if source is not None else None
            if source is not None and blob is not None:  # someone else's identical archive, same kind: copy, never regrade
                job.state, job.started, job.finished, job.copied_from = State.DONE, now, now, source.id
                job.score, job.max_score, job.files = source.score, source.max_score, list(source.files)
                job.leaderboard, job.grade_s, job.without_gpu = list(source.leaderboard), 0.0, source.without_gpu
                self.store.add(job, body, results=blob)
                log.info("job %s done: %s, results of %s copied", job.id[:8], kind.value, source.id[:8])
                return self._answer(job, 200, deduplicated=True)
            self.store.add(job, body)
            superseded = self._supersede(job)
        try:
            self.queue.dispatch(job)
        except Exception as exc:  # the queue's server is away: the store holds the job; a reaper dispatches it
            log.warning("job %s: dispatch failed (%s); it will be dispatched again", job.id[:8], exc)
        snap = views.snapshot(self.store, self.settings)
        log.info("job %s queued: %s, position %s, %d bytes%s%s%s", job.id[:8], kind.value, snap.position(job),
                 len(body), " (forced)" if force else "", " (its submitter is over the fair share: behind others)"
                 if job.demoted else "", f"; it supersedes {len(superseded)} queued job(s) of the same submitter"
                 if superseded else "")
        return self._answer(job, 202, deduplicated=False, snap=snap)

    def _supersede(self, job: Job) -> list[Job]:
        """A Gradescope submitter has at most one queued job: the newest. Its older queued ones fail with a
        sentence naming the newer (Gradescope grades a student's active, latest submission), so one student's
        burst leaves one job ahead of anyone else's. Running ones finish."""
        if job.kind is not Kind.GRADESCOPE or not job.submitter:
            return []
        old = [j for j in self.store.owner_jobs(job.owner, job.created)
               if j.state is State.QUEUED and j.submitter == job.submitter and j.id != job.id]
        return [done for j in old if (done := self.store.supersede(j.id, job.id)) is not None]

    def _over_fair_share(self, up: Upload, now: float) -> bool:
        """A Gradescope job whose submitter already had ``gradescope_fair_share`` jobs graded or queued
        in the last hour: it waits behind other students' (never refused: Gradescope has no retry)."""
        share = self.settings.gradescope_fair_share
        if up.kind is not Kind.GRADESCOPE or not up.submitter or share <= 0:
            return False
        recent = [j for j in self.store.owner_jobs(up.owner, now - 3600)
                  if j.submitter == up.submitter and j.created >= now - 3600 and not j.copied_from]
        return len(recent) >= share

    def _answer(self, job: Job, status: int, deduplicated: bool, snap: views.Snapshot | None = None) -> JSONResponse:
        snap = snap or views.snapshot(self.store, self.settings)
        return JSONResponse({"id": job.id, "state": job.state.value, "position": snap.position(job),
                             "estimate_s": snap.estimate(job), "deduplicated": deduplicated,
                             "url": f"{self.settings.base_url}/jobs/{job.id}"}, status_code=status)

    # --- reads --------------------------------------------------------------------------------
    def job(self, job_id: str) -> Job | None:
        return self.store.get(job_id) if JOB_ID.match(job_id) else None

    def file(self, job: Job, name: str) -> bytes | None:
        blob = self._blobs.get(job.id)
        if blob is None:
            blob = self.store.results(job.id)
            if blob is None:
                return None
            self._blobs[job.id] = blob
            while len(self._blobs) > 16:
                self._blobs.popitem(last=False)
        return results.member(blob, name)

    def summary_html(self, job: Job) -> str | None:
        """The job's summary.md rendered as HTML (views.summary_html); None when it has none (yet)."""
        md = self.file(job, "summary.md") if "summary.md" in job.files else None
        return views.summary_html(md.decode("utf-8", errors="replace")) if md is not None else None

    def reaper(self, stop: threading.Event) -> None:
        next_prune = time.monotonic()  # retention runs at start, then every hour
        while not stop.wait(self.settings.lease_s / 4):
            try:
                reap(self.store, self.queue, self.settings)
                if self.settings.retention_days > 0 and time.monotonic() >= next_prune:
                    next_prune = time.monotonic() + retention.INTERVAL_S
                    self.prune()
            except Exception as exc:  # the store's server is away: the next round tries again
                log.warning("reaper: %s: %s", type(exc).__name__, exc)

    def prune(self) -> None:
        pruned = retention.prune(self.store, self.settings.data, self.settings.retention_days)
        if pruned:
            log.info("retention: %d job(s) finished over %g days ago pruned, %s freed", len(pruned),
                     self.settings.retention_days, retention.human(sum(p.total for p in pruned)))


def create_app(settings: Settings, service: Service | None = None, workers: Supervisor | None = None) -> FastAPI:
    """The app; ``workers`` start with it and stop in its shutdown (uvicorn re-raises SIGTERM after the
    shutdown, so nothing after ``Server.run`` would run)."""
    svc = service or Service(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        stop = threading.Event()
        svc.receiver.clear()
        thread = threading.Thread(target=svc.reaper, args=(stop,), name="reaper", daemon=True)
        thread.start()
        if workers is not None:
            workers.start()
        try:
            yield
        finally:
            stop.set()
            if workers is not None:
                await run_in_threadpool(workers.stop)
            log.info("service stopped")

    # No /openapi.json: the API is documented here and in docs/deployment.md, not advertised to anyone.
    app = FastAPI(title="GEMM-ladder grading service", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.service = svc
    app.add_middleware(JsonErrors)
    app.add_middleware(Gate, settings=settings)  # outermost: per-address caps and bodiless methods, before routing

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        text = {404: f"nothing at {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        return error(exc.status_code, text.get(exc.status_code, str(exc.detail)))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError):
        return error(400, f"bad request: {exc.errors()[0].get('msg', 'invalid')}")

    @app.exception_handler(limits.Refusal)
    async def refused(request: Request, exc: limits.Refusal):
        # A refused request that announced a body is answered and closed: the body is never read, and a
        # client left to send it (one byte now and then keeps uvicorn's keep-alive timer off) would hold
        # a connection for as long as it likes, until refused clients alone fill max_connections.
        announced = request.headers.get("content-length", "0").strip() not in ("", "0") or \
            "transfer-encoding" in request.headers
        return error(exc.status, exc.message, exc.retry_after, exc.close or announced)

    @app.exception_handler(UnreadableRecord)
    async def unreadable(request: Request, exc: UnreadableRecord):
        log.error("%s %s: %s", request.method, request.url.path, exc)
        return error(500, "this job's record was written by another version of the service and cannot be read "
                          "here; tell the course staff")

    @app.exception_handler(StoreUnavailable)
    async def store_down(request: Request, exc: StoreUnavailable):
        log.error("%s %s: the job store is unavailable: %s", request.method, request.url.path, exc)
        return error(503, STORE_DOWN, retry_after=60)

    @app.post("/api/v1/jobs")
    async def post_job(request: Request):
        # Everything the headers decide, before a byte of the body (grader/serve/upload.py).
        who = await run_in_threadpool(svc.receiver.sender, request)
        request.scope.get(AUTHENTICATED, lambda: None)()  # no longer capped as an anonymous request
        force = request.query_params.get("force", "").lower() in ("1", "true", "yes")
        early = await run_in_threadpool(svc.admit, who, force)
        if early is not None:
            return early
        try:
            async with svc.receiver.receive(request, who) as up:
                sub_id = request.headers.get(signing.SUBMISSION_ID_HEADER, "") if up.kind is Kind.GRADESCOPE else ""
                return await run_in_threadpool(svc.submit, up, force, sub_id)
        except limits.Refusal as exc:
            if exc.charged:
                await run_in_threadpool(svc.charge, who, exc.message)
            raise

    @app.get("/api/v1/jobs/{job_id}")
    def get_job(job_id: str):
        job = svc.job(job_id)
        if job is None:
            return error(404, "no job with this id (ids are case-sensitive; check the link)")
        return views.job_view(job, views.snapshot(svc.store, svc.settings))

    @app.get("/api/v1/jobs/{job_id}/summary")
    def get_summary(job_id: str):
        """summary.md rendered as HTML on the server (views.summary_html), for the job page."""
        job = svc.job(job_id)
        if job is None:
            return error(404, "no job with this id (ids are case-sensitive; check the link)")
        html = svc.summary_html(job)
        if html is None:
            return error(404, "this job has no summary.md (yet)")
        return {"html": html}

    @app.get("/api/v1/jobs/{job_id}/files/{name}")
    def get_file(job_id: str, name: str):
        job = svc.job(job_id)
        if job is None:
            return error(404, "no job with this id (ids are case-sensitive; check the link)")
        if name not in job.files:
            have = ", ".join(job.files) or "none yet"
            return error(404, f"this job has no file {name[:80]!r} (its files: {have})")
        data = svc.file(job, name)
        if data is None:
            return error(404, f"{name} is missing from the job's stored results")
        return Response(data, media_type=MEDIA.get(Path(name).suffix, "application/octet-stream"), headers=SANDBOX)

    @app.get("/api/v1/queue")
    def get_queue():
        return views.queue_view(views.snapshot(svc.store, svc.settings), svc.store)

    @app.get("/api/v1/leaderboard")
    def get_leaderboard():
        return views.leaderboard_view(svc.store)

    @app.get("/healthz")
    def healthz():
        """ok only when a submission could be taken now: the store answers and the disk has room."""
        try:
            svc.store.check()
            snap = views.snapshot(svc.store, svc.settings)
        except Exception as exc:  # the details go to the log only: /healthz answers anyone
            log.error("healthz: the job store is unavailable: %s: %s", type(exc).__name__, exc)
            return JSONResponse({"ok": False, "queue": svc.queue.kind, "store": "unavailable", "disk": "unknown",
                                 "error": "the job store is unavailable"}, status_code=503)
        disk = svc.disk_problem()
        if disk is not None:
            log.error("healthz: %s", disk)
            return JSONResponse({"ok": False, "queue": svc.queue.kind, "store": "ok", "disk": "full",
                                 "workers": snap.live_workers, "error": "the service's disk is full"},
                                status_code=503)
        return {"ok": True, "queue": svc.queue.kind, "store": "ok", "disk": "ok", "workers": snap.live_workers}

    def page(name: str):
        path = STATIC / name
        if not path.is_file():
            return error(404, f"the web page {name} is not installed (grader/serve/static/)")
        return FileResponse(path, media_type="text/html")

    @app.api_route("/", methods=["GET", "HEAD"])
    def index():
        return page("index.html")

    @app.api_route("/jobs/{job_id}", methods=["GET", "HEAD"])
    def job_page(job_id: str):
        """The job's page, rendered here (grader/serve/job_page.py); static/job.js only refreshes it."""
        job = svc.job(job_id)
        if job is None:
            return HTMLResponse(pages.render({"id": job_id, "state": "unknown", "error_page":
                                               "no job with this id (ids are case-sensitive; check the link)"},
                                              None, None, time.time()), status_code=404)
        view = views.job_view(job, views.snapshot(svc.store, svc.settings))
        grading = summary = None
        if job.state.value in ("done", "failed"):
            raw = svc.file(job, "grading.json") if "grading.json" in job.files else None
            try:
                grading = Grading.from_json(json.loads(raw)) if raw is not None else None
            except (ValueError, RecursionError):  # GradingFormatError is a ValueError: the page shows no table
                grading = None
            summary = svc.summary_html(job)
        return HTMLResponse(pages.render(view, grading, summary, time.time(), svc.settings.page_refresh_s))

    @app.api_route("/jobs/{job_id}/summary", methods=["GET", "HEAD"])
    def summary_page(job_id: str):
        """summary.md rendered as a page (the job page's "full summary" link)."""
        job = svc.job(job_id)
        html = svc.summary_html(job) if job is not None else None
        if job is None or html is None:
            return error(404, "no summary.md for this job (yet)" if job is not None else "no job with this id")
        return HTMLResponse(pages.render_summary_page(job.id, html),
                            headers={"Content-Security-Policy": "default-src 'none'; style-src 'self'"})

    app.mount("/static", StaticFiles(directory=STATIC, check_dir=False), name="static")
    return app
