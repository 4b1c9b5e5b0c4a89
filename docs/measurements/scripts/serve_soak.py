#!/usr/bin/env python3
"""Soak the grading service: N gradings in a row through the real service, sampling what wears out.

Starts ``python -m grader serve --no-gpu`` on a fresh --data folder (uvicorn, its supervisor, its
workers), posts N unique archives through the signed Gradescope path (each from its own submitter,
so none supersedes another; ``--at-once`` outstanding), and every ``--sample-s`` seconds records,
for the service process and each worker: the processes in the service's tree, the zombies in it,
open file descriptors and resident memory (VmRSS). Gradings use ``--grade-command`` (default: the
stand-in of tests/standin_grader.py, a real child that writes a real results.json, with the words
``--standin``: by default 0.3 s and 3 exited children left unreaped, as the grader's sandboxed steps
leave them), since the service treats a grading as a black box.

    python docs/measurements/scripts/serve_soak.py --n 200 --out soak.json

Prints one line per sample and, at the end, JSON: the gradings done and failed, the last sample, and
``flat`` (:func:`flat`, over the samples after --warmup gradings): the last sample, once everything is
idle, holds no more processes or open files (sockets apart: they come and go with the clients) than
the first half's most, memory within ``--memory-slack-mib`` of it, and no zombie.
The machine's other load is read from /proc/loadavg at each sample (``load1``).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # docs/measurements/scripts/ -> the repository
sys.path.insert(0, str(ROOT))
from grader.sandbox.process import stat_fields  # noqa: E402
from grader.serve.auth import Secrets  # noqa: E402
from grader.serve.client import Client, ServiceError  # noqa: E402
from grader.serve.signing import secret_from_text, submitter_id  # noqa: E402

ASSIGNMENT = "soak"
STANDIN = shlex.join([sys.executable, str(ROOT / "tests" / "standin_grader.py")])


def table() -> dict[int, tuple[bytes, int]]:
    """Every process, zombies included: (state, parent), read as the grader reads /proc (grader/sandbox/process.py)."""
    return {pid: (f[0], int(f[1])) for pid, f in stat_fields() if len(f) > 1}


def tree(root: int, procs: dict[int, tuple[bytes, int]]) -> set[int]:
    found, grew = {root}, True
    while grew:
        more = {pid for pid, (_, ppid) in procs.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return found


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def fds(pid: int) -> tuple[int, int]:
    """(open files that are not sockets, sockets): the sockets come and go with the clients' connections."""
    files = sockets = 0
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0, 0
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:"):
            sockets += 1
        else:
            files += 1
    return files, sockets


def workers_of(service: int, procs: dict[int, tuple[bytes, int]]) -> list[int]:
    """The service's live children whose command line is ``serve worker``."""
    found = []
    for pid, (state, ppid) in procs.items():
        if ppid == service and state != b"Z":
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"serve\0worker" in cmd:
                found.append(pid)
    return sorted(found)


def one(pid: int) -> dict:
    files, sockets = fds(pid)
    return {"pid": pid, "files": files, "sockets": sockets, "rss_kib": rss_kib(pid)}


def sample(service: int, done: int) -> dict:
    """The service's tree now. ``zombies``: exited processes in it not yet reaped (a grading's own
    children while it runs are counted too: its parent reaps them); ``workers``: what each holds."""
    procs = table()
    mine = tree(service, procs)
    return {"t": round(time.time(), 1), "done": done, "load1": float(Path("/proc/loadavg").read_text().split()[0]),
            "processes": len(mine), "zombies": sum(1 for p in mine if procs.get(p, (b"", 0))[0] == b"Z"),
            "service": one(service), "workers": [one(w) for w in workers_of(service, procs)]}


def unique_zip(i: int) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(zipfile.ZipInfo("NOTES.txt", date_time=(2024, 1, 1, 0, 0, 0)), f"soak {i}")
    return buf.getvalue()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _of(sample: dict, role: str) -> dict:
    if role == "service":
        return sample["service"]
    i = int(role.split()[1])
    return sample["workers"][i] if i < len(sample["workers"]) else {"files": 0, "rss_kib": 0}


