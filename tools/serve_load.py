#!/usr/bin/env python3
"""Load on the grading service: N archives posted at once through the signed Gradescope path.

Every archive is made unique (a marker file), so each one is graded (no dedup). Waits for all, then
prints JSON: p50 / p95 / max time-to-result (post to "done" seen by polling), total wall time, jobs
per hour, jobs per hour per worker (GPU), and each submission's state and score.

Against a running service:
    python tools/serve_load.py --server URL --assignment hw1 --secret-file hw1.secret [--n 30]
Or start one for the run (a fresh --data folder, --gradings-per-gpu N workers per GPU listed, default
2), e.g. 1 then 2 GPUs:
    python tools/serve_load.py --spawn --gpus 0 --out one.json
    python tools/serve_load.py --spawn --gpus 0,1 --baseline one.json --out two.json
(``--baseline`` adds ``wall_ratio``: this run's wall time over the baseline's; the goal is <= 0.6.)
Submissions default to solutions/, starter/ and two broken ones from tests/submissions/.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from grader.serve.signing import ASSIGNMENT_HEADER, SUBMISSION_ID_HEADER, read_secret, sign  # noqa: E402

DEFAULT_SUBMISSIONS = [ROOT / "solutions", ROOT / "starter", ROOT / "tests/submissions/compile_error",
                       ROOT / "tests/submissions/nan_output"]
PATH = "/api/v1/jobs"


def archive(folder: Path, marker: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(q for q in folder.rglob("*") if q.is_file() and "__pycache__" not in q.parts):
            zf.write(p, str(p.relative_to(folder)))
        zf.writestr("LOAD_MARKER.txt", marker)
    return buf.getvalue()


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(s[min(int(round(q * (len(s) - 1))), len(s) - 1)], 1)


def stop_spawned(proc: subprocess.Popen | None, tmp: tempfile.TemporaryDirectory | None) -> None:
    """Stop a service this tool started (SIGTERM: its workers requeue, then exit) and remove its folder."""
    if proc is not None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    if tmp is not None:
        tmp.cleanup()


def add_baseline(result: dict, baseline: Path) -> None:
    """``wall_ratio``: this run's wall time over an earlier run's (the same --n), the scaling goal's measure."""
    base = json.loads(baseline.read_text())
    result.update(baseline_wall_s=base["wall_s"], wall_ratio=round(result["wall_s"] / base["wall_s"], 3))


def report(result: dict, baseline: str | None, out: str | None) -> None:
    """The run's JSON on stdout (and in ``out``), with ``wall_ratio`` against ``baseline`` if given."""
    if baseline:
        add_baseline(result, Path(baseline))
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        Path(out).write_text(text + "\n")


