#!/usr/bin/env python3
"""N Gradescope submissions at once through the real Gradescope path, against a fresh grading service.

    python tools/serve_gradescope_load.py --gpus 0 --n 20 --out one.json
    python tools/serve_gradescope_load.py --gpus 0,1 --n 20 --baseline one.json --out two.json
    python tools/serve_gradescope_load.py --gpus 0 --gradings-per-gpu 1 --n 20 --out one-at-a-time.json
    python tools/serve_gradescope_load.py --no-gpu --n 3 --stages naive     # the whole path without a GPU

Starts ``python -m grader serve`` (fresh --data, an assignment secret, --gradings-per-gpu workers per GPU, default
2, sharing its lock; or static ones), builds
the Gradescope package for it and runs its setup.sh once in reuse mode (this Python: the GPU box has no registry),
then N run_autograder at once, each in its own /autograder-like tree and submission id on a copy of solutions,
starter, tests/submissions/compile_error or nan_output made unique by a marker file: each grades statically as on
Gradescope (GRADER_USE_GPU=0, no CUDA device), posts, waits. Time-to-result: the batch's start to its exit.

Merged: exit 0; results.json passes tests/test_gradescope_package.py's checks with gradescope-utils' keys and JSON
types; the bridge merged, nothing pending or named "(pending GPU grading)"; merged items equal the service's copy
and the total its job's score; not deduplicated. One the static grading left nothing pending (compile_error with
--stages naive: nothing builds) never reaches the service (the bridge's rule): state nothing_pending, complete.
With --no-gpu the service grades statically too: complete then means the bridge said so (state without_gpu),
merged nothing and left every GPU item pending, and the total is the service's job's score.

CPU: at most --static-parallel (cores / 8) static phases at once, as the workers compile on the same cores; a slot
frees at run.py's "score ..." line (the post begins); the wait counts in time-to-result. Time: ~15 s per grading
of this mix per H200 worker (docs/measurements/2026-11-30-h200-gates-gradescope-path.md). Compare equal --n only
(wall_ratio); --timeout-s (e.g. 540 in a 600 s call) stops and reports what finished by then (all_merged false).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]
from serve_load import DEFAULT_SUBMISSIONS, percentile, report, spawn, stop_spawned  # noqa: E402

from grader.deploy.gradescope import build as gbuild  # noqa: E402
from grader.deploy.gradescope.bridge import pending_tests  # noqa: E402
from grader.deploy.gradescope.policy import PENDING_PREFIX  # noqa: E402
from grader.evidence.results import Results  # noqa: E402
from grader.outputs.results import OUTPUT_FORMATS, VISIBILITIES  # noqa: E402
from grader.records import RecordError  # noqa: E402
from grader.sandbox.process import kill_tree  # noqa: E402

ASSIGNMENT = "gemm-ladder-load"
MARKER = "LOAD_MARKER.txt"
STATIC_DONE = re.compile(r"^(score \S+ \(no-GPU policy|gpu service:)")  # run.py's lines after the static phase
MERGED_KEYS = ("name", "score", "max_score", "status", "output", "visibility", "tags")
# gradescope-utils' JSONTestRunner output (0.5.0; one test, one leaderboard entry): the keys and JSON types to have.
# A copy, as the GPU box may lack the library; tests/test_serve_gradescope_load.py keeps it equal to its output.
GRADESCOPE_UTILS = {
    "tests": [{"name": "", "score": 10, "max_score": 10, "status": "passed", "tags": ["naive"], "visibility": "visible",
               "number": "1.1"}],
    "leaderboard": [{"name": "GFLOP/s", "value": 812.5, "order": "desc"}],
    "visibility": "visible", "stdout_visibility": "hidden", "execution_time": "0.00", "score": 10.0}


@dataclass
class Run:
    index: int
    kind: str
    tree: Path
    exit_code: int | None = None
    timed_out: bool = False
    slot_wait_s: float = 0.0  # waiting for a static slot
    static_s: float | None = None  # its own start to the end of its static phase
    time_to_result_s: float | None = None  # the batch's start to run_autograder's exit
    log: list[str] = field(default_factory=list)


def _kind_ok(ours: object, theirs: object) -> bool:
    """The same JSON kind, numbers with numbers (tests/test_results.py's _compatible)."""
    if isinstance(ours, bool) or isinstance(theirs, bool):
        return isinstance(ours, bool) and isinstance(theirs, bool)
    return isinstance(ours, (int, float) if isinstance(theirs, (int, float)) else type(theirs))


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def validate(path: Path, ref: dict = GRADESCOPE_UTILS) -> tuple[dict | None, list[str]]:
    """results.json as Gradescope reads it (tests/test_gradescope_package.check_results and test_serve_bridge's
    gradescope-utils conformance), as problems rather than asserts: the tool reports, it does not stop."""
    def refuse(c: str) -> None:
        raise ValueError(f"non-finite number {c}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)
    except (OSError, ValueError) as exc:
        return None, [f"results.json: {exc}"]
    if not isinstance(data, dict) or not isinstance(data.get("tests"), list) or not data["tests"]:
        return None, ["results.json: not an object with a non-empty tests list"]
    p = [] if _finite(data.get("score")) else ["score is not a finite number"]
    if not (isinstance(data.get("execution_time"), int) and data["execution_time"] >= 0):
        p.append("execution_time is not a non-negative int")
    if data.get("output_format") not in OUTPUT_FORMATS or not {data.get("visibility"), data.get("stdout_visibility")} <= set(VISIBILITIES):
        p.append("output_format, visibility or stdout_visibility is not one of Gradescope's values")
    p += [f"top-level {k!r} missing or not gradescope-utils' JSON type" for k in sorted(ref.keys() - {"execution_time"})
          if k not in data or not _kind_ok(data[k], ref[k])]  # (execution_time: an int here, "0.00" there)
    for t in data["tests"]:
        where = f"test {t.get('number')!r}" if isinstance(t, dict) else "a test"
        if not isinstance(t, dict) or not t.get("name") or not isinstance(t.get("name"), str) \
                or not isinstance(t.get("number"), str) or t.get("visibility") not in VISIBILITIES \
                or t.get("output_format") not in OUTPUT_FORMATS or not isinstance(t.get("extra_data"), dict):
            p.append(f"{where}: name, number, visibility, output_format or extra_data not as Gradescope reads")
            continue
        graded = {"score", "max_score", "status"}
        if t["extra_data"].get("status") == "manual":  # hand-graded: neutral, outside the automatic total
            p += [f"{where}: a hand-graded item carries {k}" for k in sorted(graded & t.keys())]
        elif t["extra_data"].get("pending_gpu") is True:  # pending GPU grading: neutral as well, not failed
            p += [f"{where}: an item pending GPU grading carries {k}" for k in sorted(graded & t.keys())]
        elif not (_finite(t.get("score")) and _finite(t.get("max_score")) and t.get("status") in ("passed", "failed")):
            p.append(f"{where}: score, max_score or status not as Gradescope reads")
        else:
            graded = set()
        p += [f"{where}: {k!r} missing or not gradescope-utils' JSON type" for k, v in ref["tests"][0].items()
              if k not in graded and (k not in t or not _kind_ok(t[k], v))]
    p += ["score is not the sum of the tests' scores"] if not p and abs(
        data["score"] - sum(t.get("score", 0.0) for t in data["tests"])) > 1e-6 else []
    p += [f"leaderboard entry {e!r} lacks gradescope-utils' keys" for e in data.get("leaderboard", [])
          if not isinstance(e, dict) or not e.keys() >= ref["leaderboard"][0].keys()]
    return data, p


def setup_package(work: Path, url: str, secret_file: Path, time_limit: int) -> Path:
    """Build the package for the service, unpack it, run its setup.sh once in reuse mode; its source dir."""
    out, source = work / "autograder.zip", work / "package" / "source"
    subprocess.run([sys.executable, "-m", "grader.deploy.gradescope", "build", "--out", str(out), "--service-url",
                    url, "--service-secret-file", str(secret_file), "--assignment", ASSIGNMENT,
                    "--time-limit", str(time_limit)], cwd=ROOT, check=True, capture_output=True, timeout=300)
    gbuild.unpack(out, source)
    env = _env(GRADER_INSTALL_MODE="reuse", GRADER_PYTHON=sys.executable, GRADER_STUDENT_USER="none")
    subprocess.run(["bash", str(source / "setup.sh")], cwd=work, env=env, check=True, capture_output=True, timeout=600)
    return source


def _env(**settings: str) -> dict[str, str]:
    """This environment without GRADER_* (run_autograder takes the package's settings where those are unset), but
    for the bridge's pause between looks at its job (GRADER_SERVICE_POLL_S), when given."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_") or k == "GRADER_SERVICE_POLL_S"}
    return {**kept, **settings}


def make_run(work: Path, folder: Path, i: int, stamp: str) -> Run:
    """Submission ``i``: a copy of ``folder`` with a marker (unique bytes: never deduplicated) in its own tree."""
    tree = work / "runs" / f"{i:03d}-{folder.name}"
    shutil.copytree(folder, tree / "submission", ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "submission" / MARKER).write_text(f"{stamp}-{i}\n")
    (tree / "results").mkdir()
    (tree / "submission_metadata.json").write_text(json.dumps({"id": 900000 + i, "users": [{"name": f"L{i}"}]}))
    return Run(i, folder.name, tree)


def run_one(run: Run, source: Path, stages: str | None, slots: threading.Semaphore, t0: float,
            procs: dict[int, subprocess.Popen], stop: threading.Event) -> None:
    env = _env(GRADER_AUTOGRADER_DIR=str(run.tree), GRADER_SOURCE_DIR=str(source), GRADER_USE_GPU="0",
               GRADER_SUBMISSION_DIR=str(run.tree / "submission"), GRADER_RESULTS_DIR=str(run.tree / "results"),
               GRADER_STUDENT_USER=os.environ.get("GRADER_STUDENT_USER", "none"), CUDA_VISIBLE_DEVICES="",
               **({"GRADER_STAGES": stages} if stages else {}))
    slots.acquire()
    if stop.is_set():  # past --timeout-s before its turn: never started
        slots.release()
        return
    start, released = time.monotonic(), False
    run.slot_wait_s = start - t0
    try:
        proc = subprocess.Popen([str(run.tree / "run_autograder")], cwd=run.tree, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
        procs[run.index] = proc
        assert proc.stdout is not None
        for line in proc.stdout:
            run.log.append(line)
            if not released and STATIC_DONE.match(line):
                released, run.static_s = True, time.monotonic() - start
                slots.release()
        run.exit_code = proc.wait()
        run.time_to_result_s = time.monotonic() - t0
    finally:
        procs.pop(run.index, None)
        if not released:
            slots.release()


def batch(runs: list[Run], source: Path, stages: str | None, parallel: int, timeout_s: float) -> float:
    """All runs started at once (static phases at most ``parallel`` at a time); the wall time. Past
    ``timeout_s`` the runs still going are killed and those not started never start: both are timed out."""
    slots, stop = threading.Semaphore(parallel), threading.Event()
    procs: dict[int, subprocess.Popen] = {}
    # Every run_autograder is placed (as Gradescope places it) before any is started. Copied in the
    # runs' threads, one thread's file could still be open for writing while another thread forked: the
    # forked child holds that descriptor until it execs, and exec of the copy then fails with "Text file
    # busy" (ETXTBSY). That failed one CI run of tests/test_serve_gradescope_load.py.
    for r in runs:
        shutil.copy(source / "run_autograder", r.tree / "run_autograder")
    t0 = time.monotonic()
    threads = [threading.Thread(target=run_one, args=(r, source, stages, slots, t0, procs, stop), daemon=True)
               for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, t0 + timeout_s - time.monotonic()))
    wall = time.monotonic() - t0
    stop.set()
    late = [r for r, t in zip(runs, threads) if t.is_alive()]
    for pr in list(procs.values()):  # each run's whole tree: run_autograder's `timeout` puts the grader in a
        kill_tree(pr.pid)  # process group of its own, which a kill of the run's group would miss (left to finish)
    for t in threads:
        t.join(30)
    for r in late:
        r.timed_out, r.time_to_result_s = True, None
    return wall


def check(run: Run, http: httpx.Client, no_gpu: bool = False) -> dict:
    """One submission's record: its timings, score, states and every reason it is not complete (``no_gpu``:
    the service grades without a GPU, so complete is "without_gpu" with every GPU item left pending)."""
    rec: dict = {"i": run.index, "kind": run.kind, "exit_code": run.exit_code, "timed_out": run.timed_out,
                 **{k: None if v is None else round(v, 1) for k, v in (("slot_wait_s", run.slot_wait_s),
                    ("static_s", run.static_s), ("time_to_result_s", run.time_to_result_s))}}
    problems = ["timed out (--timeout-s)"] if run.timed_out else \
        [] if run.exit_code == 0 else [f"run_autograder exit code {run.exit_code}"]
    data, bad = validate(run.tree / "results" / "results.json")
    problems += bad
    try:  # the typed record the bridge reads (grader/outputs/results.py); validate() said what else is wrong
        pending = len(pending_tests(Results.from_json(data))) if data is not None else 0
    except RecordError as exc:
        problems.append(f"results.json is not the grader's record: {exc}")
        data = None
    if data is not None:
        tests = [t for t in data["tests"] if isinstance(t, dict)]
        extra, gs = _dict(data.get("extra_data")), _dict(_dict(data.get("extra_data")).get("gpu_service"))
        # no bridge record and nothing pending: the static grading was the whole grade (e.g. nothing compiled)
        state = gs.get("state") or ("nothing_pending" if not pending else "bridge did not run")
        rec.update(score=data.get("score"), max_score=sum(float(t.get("max_score") or 0) for t in tests),
                   state=state, job=gs.get("job"), merged_items=gs.get("merged_items"),
                   item_states=dict(Counter(str(_dict(t.get("extra_data")).get("status")) for t in tests)))
        left = pending
        if no_gpu and state != "nothing_pending":
            if state != "without_gpu" or gs.get("merged_items") != 0 or not left or \
                    gs.get("still_pending") != left or extra.get("pending_gpu_items") != left:
                problems.append(f"bridge state {state!r} ({gs.get('reason') or 'no reason'}), merged "
                                f"{gs.get('merged_items')}, {left} item(s) pending: not a grading without a GPU")
            problems += _against_service(run, data, gs.get("job"), http, rec, copy=False)
        elif state != "nothing_pending":
            problems += [f"test {t.get('number')} still named pending" for t in tests
                         if str(t.get("name", "")).startswith(PENDING_PREFIX)]
            if state != "merged" or gs.get("still_pending") != 0 or extra.get("pending_gpu_items") != 0:
                problems.append(f"bridge state {state!r} ({gs.get('reason') or 'no reason'}), "
                                f"{extra.get('pending_gpu_items')} item(s) still pending")
            if gs.get("deduplicated"):
                problems.append("the service answered with a stored job (deduplicated): not a grading of its own")
            problems += _against_service(run, data, gs.get("job"), http, rec)
    rec["merged"] = not problems
    if problems:
        rec["problems"] = problems[:20]
        rec["log_tail"] = "".join(run.log)[-2000:]
    return rec


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _against_service(run: Run, data: dict, job: str | None, http: httpx.Client, rec: dict,
                     copy: bool = True) -> list[str]:
    """Every merged item equals the service's copy (``copy``: one was kept); the total equals the service's
    job's score."""
    if not job:
        return ["no service job"]
    try:
        view = _dict(http.get(f"/api/v1/jobs/{job}").json())
    except (httpx.HTTPError, ValueError) as exc:
        return [f"the service did not answer for job {job}: {exc}"]
    rec.update(job_state=view.get("state"), service_score=view.get("score"), job_started=view.get("started"),
               job_finished=view.get("finished"))
    p = [] if view.get("state") == "done" else [f"service job {job} is {view.get('state')}"]
    p += [] if _finite(view.get("score")) and abs(float(data["score"]) - view["score"]) <= 1e-6 else \
        [f"score {data['score']} is not the service job's {view.get('score')}"]
    if not copy:
        return p
    try:
        theirs = json.loads((run.tree / "results" / "gpu-service" / "results.json").read_text(encoding="utf-8"))
        by_number = {t.get("number"): t for t in theirs["tests"]}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return p + ["no readable copy of the service's results.json beside results.json"]
    for t in data["tests"]:
        if isinstance(t, dict) and (t.get("extra_data") or {}).get("gpu_service_job"):
            s = by_number.get(t.get("number")) or {}
            p += [f"test {t.get('number')}: {k} differs from the service's" for k in MERGED_KEYS if t.get(k) != s.get(k)]
    return p


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def _epoch(iso: object) -> float | None:
    try:
        return datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def summarize(records: list[dict], workers: int, wall: float, extra: dict) -> dict:
    ttr = [r["time_to_result_s"] for r in records if r["time_to_result_s"] is not None]
    merged = sum(r["merged"] for r in records)
    graded = sum(r["merged"] and r.get("state") in ("merged", "without_gpu") for r in records)  # through the service
    done = [r for r in records if r.get("job_state") == "done"]
    starts = [t for r in done if (t := _epoch(r.get("job_started")))]
    ends = [t for r in done if (t := _epoch(r.get("job_finished")))]
    span = max(ends) - min(starts) if starts and ends else None
    kinds = {kind: {"n": len(rs), "merged": sum(r["merged"] for r in rs), "scores": [r.get("score") for r in rs],
                    "max_score": rs[0].get("max_score"), "states": dict(Counter(str(r.get("state")) for r in rs))}
             for kind in dict.fromkeys(r["kind"] for r in records) for rs in [[r for r in records if r["kind"] == kind]]}
    return {
        "n": len(records), "workers": workers, **extra, "wall_s": round(wall, 1),
        "completed": len(ttr), "timed_out": len(records) - len(ttr), "merged": merged, "all_merged": merged == len(records),
        "service_graded": graded, "nothing_pending": sum(r.get("state") == "nothing_pending" for r in records),
        "p50_s": percentile(ttr, 0.5) if ttr else None, "p95_s": percentile(ttr, 0.95) if ttr else None,
        "max_s": round(max(ttr), 1) if ttr else None,
        # end to end: gradings merged from the service per hour of the batch's wall time, per worker
        "jobs_per_hour_per_worker": round(graded / wall * 3600 / max(workers, 1), 1),
        # the queue alone: its jobs over the span from the first job's start to the last one's end
        "service_jobs_per_hour_per_worker": round(len(ends) / span * 3600 / max(workers, 1), 1) if span else None,
        "per_kind": kinds, "submissions": records,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", default="0", help="the GPUs the service grades on (default 0); with --no-gpu, that "
                   "many static workers")
    p.add_argument("--gradings-per-gpu", type=int, default=2, help="the service's workers per GPU, sharing its lock "
                   "(default 2, the service's own; 1: one grading per GPU at a time)")
    p.add_argument("--no-gpu", action="store_true", help="static workers: the whole path without a GPU")
    p.add_argument("--n", type=int, default=30, help="run_autograder processes started at once (default 30)")
    p.add_argument("--stages", help="grade only these stages (the package and the service alike)")
    p.add_argument("--static-parallel", type=int, default=max(1, (os.cpu_count() or 1) // 8),
                   help="static phases at once, at most (default: cores / 8 = %(default)s)")
    p.add_argument("--time-limit", type=int, default=3600, help="the package's time limit (default 3600 s)")
    p.add_argument("--timeout-s", type=float, default=3600, help="then stop the runs left, as timed out")
    p.add_argument("--baseline", help="an earlier run's JSON: adds wall_ratio = this wall / its wall")
    p.add_argument("--out", help="also write the JSON here")
    p.add_argument("--work", help="keep the work folder here (the package, the trees, serve.log)")
    args = p.parse_args(argv)
    if args.n < 1 or args.static_parallel < 1:
        p.error("--n and --static-parallel must be at least 1")
    tmp = None if args.work else tempfile.TemporaryDirectory(prefix="serve-gs-load-")
    (work := Path(tmp.name if tmp else args.work).resolve()).mkdir(parents=True, exist_ok=True)
    proc: subprocess.Popen | None = None
    try:
        t_setup = time.monotonic()
        extra = (["--no-gpu"] if args.no_gpu else []) + (["--stages", args.stages] if args.stages else [])
        proc, url, _ = spawn(args.gpus, work / "data", ASSIGNMENT, extra, args.gradings_per_gpu)  # exits, naming serve.log, on failure
        source = setup_package(work, url, work / "secret", args.time_limit)
        stamp = f"{os.getpid()}-{time.time()}"
        runs = [make_run(work, DEFAULT_SUBMISSIONS[i % len(DEFAULT_SUBMISSIONS)], i, stamp) for i in range(args.n)]
        http = httpx.Client(base_url=url, timeout=60)
        workers, setup_s = http.get("/healthz").json().get("workers", 0), time.monotonic() - t_setup
        wall = batch(runs, source, args.stages, args.static_parallel, args.timeout_s)
        result = summarize([check(r, http, args.no_gpu) for r in runs], workers, wall, {
            "mode": "static" if args.no_gpu else "gpu", "gpus": None if args.no_gpu else args.gpus,
            "gradings_per_gpu": None if args.no_gpu else args.gradings_per_gpu,
            "stages": args.stages or "all", "static_parallel": args.static_parallel, "setup_s": round(setup_s, 1)})
        if not args.no_gpu:  # workers counts processes: with several per GPU, the GPU is the unit to compare
            gpus = len([g for g in args.gpus.split(",") if g.strip()])
            result["jobs_per_hour_per_gpu"] = round(result["service_graded"] / wall * 3600 / max(gpus, 1), 1)
        if not result["all_merged"]:
            result["service_log_tail"] = _tail(work / "serve.log")
    except (SystemExit, subprocess.CalledProcessError) as exc:  # the service or the package's setup failed
        setup = exc.stderr if isinstance(exc, subprocess.CalledProcessError) else None
        more = setup.decode(errors="replace")[-4000:] if setup else _tail(work / "serve.log")
        print(f"error: {exc}\n{more}", file=sys.stderr)
        return 2
    finally:
        stop_spawned(proc, tmp)
    report(result, args.baseline, args.out)
    return 0 if result["all_merged"] else 1


if __name__ == "__main__":
    sys.exit(main())