def flat(samples: list[dict], last: dict, slack_kib: int) -> dict:
    """Whether nothing grew by the end: the last sample (taken once the gradings are over, everything
    idle) holds no more processes or open files than the first half of the samples' most (a grading
    holds an upload file and its own children while it runs), memory within ``slack_kib`` of it, no
    zombie, and the same workers (none restarted)."""
    first = samples[:max(len(samples) // 2, 1)]

    def most(role: str, key: str) -> int:
        return max(_of(s, role)[key] for s in first)

    checks = {"no zombies at the end": last["zombies"] == 0,
              "same workers": [w["pid"] for w in last["workers"]] == [w["pid"] for w in samples[0]["workers"]],
              "processes": last["processes"] <= max(s["processes"] for s in first)}
    for role in ["service"] + [f"worker {i}" for i in range(len(last["workers"]))]:
        checks[f"{role} open files"] = _of(last, role)["files"] <= most(role, "files")
        checks[f"{role} memory"] = _of(last, role)["rss_kib"] <= most(role, "rss_kib") + slack_kib
    return checks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200, help="gradings (default 200)")
    p.add_argument("--at-once", type=int, default=2, help="submissions outstanding at once (default 2)")
    p.add_argument("--workers", type=int, default=1, help="the service's static workers (default 1)")
    p.add_argument("--sample-s", type=float, default=10.0, help="seconds between samples (default 10)")
    p.add_argument("--warmup", type=int, default=10, help="gradings before the reference sample (default 10)")
    p.add_argument("--memory-slack-mib", type=float, default=8.0, help="RSS growth still called flat (default 8)")
    p.add_argument("--grade-command", default=STANDIN, help="the service's --grade-command (default: the stand-in)")
    p.add_argument("--standin", default="delay=0.3 zombies=3", help="the stand-in's words (GRADER_STANDIN)")
    p.add_argument("--data", help="the service's folder (default: a fresh temporary one)")
    p.add_argument("--out", help="write the JSON record here too")
    args = p.parse_args(argv)

    data = Path(args.data or tempfile.mkdtemp(prefix="serve-soak-"))
    data.mkdir(parents=True, exist_ok=True)
    text = Secrets(data).create(ASSIGNMENT, rotate=True)
    assert text is not None
    secret = secret_from_text(text)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "GRADER_STANDIN": args.standin}
    log = open(data / "serve.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "grader", "serve", "--no-gpu", "--data", str(data), "--host",
                             "127.0.0.1", "--port", str(port), "--workers", str(args.workers),
                             "--grade-command", args.grade_command], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    samples: list[dict] = []
    done = failed = 0
    stop = threading.Event()
    lock = threading.Lock()

    def sampler() -> None:
        while not stop.wait(args.sample_s):
            with lock:
                s = sample(proc.pid, done + failed)
            samples.append(s)
            ws = " ".join(f"worker {w['files']} files {w['sockets']} sockets {w['rss_kib'] / 1024:.1f} MiB"
                          for w in s["workers"])
            sv = s["service"]
            print(f"{s['done']:4d} graded  processes {s['processes']}  zombies {s['zombies']}  service "
                  f"{sv['files']} files {sv['sockets']} sockets {sv['rss_kib'] / 1024:.1f} MiB  {ws}  "
                  f"load {s['load1']}", flush=True)

    try:
        with Client(url, assignment=ASSIGNMENT, secret=secret, timeout_s=30) as c:
            deadline = time.monotonic() + 120
            while True:
                try:
                    c.http.get("/healthz")
                    break
                except Exception:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise SystemExit(f"the service did not start; see {data / 'serve.log'}") from None
                    time.sleep(0.3)
            thread = threading.Thread(target=sampler, daemon=True)
            thread.start()
            outstanding: list[str] = []
            sent = 0
            while done + failed < args.n:
                while sent < args.n and len(outstanding) < args.at_once:
                    job = c.submit(unique_zip(sent), submitter=submitter_id(secret, [f"soak {sent}"]))
                    outstanding.append(job.id)
                    sent += 1
                for job_id in list(outstanding):
                    try:
                        state = c.job(job_id).state
                    except ServiceError as exc:
                        print(f"poll {job_id[:8]}: {exc.message}", flush=True)
                        continue
                    if state in ("done", "failed"):
                        outstanding.remove(job_id)
                        with lock:
                            done, failed = done + (state == "done"), failed + (state == "failed")
                time.sleep(0.2)
            time.sleep(args.sample_s)  # the workers settle: one more sample after the last grading
            last = sample(proc.pid, done + failed)
            samples.append(last)
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    checks = flat([x for x in samples if x["done"] >= args.warmup] or samples, last, int(args.memory_slack_mib * 1024))
    record = {"gradings": args.n, "done": done, "failed": failed, "workers": args.workers,
              "sample_s": args.sample_s, "last": last, "flat": all(checks.values()),
              "checks": checks, "samples": samples, "data": str(data)}
    text_out = json.dumps({k: v for k, v in record.items() if k != "samples"}, indent=1)
    print(text_out)
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return 0 if record["flat"] and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
