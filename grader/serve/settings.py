"""The service's settings: ``<data>/serve.yaml``, then command-line flags over it.

Every key is optional; the defaults are in :class:`Settings`::

    host: 127.0.0.1            # where the HTTP API listens (--host); put a TLS proxy in front of it
    port: 8000                 # (--port)
    public_url: https://grader.example.edu   # how students and Gradescope reach it: job links (--public-url)
    queue: sqlite              # or redis://HOST:PORT/DB, shared by several GPU hosts (--queue)
    gpus: [0, 1]               # the GPUs (--gpus 0,1); default: every GPU nvidia-smi lists
    gradings_per_gpu: 2        # 1..4 worker processes per GPU sharing its lock file (<data>/locks/gpuI.lock):
                               # one holds the GPU for its GPU steps while another compiles (--gradings-per-gpu)
    workers: 1                 # static workers when no_gpu is set (--workers N)
    no_gpu: false              # grade statically, without a GPU (--no-gpu)
    rubric: /path/rubric.yaml  # default: the package's rubric.yaml (--rubric)
    stages: [naive, tiled]     # grade only these stages (--stages a,b); default: all
    grade_command: [python3, /path/grade.py]   # what grades a job in place of ``python -m grader grade``
                               # (--grade-command "python3 /path/grade.py"); it is given the same
                               # arguments (--out OUT --quiet --rubric R ... -- ARCHIVE) and must write
                               # results.json into OUT; default: the grader itself. The test suite's
                               # stand-in (tests/standin_grader.py) is one.
    grade_timeout_s: 1800      # wall-clock limit of one grading; the job fails with a sentence past it
    lease_s: 60                # a worker renews its lease every lease_s/4; a job whose lease ran out is re-queued
    max_attempts: 3            # a job interrupted this many times (lost workers) fails instead
    queue_poll_s: 0.5          # how often an idle worker looks for a job in an SQLite queue (--queue-poll-s);
                               # a Redis queue hands a job to a waiting worker at once
    signature_skew_s: 300      # accepted clock difference of a signed (Gradescope) request
    estimate_default_s: 120    # a grading's expected seconds until some job has finished
    page_refresh_s: 3          # a job's page, open in a browser, looks again this often while the job waits or runs
    retention_days: 0          # > 0: every hour, delete the archives (and left work folders) of jobs
                               # finished longer ago than this; results stay (grader/serve/retention.py)
    gradescope_fair_share: 3   # a Gradescope submitter's jobs beyond this many in the last hour wait
                               # with the self-checks, behind other students' (0: no such rule)
    header_timeout_s: 10       # a connection's request head must arrive within this (else it is closed)
    upload_timeout_s: 120      # an upload's body must arrive within this (else 408, the file deleted)
    uploads_at_once: 16        # bodies being received at once, in all (503 with Retry-After above it)
    uploads_per_token: 2       # of them, one student token's (429 above it)
    max_connections: 200       # open connections; above it each request is answered 503 at once
    min_body_rate_kib_s: 16    # a request's body, after header_timeout_s, must average at least this (else 408, closed)
    connections_per_ip: 16     # open connections from one address (0: no cap); a trusted proxy's are not capped
    anonymous_per_ip: 8        # requests without credentials in progress at once from one address (429 above it)
    anonymous_per_ip_per_minute: 600  # and begun per minute (the pages poll every few seconds)
    trusted_proxies: [127.0.0.1]      # proxies whose X-Forwarded-For names the client (uvicorn's forwarded_allow_ips)
    gradescope_upload_slots: 4 # of uploads_at_once, kept for signed (Gradescope) uploads
    min_free_mib: 1024         # free space under --data below which /healthz says 503 and uploads are refused
    limits:                    # per student token; Gradescope (signed) jobs are not limited but by size
      submissions_per_hour: 6  # (--per-hour)
      concurrent_jobs: 1       # queued or running at once (--concurrent)
      archive_mib: 20          # largest archive accepted (--archive-mib); 413 above it

The grading key of a job is the sha256 of the rubric file, the mode (GPU or static) and the
stages: the same archive under the same key is graded once (unless forced).
"""
from __future__ import annotations

import argparse
import hashlib
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from grader import DEFAULT_RUBRIC

CONFIG_NAME = "serve.yaml"


class SettingsError(Exception):
    """serve.yaml or a flag is wrong; the message names the key and what was expected."""