def spawn(gpus: str, data: Path, assignment: str, extra: list[str],
          gradings_per_gpu: int = 2) -> tuple[subprocess.Popen, str, bytes]:
    """A fresh service: ``--gpus`` with ``gradings_per_gpu`` workers each, or static ones (``--no-gpu`` in
    ``extra``: as many as ``gpus`` lists); returns once every worker has registered."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    py = sys.executable
    subprocess.run([py, "-m", "grader", "serve", "secret", "--data", str(data), "--assignment", assignment,
                    "--out", str(data.parent / "secret")], check=True, cwd=ROOT)
    log = open(data.parent / "serve.log", "ab")
    listed = len([g for g in gpus.split(",") if g.strip()])
    if "--no-gpu" in extra:
        want, workers = listed, ["--workers", str(listed)]
    else:
        want, workers = listed * gradings_per_gpu, ["--gpus", gpus, "--gradings-per-gpu", str(gradings_per_gpu)]
    proc = subprocess.Popen([py, "-m", "grader", "serve", "--data", str(data), "--port", str(port), *workers, *extra],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the service exited; see {data.parent / 'serve.log'}")
        try:
            if httpx.get(url + "/healthz", timeout=2).json().get("workers", 0) >= want:
                return proc, url, read_secret(data.parent / "secret")
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    sys.exit("the service's workers did not register in 120 s")


def run(url: str, assignment: str, secret: bytes, folders: list[Path], n: int, timeout_s: float) -> dict:
    stamp = f"{os.getpid()}-{time.time()}"
    bodies = [(folders[i % len(folders)].name, archive(folders[i % len(folders)], f"{stamp}-{i}")) for i in range(n)]
    client = httpx.Client(base_url=url, timeout=60)
    workers = client.get("/healthz").json().get("workers", 0)

    def post(i: int) -> tuple[float, dict]:
        name, body = bodies[i]
        headers = {ASSIGNMENT_HEADER: assignment, SUBMISSION_ID_HEADER: f"load-{i}", "Content-Type": "application/zip",
                   **sign(secret, "POST", PATH, body)}
        t = time.monotonic()
        r = client.post(PATH, content=body, headers=headers)
        if r.status_code not in (200, 202):
            raise SystemExit(f"submission {i} ({name}) refused: {r.status_code} {r.text}")
        return t, r.json()

    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=min(n, 16)) as pool:
        posted = list(pool.map(post, range(n)))
    pending = {sub["id"]: i for i, (_, sub) in enumerate(posted)}
    finals: dict[int, dict] = {}
    seen: dict[int, float] = {}
    while pending and time.monotonic() - start < timeout_s:
        for job_id, i in list(pending.items()):
            view = client.get(f"{PATH}/{job_id}").json()
            if view.get("state") in ("done", "failed"):
                seen[i], finals[i] = time.monotonic(), view
                del pending[job_id]
        time.sleep(1.0)
    wall = time.monotonic() - start
    ttr = [seen[i] - posted[i][0] for i in seen]
    out = {
        "url": url, "n": n, "workers": workers, "completed": len(seen), "timed_out": len(pending),
        "wall_s": round(wall, 1),
        "p50_s": percentile(ttr, 0.5) if ttr else None, "p95_s": percentile(ttr, 0.95) if ttr else None,
        "max_s": round(max(ttr), 1) if ttr else None,
        "jobs_per_hour": round(len(seen) / wall * 3600, 1),
        "jobs_per_hour_per_worker": round(len(seen) / wall * 3600 / max(workers, 1), 1),
        "states": {s: sum(1 for v in finals.values() if v["state"] == s) for s in ("done", "failed")},
        "jobs": [{"submission": bodies[i][0], "state": finals.get(i, {}).get("state", "timed out"),
                  "score": finals.get(i, {}).get("score"), "max_score": finals.get(i, {}).get("max_score"),
                  "error": finals.get(i, {}).get("error"),
                  "seconds": round(seen[i] - posted[i][0], 1) if i in seen else None} for i in range(n)],
    }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", help="the service's URL (or --spawn)")
    p.add_argument("--assignment", default="load", help="X-Grader-Assignment (default: load)")
    p.add_argument("--secret-file", help="that assignment's secret (python -m grader serve secret)")
    p.add_argument("--spawn", action="store_true", help="start a service for this run (fresh --data)")
    p.add_argument("--gpus", default="0", help="with --spawn: the GPUs the service grades on (default 0)")
    p.add_argument("--gradings-per-gpu", type=int, default=2, help="with --spawn: workers per GPU (default 2)")
    p.add_argument("--no-gpu", action="store_true", help="with --spawn: static workers (a smoke test without GPUs)")
    p.add_argument("--stages", help="with --spawn: grade only these stages")
    p.add_argument("--n", type=int, default=30, help="archives posted at once (default 30)")
    p.add_argument("--timeout-s", type=float, default=7200, help="give up waiting after this (default 7200)")
    p.add_argument("--baseline", help="an earlier run's JSON: adds wall_ratio = this wall / its wall")
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("submissions", nargs="*", help="submission folders (default: solutions, starter, 2 broken)")
    args = p.parse_args(argv)
    folders = [Path(f) for f in args.submissions] or DEFAULT_SUBMISSIONS
    proc = None
    tmp = tempfile.TemporaryDirectory(prefix="serve-load-") if args.spawn else None
    try:
        if args.spawn:
            assert tmp is not None
            extra = (["--no-gpu"] if args.no_gpu else []) + (["--stages", args.stages] if args.stages else [])
            proc, url, secret = spawn(args.gpus, Path(tmp.name) / "data", args.assignment, extra,
                                         args.gradings_per_gpu)
        elif args.server and args.secret_file:
            url, secret = args.server.rstrip("/"), read_secret(args.secret_file)
        else:
            p.error("give --server URL --secret-file F, or --spawn")
        result = run(url, args.assignment, secret, folders, args.n, args.timeout_s)
    finally:
        stop_spawned(proc, tmp)
    report(result, args.baseline, args.out)
    return 0 if result["timed_out"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
