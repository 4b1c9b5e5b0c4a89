"""Running the children: one ``python -m grader grade`` process per submission, one worker per slot.

Every submission is graded by its own child under a time limit, so one that crashes or hangs the
grader costs only its own row. Each grading writes into ``<folder>.partial/`` and is renamed when
done, so an interrupted batch leaves nothing that looks finished.

Workers pinned to one GPU (two by default, grader/deploy/batch/plan.py) pass their children that
GPU's lock file (``grade --gpu-lock OUT/locks/gpu-<id>.lock``): a child holds it for the GPU steps
(grader/pipeline.py, ``gpu_turn``), so while one child is timed on the GPU the other compiles and runs
its static checks, and two children never time kernels on one GPU at once. Each child gets the GPU's
description that the batch probed once (``--device``, :func:`probe_gpus`). Each record says
how long its child held the GPU and waited for it (``gpu_held_s``, ``gpu_wait_s``: grading.json's phases).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import queue
import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path

from grader import DEFAULT_RUBRIC, IMPORT_ROOT, REPO_ROOT
from grader.deploy.batch.stale import GradedBy
from grader.files import read_json, read_json_file
from grader.occupancy.variants import student_of
from grader.outputs.grades_csv import STATUS_FILE, RowStatus, read_json_object
from grader.outputs.results import error_results, write_results
from grader.sandbox import guard as sandbox
from grader.sandbox.process import Terminated, stopping
from grader.untrusted.export import Submission
from grader.untrusted.safe_copy import remove_tree

DEFAULT_TIMEOUT_S = 3600.0
LOG_LIMIT = 200_000  # bytes of a child's output kept in its log.txt


@dataclass
class Options:
    rubric: Path = DEFAULT_RUBRIC
    use_gpu: bool = True
    stages: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    keep_outputs: bool = False
    lock_dir: Path | None = None  # where the GPUs' lock files are (None: no lock)
    gpu_lock: Path | None = None  # the lock file of the GPU this child is pinned to (set per child)
    device_file: Path | None = None  # that GPU's description, probed once by the batch (set per child)
    graded_by: GradedBy | None = None  # what this batch grades with, written into batch_status.json


ChildCommand = Callable[[Submission, Path, Options], list[str]]


def child_command(sub: Submission, out: Path, opts: Options) -> list[str]:
    cmd = [sys.executable, "-m", "grader", "grade", "--out", str(out), "--quiet", "--rubric", str(opts.rubric)]
    if not opts.use_gpu:
        cmd.append("--no-gpu")
    if opts.stages:
        cmd += ["--stages", opts.stages]
    if opts.keep_outputs:
        cmd.append("--keep-outputs")
    if opts.gpu_lock is not None:
        cmd += ["--gpu-lock", str(opts.gpu_lock)]
    if opts.device_file is not None:
        cmd += ["--device", str(opts.device_file)]
    student = student_of(sub.submitters())
    if student:  # the occupancy variants' seed (used only when the rubric turns them on)
        cmd += ["--student", student]
    return cmd + ["--", str(sub.path)]  # after '--': a folder name is never read as an option


def gpu_env(gpu: str) -> dict[str, str]:
    """What pins a process to one GPU, numbered as nvidia-smi numbers them."""
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": gpu}


def child_env(gpu: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(IMPORT_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if gpu is not None:
        env.update(gpu_env(gpu))
    return env


def lock_file(lock_dir: Path, gpu: str) -> Path:
    """The lock file of one GPU (its CUDA_VISIBLE_DEVICES value, made safe as a file name)."""
    return lock_dir / f"gpu-{re.sub(r'[^A-Za-z0-9._-]', '_', gpu)}.lock"


def _beside_lock(lock_dir: Path, gpu: str, suffix: str) -> Path:
    """A path beside one GPU's lock file, named by the same rule (``gpu-<id><suffix>``)."""
    lock = lock_file(lock_dir, gpu)
    return lock.with_name(lock.stem + suffix)


def device_file(lock_dir: Path, gpu: str) -> Path:
    """Where the batch keeps one GPU's description (beside its lock file)."""
    return _beside_lock(lock_dir, gpu, ".device.json")


def probe_gpus(gpus: list[str], lock_dir: Path, timeout_s: float) -> dict[str, str]:
    """Probe each GPU once, side by side, and write its description for the gradings on it
    (grader/gpu/device.py); {GPU: "" or why its gradings probe for themselves}."""
    from grader.gpu.device import describe_into
    lock_dir.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, len(gpus)), thread_name_prefix="probe") as pool:
        return dict(zip(gpus, pool.map(lambda g: describe_into(device_file(lock_dir, g), timeout_s, gpu_env(g)),
                                       gpus)))