@dataclass(frozen=True)
class Limits:
    submissions_per_hour: int = 6
    concurrent_jobs: int = 1
    archive_mib: float = 20.0

    @property
    def archive_bytes(self) -> int:
        return int(self.archive_mib * 1024 * 1024)


@dataclass(frozen=True)
class Settings:
    data: Path = Path("serve-data")
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str = ""
    queue: str = "sqlite"
    gpus: tuple[str, ...] | None = None  # None: every GPU nvidia-smi lists
    gradings_per_gpu: int = 2  # GPU workers per GPU; static (no_gpu) workers ignore it
    workers: int = 1
    no_gpu: bool = False
    run_workers: bool = True
    rubric: Path = DEFAULT_RUBRIC
    stages: tuple[str, ...] = ()
    grade_command: tuple[str, ...] = ()  # (): ``python -m grader grade``
    grade_timeout_s: float = 1800.0
    lease_s: float = 60.0
    max_attempts: int = 3
    queue_poll_s: float = 0.5
    signature_skew_s: int = 300
    estimate_default_s: float = 120.0
    page_refresh_s: float = 3.0
    retention_days: float = 0.0
    gradescope_fair_share: int = 3
    header_timeout_s: float = 10.0
    upload_timeout_s: float = 120.0
    uploads_at_once: int = 16
    uploads_per_token: int = 2
    max_connections: int = 200
    min_body_rate_kib_s: float = 16.0
    connections_per_ip: int = 16
    anonymous_per_ip: int = 8
    anonymous_per_ip_per_minute: int = 600
    trusted_proxies: tuple[str, ...] = ("127.0.0.1",)
    gradescope_upload_slots: int = 4
    min_free_mib: float = 1024.0
    limits: Limits = field(default_factory=Limits)

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    @property
    def redis_url(self) -> str | None:
        return self.queue if self.queue.startswith(("redis://", "rediss://", "unix://")) else None

    def grading_key(self) -> str:
        """sha256 over the rubric's bytes, the mode, the stages and a grade command other than the
        grader's (see the module docstring)."""
        h = hashlib.sha256(Path(self.rubric).read_bytes())
        h.update(b"|static|" if self.no_gpu else b"|gpu|")
        h.update(",".join(self.stages).encode())
        if self.grade_command:  # another program's gradings are never another's results
            h.update(b"|command|" + "\0".join(self.grade_command).encode())
        return h.hexdigest()

    def worker_slots(self) -> list[str | None]:
        """One entry per worker: its GPU index, or None for a static worker."""
        if self.no_gpu:
            return [None] * self.workers
        gpus = self.gpus if self.gpus is not None else detect_gpus()
        if not gpus:
            raise SettingsError("no GPU found (nvidia-smi lists none): name them with --gpus 0,1, "
                                "or grade statically with --no-gpu")
        return list(gpus)

    def gpu_lock(self, gpu: str) -> Path:
        """The lock file shared by one GPU's workers (its index made safe as a file name)."""
        return self.data / "locks" / f"gpu{re.sub(r'[^A-Za-z0-9._-]', '_', gpu)}.lock"


def private_dir(path: Path) -> Path:
    """``path``, created with mode 0700 when missing: it holds students' archives, tokens and secrets."""
    if not path.exists():
        path.mkdir(parents=True, mode=0o700)
        path.chmod(0o700)  # mkdir's mode is masked by the umask
    return path


def detect_gpus() -> tuple[str, ...]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU "))


def _as(key: str, value: Any, kind: type, what: str) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind in (int, float):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            return kind(value)
    elif kind is str:
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return str(value)
    raise SettingsError(f"{key}: {value!r} is not {what}")


def _command(key: str, value: Any) -> tuple[str, ...]:
    """A command as its arguments: a list of strings, or one string split as a shell would."""
    if isinstance(value, str):
        try:
            words = tuple(shlex.split(value))
        except ValueError as exc:
            raise SettingsError(f"{key}: {value!r} is not a command line: {exc}") from exc
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        words = tuple(value)
    else:
        raise SettingsError(f"{key}: {value!r} is not a command (a string, or a list of strings)")
    if not words or not words[0]:
        raise SettingsError(f"{key}: {value!r} is not a command: it names no program")
    return words


