"""Start one of the grader's children from the grading process, and read back what it wrote.

:func:`launch` is the only way the grader starts a child (the probe, a stage run, the checker,
the profile launch under ncu, the sanitizer's launch, the occupancy measurements): it writes the
spec, runs ``python -m grader.children MODE SPEC.json RESULT.json`` through
:func:`grader.compile.student.run_guarded` (time and output limits, the sandbox fence) and reads
RESULT.json, whatever the child's exit. :func:`child_env` is the one environment they all get.

This module is the grading process's side; it is not a runtime file (children never import it).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Generic, TypeVar

from grader import IMPORT_ROOT
from grader.children.protocol import MODES, Mode, read_json
from grader.model import ProcRecord
from grader.records import RecordError, from_jsonable, to_jsonable
from grader.sandbox.fence import Fence, shared_runtime
from grader.sandbox.guard import run_guarded
from grader.sandbox.process import Control

MAX_RESULT_BYTES = 64 << 20  # a result is a few KB (a stage run's timings: a few hundred KB at most)
# Every child launches on one stream, so one hardware queue per context is all it uses (the
# default opens 8). Fewer queues make a context cheaper to create in the driver, which every GPU
# of the host shares (what that spares: docs/measurements/2026-11-30-h200-speed-run15-20.md).
ONE_QUEUE = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


S = TypeVar("S")
R = TypeVar("R")


@dataclass
class ChildResult(Generic[R]):
    """How the child ended, and the last RESULT.json it wrote as the mode's result record. ``result``
    None: there is none, and ``no_result`` says why (no file, too large, not JSON, not the record: the
    children run student code, which may write anything there)."""

    proc: ProcRecord
    result: R | None
    spec_path: Path
    result_path: Path
    no_result: str = ""


def child_env(cache_dir: Path, runtime: Path | None = None) -> dict[str, str]:
    """The environment of every child: imports the grader's runtime files (``runtime``, default
    the checkout) first, prints unbuffered, cuBLAS in true FP32 (no TF32), writes no bytecode
    (the runtime folder is read-only in the sandbox), keeps CuPy's kernel cache in
    ``cache_dir`` (inside the grading's work folder, never a shared home) and opens one hardware
    queue per CUDA context (:data:`ONE_QUEUE`)."""
    env = dict(os.environ)
    root = str(runtime or IMPORT_ROOT)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["CUPY_TF32"] = "0"
    env["CUPY_CACHE_DIR"] = str(cache_dir)
    env.update(ONE_QUEUE)
    return env


def child_command(mode: str, spec_path: Path, result_path: Path) -> list[str]:
    if mode not in MODES:
        raise ValueError(f"unknown child mode {mode!r}; expected one of {', '.join(MODES)}")
    return [sys.executable, "-m", "grader.children", mode, str(spec_path), str(result_path)]


def read_result(path: Path, cls: type[R]) -> tuple[R | None, str]:
    """(RESULT.json as the record ``cls``, "") or (None, why not); never raises for what is in the file."""
    if not path.exists() and not path.is_symlink():
        return None, "the child wrote no result"
    try:
        return from_jsonable(cls, read_json(path, MAX_RESULT_BYTES)), ""
    except RecursionError:
        return None, f"{path.name}: nested too deeply"
    except (OSError, ValueError) as exc:  # RecordError and json's errors are ValueErrors
        kind = "not a result" if isinstance(exc, RecordError) else "unreadable"
        return None, f"{path.name}: {kind} ({str(exc)[:300]})"


def seed_cache(seed: Path, cache: Path) -> None:
    """Start the child's CuPy cache ``cache`` as a copy of the trusted warm cache ``seed`` (a flat
    folder of regular files, checked against its manifest by grader/gpu/warm.py): every file is
    copied, never linked, so what this child writes into its cache no other child ever loads."""
    cache.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(seed):
        if entry.is_file(follow_symlinks=False):
            shutil.copyfile(entry.path, cache / entry.name, follow_symlinks=False)


def launch(mode: Mode[S, R], spec: S, work: Path, timeout_s: float, output_limit: int, *,
           fence: Fence | None = None, wrap: Sequence[str] = (), name: str | None = None,
           cache_dir: Path | None = None, runtime: Path | None = None,
           cache_seed: Path | None = None, control: Control | None = None,
           extra_env: dict[str, str] | None = None) -> ChildResult:
    """Run the child ``mode`` on ``spec`` in ``work``; never raises for what the child does.

    ``wrap``: a tool that runs the child (``ncu ...``, ``compute-sanitizer ...``). ``name``: the
    files' stem (default the mode): ``WORK/<name>_spec.json`` and ``WORK/<name>_result.json``.
    ``cache_dir``: CuPy's kernel cache (default ``WORK/cupy-cache``); ``cache_seed``: a trusted
    warm cache it starts as a copy of (:func:`seed_cache`). ``runtime``: the folder holding the
    runtime files (default the checkout). ``control``: hold the child's clock while it waits at a
    gate, or cancel it (grader/sandbox/turns.py). ``extra_env``: set in the child's environment last
    (a batch's probe of one GPU: ``CUDA_VISIBLE_DEVICES``).
    """
    work = Path(work).resolve()  # the child runs there; every path handed over is absolute
    work.mkdir(parents=True, exist_ok=True)
    stem = name or mode.name
    spec_path, result_path = work / f"{stem}_spec.json", work / f"{stem}_result.json"
    result_path.unlink(missing_ok=True)
    if not isinstance(spec, mode.spec):
        raise TypeError(f"the {mode.name} child takes a {mode.spec.__name__}, not a {type(spec).__name__}")
    spec_path.write_text(json.dumps(to_jsonable(spec)))
    cmd = [*wrap, *child_command(mode.name, spec_path, result_path)]
    if fence is not None:  # fenced, the child sees the runtime files (read-only) and nothing else of the grader
        runtime = runtime or shared_runtime()
        fence = replace(fence, readonly=(*fence.readonly, runtime))
    cache = cache_dir or work / "cupy-cache"
    if cache_seed is not None:
        seed_cache(cache_seed, cache)  # before the fence hands the scratch (and this copy) to the student user
    env = {**child_env(cache, runtime), **(extra_env or {})}
    proc = run_guarded(cmd, cwd=work, timeout_s=timeout_s, output_limit=output_limit, env=env, fence=fence,
                       control=control)
    result, why = read_result(result_path, mode.result)
    return ChildResult(proc, result, spec_path, result_path, why)