def gpu_phases(grading_json: Path) -> tuple[float, float]:
    """(seconds the grading held the GPU's lock, seconds it waited for it), from its phases."""
    data = read_json(grading_json)
    phases = data.get("phases") if isinstance(data, dict) else None
    held = wait = 0.0
    for p in phases if isinstance(phases, list) else []:
        if isinstance(p, dict) and isinstance(p.get("seconds"), (int, float)):
            held += p["seconds"] if p.get("name") == "gpu_held" else 0.0
            wait += p["seconds"] if p.get("name") == "gpu_wait" else 0.0
    return round(held, 3), round(wait, 3)


def grade_one(sub: Submission, subs_dir: Path, gpu: str | None, opts: Options,
              make_cmd: ChildCommand = child_command) -> dict:
    """Grade ``sub`` into ``subs_dir/<folder>/``; return its status record (never raises for the
    submission's or the child's failure)."""
    if gpu is not None and opts.use_gpu and opts.lock_dir is not None:
        opts.lock_dir.mkdir(parents=True, exist_ok=True)
        described = device_file(opts.lock_dir, gpu)
        opts = replace(opts, gpu_lock=lock_file(opts.lock_dir, gpu),
                       device_file=described if described.is_file() else None)
    final = subs_dir / sub.folder
    partial = subs_dir / (sub.folder + ".partial")
    if partial.exists():
        remove_tree(partial)
    partial.mkdir(parents=True)
    t0 = time.monotonic()
    proc = sandbox.run(make_cmd(sub, partial, opts), timeout_s=opts.timeout_s, cwd=str(REPO_ROOT),
                       env=child_env(gpu), output_limit=LOG_LIMIT)
    wall = time.monotonic() - t0
    if stopping():  # a signal stopped the batch and killed this grading: nothing of it may look finished
        remove_tree(partial, ignore_errors=True)
        return {"folder": sub.folder, "status": RowStatus.GRADER_ERROR, "error": "stopped by a signal", "gpu": gpu,
                "wall_s": round(wall, 2)}
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
        read = read_json_file(results_path)
        if read.data is None:
            wrote = f"wrote a results.json that {read.problem}, not read" if read.too_big else "wrote no results.json"
            write_results(results_path, error_results(
                f"batch: the grader ended with {proc.brief()} and {wrote}\n\n"
                + (proc.stderr or proc.stdout)[-4000:], wall))
    results = read_json_object(results_path)
    held, waited = gpu_phases(partial / "grading.json")
    record = {"folder": sub.folder, "status": status, "returncode": proc.returncode,
              "wall_s": round(wall, 2), "gpu": gpu, "score": results.get("score"),
              "gpu_held_s": held, "gpu_wait_s": waited,
              "finished": dt.datetime.now().isoformat(timespec="seconds")}
    if opts.graded_by is not None:  # what graded it, for a later batch's staleness check (stale.py)
        record["graded_by"] = replace(opts.graded_by, gpu=gpu is not None and opts.use_gpu).to_json()
    (partial / STATUS_FILE).write_text(json.dumps(record, indent=1) + "\n")
    if final.exists():
        remove_tree(final)
    partial.rename(final)
    return record


def run_pool(todo: list[Submission], slots: list[str | None], subs_dir: Path, opts: Options,
             make_cmd: ChildCommand, on_done: Callable[[dict], None]
             ) -> tuple[list[dict], KeyboardInterrupt | Terminated | None]:
    """Grade ``todo`` with one worker per slot; (records, what interrupted it). ``on_done`` sees each
    record. Ctrl-C lets the running gradings finish; SIGTERM or SIGHUP killed them already
    (grader/sandbox/process.py: run_holding_tree), and they leave no row."""
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
    interrupted: KeyboardInterrupt | Terminated | None = None
    pool = ThreadPoolExecutor(max_workers=len(slots), thread_name_prefix="batch")
    futures = {pool.submit(task, s): s for s in todo}
    try:
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for fut in done:
                records.append(fut.result())
                on_done(records[-1])
    except (KeyboardInterrupt, Terminated) as exc:
        interrupted = exc
        for fut in futures:
            fut.cancel()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return records, interrupted