def _list(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return tuple(s.strip() for s in str(value).split(",") if s.strip())
    if isinstance(value, list) and all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
        return tuple(str(v) for v in value)
    raise SettingsError(f"{key}: {value!r} is not a list (e.g. [0, 1] or \"0,1\")")


_SCALARS: dict[str, tuple[type, str]] = {
    "host": (str, "a host name"), "port": (int, "a port number"), "public_url": (str, "a URL"),
    "queue": (str, "'sqlite' or redis://HOST:PORT/DB"), "workers": (int, "a number of workers"),
    "no_gpu": (bool, "true or false"), "run_workers": (bool, "true or false"), "rubric": (str, "a path"),
    "grade_timeout_s": (float, "seconds"), "lease_s": (float, "seconds"), "max_attempts": (int, "a count"),
    "queue_poll_s": (float, "seconds"),
    "signature_skew_s": (int, "seconds"), "estimate_default_s": (float, "seconds"),
    "page_refresh_s": (float, "seconds"),
    "retention_days": (float, "a number of days (0: keep everything)"),
    "gradescope_fair_share": (int, "a number of jobs per hour (0: no limit)"),
    "header_timeout_s": (float, "seconds"), "upload_timeout_s": (float, "seconds"),
    "uploads_at_once": (int, "a count"), "uploads_per_token": (int, "a count"),
    "max_connections": (int, "a count"), "min_body_rate_kib_s": (float, "KiB per second"),
    "connections_per_ip": (int, "a count (0: no cap)"), "anonymous_per_ip": (int, "a count (0: no cap)"),
    "anonymous_per_ip_per_minute": (int, "a count (0: no cap)"), "gradescope_upload_slots": (int, "a count"),
    "min_free_mib": (float, "MiB"),
}
GRADINGS_PER_GPU = range(1, 5)  # more than 4 would wait on the lock more than they compile

_LIMITS: dict[str, tuple[type, str]] = {
    "submissions_per_hour": (int, "a count"), "concurrent_jobs": (int, "a count"), "archive_mib": (float, "MiB"),
}


def from_mapping(base: Settings, raw: Any, where: str) -> Settings:
    """``base`` with the keys of one serve.yaml document applied; SettingsError names a bad key."""
    if raw is None:
        return base
    if not isinstance(raw, dict):
        raise SettingsError(f"{where}: expected a mapping of settings, found {type(raw).__name__}")
    known = {f.name for f in fields(Settings)} - {"data"}
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        name = f"{where}: {key}"
        if key not in known:
            raise SettingsError(f"{name}: unknown setting (known: {', '.join(sorted(known))})")
        if key in _SCALARS:
            kind, what = _SCALARS[key]
            changes[key] = _as(name, value, kind, what)
        elif key == "gradings_per_gpu":
            if not (isinstance(value, int) and not isinstance(value, bool) and value in GRADINGS_PER_GPU):
                raise SettingsError(f"{name}: {value!r} is not an integer from {GRADINGS_PER_GPU.start} to "
                                    f"{GRADINGS_PER_GPU.stop - 1}")
            changes[key] = value
        elif key in ("gpus", "stages", "trusted_proxies"):
            changes[key] = _list(name, value)
        elif key == "grade_command":
            changes[key] = _command(name, value)
        elif key == "limits":
            if not isinstance(value, dict):
                raise SettingsError(f"{name}: expected a mapping ({', '.join(_LIMITS)})")
            lim: dict[str, Any] = {}
            for lk, lv in value.items():
                if lk not in _LIMITS:
                    raise SettingsError(f"{name}.{lk}: unknown limit (known: {', '.join(_LIMITS)})")
                lim[lk] = _as(f"{name}.{lk}", lv, *_LIMITS[lk])
            changes[key] = replace(base.limits, **lim)
    if "rubric" in changes:
        changes["rubric"] = Path(changes["rubric"])
    return replace(base, **changes)


def load(args: argparse.Namespace) -> Settings:
    """serve.yaml in --data (or --config), then the flags given on the command line."""
    data = Path(getattr(args, "data", None) or Settings.data).resolve()
    s = Settings(data=data)
    config = Path(getattr(args, "config", None) or data / CONFIG_NAME)
    if config.is_file():
        try:
            raw = yaml.safe_load(config.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise SettingsError(f"{config}: not readable YAML: {exc}") from exc
        s = from_mapping(s, raw, str(config))
    flags: dict[str, Any] = {}
    for key in ("host", "port", "public_url", "queue", "workers", "gradings_per_gpu", "rubric", "grade_timeout_s",
                "lease_s", "max_attempts", "queue_poll_s", "grade_command"):
        value = getattr(args, key, None)
        if value is not None:
            flags[key] = value
    for key in ("gpus", "stages"):
        if getattr(args, key, None):
            flags[key] = getattr(args, key)
    if getattr(args, "no_gpu", False):
        flags["no_gpu"] = True
    if getattr(args, "no_workers", False):
        flags["run_workers"] = False
    limits = {k: getattr(args, a) for k, a in (("submissions_per_hour", "per_hour"),
                                               ("concurrent_jobs", "concurrent"), ("archive_mib", "archive_mib"))
              if getattr(args, a, None) is not None}
    if limits:
        flags["limits"] = limits
    s = from_mapping(s, flags, "command line")
    if not s.rubric.is_file():
        raise SettingsError(f"rubric: {s.rubric} is not a file")
    if s.workers < 1 or s.lease_s < 2 or s.max_attempts < 1:
        raise SettingsError("workers and max_attempts must be at least 1, and lease_s at least 2 seconds")
    if s.page_refresh_s < 0.1:
        raise SettingsError("page_refresh_s must be at least 0.1 seconds")
    if not 0 < s.queue_poll_s <= s.lease_s / 4:
        raise SettingsError(f"queue_poll_s must be more than 0 and at most lease_s / 4 ({s.lease_s / 4:g}) seconds")
    if min(s.uploads_at_once, s.uploads_per_token, s.max_connections) < 1 or min(s.header_timeout_s,
                                                                                 s.upload_timeout_s) <= 0:
        raise SettingsError("uploads_at_once, uploads_per_token and max_connections must be at least 1, and "
                            "header_timeout_s and upload_timeout_s more than 0 seconds")
    if s.gradescope_upload_slots >= s.uploads_at_once:
        raise SettingsError(f"gradescope_upload_slots ({s.gradescope_upload_slots}) must be less than uploads_at_once "
                            f"({s.uploads_at_once}): the rest are the students' self-checks'")
    return s


def add_flags(p: argparse.ArgumentParser, *, service: bool) -> None:
    """The flags that override serve.yaml (``service``: the HTTP side's too). Absent flags leave no
    attribute (SUPPRESS), so ``serve --data D worker`` and ``serve worker --data D`` mean the same."""
    p.argument_default = argparse.SUPPRESS
    p.add_argument("--data", help="the service's folder: serve.yaml, the job store, tokens, secrets "
                                  "(default: ./serve-data)")
    p.add_argument("--config", help="settings file (default: DATA/serve.yaml)")
    p.add_argument("--queue", help="'sqlite' (default, one host) or redis://HOST:PORT/DB (several hosts)")
    p.add_argument("--no-gpu", action="store_true", help="grade statically, without a GPU")
    p.add_argument("--rubric", help="rubric file (default: the package's rubric.yaml)")
    p.add_argument("--stages", help="grade only these stages (comma-separated ids)")
    p.add_argument("--grade-timeout-s", type=float, help="wall-clock limit of one grading (default 1800)")
    p.add_argument("--lease-s", type=float, help="a worker's lease on its job (default 60)")
    p.add_argument("--max-attempts", type=int, help="interruptions before a job fails (default 3)")
    p.add_argument("--queue-poll-s", type=float, help="an idle worker's look at an SQLite queue, every this many "
                                                      "seconds (default 0.5)")
    p.add_argument("--grade-command", help="what grades a job, given grade's arguments, instead of "
                                           "'python -m grader grade' (a test's stand-in)")
    if not service:
        return
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8000)")
    p.add_argument("--public-url", help="the URL students and Gradescope use (job links)")
    p.add_argument("--gpus", help="GPU indices, gradings_per_gpu workers each (default: every GPU)")
    p.add_argument("--gradings-per-gpu", type=int, help="GPU workers per GPU, sharing its lock (1 to 4, default 2)")
    p.add_argument("--workers", type=int, help="number of static workers with --no-gpu (default 1)")
    p.add_argument("--no-workers", action="store_true", help="run only the HTTP side (workers run elsewhere)")
    p.add_argument("--per-hour", type=int, help="submissions per hour per token (default 6)")
    p.add_argument("--concurrent", type=int, help="queued or running jobs per token (default 1)")
    p.add_argument("--archive-mib", type=float, help="largest archive in MiB (default 20)")
