"""Running the children: one ``python -m grader grade`` process per submission, one worker per slot.

Every submission is graded by its own child under a time limit, so one that crashes or hangs the
grader costs only its own row. Each grading writes into ``<folder>.partial/`` and is renamed when
done, so an interrupted batch leaves nothing that looks finished.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import queue
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from grader import DEFAULT_RUBRIC, IMPORT_ROOT, REPO_ROOT
from grader.deploy.batch.export import Submission
from grader.deploy.batch.table import FAILED_STATUSES, STATUS_FILE, RowStatus, read_json
from grader.outputs.results import error_results, write_results
from grader.run import sandbox

DEFAULT_TIMEOUT_S = 3600.0
LOG_LIMIT = 200_000  # bytes of a child's output kept in its log.txt


@dataclass
class Options:
    rubric: Path = DEFAULT_RUBRIC
    use_gpu: bool = True
    stages: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    keep_outputs: bool = False


ChildCommand = Callable[[Submission, Path, Options], list[str]]


def child_command(sub: Submission, out: Path, opts: Options) -> list[str]:
    cmd = [sys.executable, "-m", "grader", "grade", "--out", str(out), "--quiet", "--rubric", str(opts.rubric)]
    if not opts.use_gpu:
        cmd.append("--no-gpu")
    if opts.stages:
        cmd += ["--stages", opts.stages]
    if opts.keep_outputs:
        cmd.append("--keep-outputs")
    return cmd + ["--", str(sub.path)]  # after '--': a folder name is never read as an option


def _child_env(gpu: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(IMPORT_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if gpu is not None:
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the same numbering as nvidia-smi
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def grade_one(sub: Submission, subs_dir: Path, gpu: str | None, opts: Options,
              make_cmd: ChildCommand = child_command) -> dict:
    """Grade ``sub`` into ``subs_dir/<folder>/``; return its status record (never raises for the
    submission's or the child's failure)."""
    final = subs_dir / sub.folder
    partial = subs_dir / (sub.folder + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    t0 = time.monotonic()
    proc = sandbox.run(make_cmd(sub, partial, opts), timeout_s=opts.timeout_s, cwd=str(REPO_ROOT),
                       env=_child_env(gpu), output_limit=LOG_LIMIT)
    wall = time.monotonic() - t0
    (partial / "log.txt").write_text(
        f"$ {' '.join(proc.command)}\n# {proc.brief()}, {wall:.1f} s, GPU {gpu}\n"
        f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}\n", encoding="utf-8")
    results_path = partial / "results.json"
    if proc.timed_out:
        status = RowStatus.TIMED_OUT
        write_results(results_path, error_results(
            f"batch: grading {sub.folder} timed out after {opts.timeout_s:g} s and was stopped "
            f"(log: {final / 'log.txt'})", wall))
    elif proc.returncode == 0 and read_json(results_path) is not None:
        status = RowStatus.GRADED
    else:
        status = RowStatus.USAGE_ERROR if proc.returncode == 2 else RowStatus.GRADER_ERROR
        if read_json(results_path) is None:
            write_results(results_path, error_results(
                f"batch: the grader ended with {proc.brief()} and wrote no results.json\n\n"
                + (proc.stderr or proc.stdout)[-4000:], wall))
    results = read_json(results_path) or {}
    record = {"folder": sub.folder, "status": status, "returncode": proc.returncode,
              "wall_s": round(wall, 2), "gpu": gpu, "score": results.get("score"),
              "finished": dt.datetime.now().isoformat(timespec="seconds")}
    (partial / STATUS_FILE).write_text(json.dumps(record, indent=1) + "\n")
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)
    return record


def is_done(sub: Submission, subs_dir: Path, retry_failed: bool) -> bool:
    final = subs_dir / sub.folder
    if not (final / "results.json").is_file():
        return False
    if retry_failed:
        status = (read_json(final / STATUS_FILE) or {}).get("status")
        return status not in FAILED_STATUSES
    return True


def run_pool(todo: list[Submission], slots: list[str | None], subs_dir: Path, opts: Options,
             make_cmd: ChildCommand, on_done: Callable[[dict], None]) -> tuple[list[dict], bool]:
    """Grade ``todo`` with one worker per slot; (records, interrupted). ``on_done`` sees each record."""
    free: queue.Queue = queue.Queue()
    for slot in slots:
        free.put(slot)

    def task(sub: Submission) -> dict:
        slot = free.get()
        try:
            return grade_one(sub, subs_dir, slot, opts, make_cmd)
        except Exception as exc:  # the batch's own failure for this one (disk full...): its row only
            return {"folder": sub.folder, "status": RowStatus.GRADER_ERROR, "error": f"{type(exc).__name__}: {exc}",
                    "gpu": slot, "wall_s": 0.0}
        finally:
            free.put(slot)

    records: list[dict] = []
    interrupted = False
    pool = ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix="batch")
    futures = {pool.submit(task, s): s for s in todo}
    try:
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for fut in done:
                records.append(fut.result())
                on_done(records[-1])
    except KeyboardInterrupt:
        interrupted = True
        for fut in futures:
            fut.cancel()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return records, interrupted
