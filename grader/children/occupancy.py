"""Child process: the grader's own GPU measurements for the occupancy exercises.

``python -m grader.children occupancy SPEC.json OUT.json`` (started by :mod:`grader.occupancy.child`
with a time limit). It loads the submission's ``work`` kernel from the default build's cubin and
``heavy`` from one cubin per register cap, then, in this order, writing ``OUT.json`` after each phase
so that a crash or a time-out still leaves what was done:

1. ``api``: the device's properties, ``work``'s attributes, the Occupancy API
   (``cuOccupancyMaxActiveBlocksPerMultiprocessor``) at every point of the spec and
   ``cuOccupancyMaxPotentialBlockSize`` at the spec's shared memory, in the format of
   :func:`grader.occupancy.exercises.simulated_api`; then ``heavy``'s modules are loaded. Nothing timed.
2. With ``"gate": true`` in the spec: the gate ``sweeps`` (phase ``ready``), until the grader gives it
   the GPU alone (grader/sandbox/turns.py); a stop there ends it (phase ``stopped``).
3. ``sweeps``: ``work`` at every sweep point with the same total work (grid x block x iters), one
   warm-up launch per point, then ``reps`` rounds that time every point once each (CUDA events); the
   fastest round per point counts.
4. ``heavy``: ``heavy`` at every cap the same way.

Nothing is judged here. Every error is recorded with its phase and whether the submission's code
caused it (``student``): a kernel missing from the cubin, or a launch that fails, is the
submission's; CuPy or the device not working is not. A failed launch leaves the CUDA context
unusable, so the phases after it are skipped.
"""
from __future__ import annotations

import math
import time
import traceback
from pathlib import Path

from grader.children.protocol import GateClosed, wait_at_gate, write_result
from grader.evidence.protocol import OccupancySpec

# CUfunction_attribute (cuda.h)
ATTR_MAX_DYNAMIC_SHARED = 8
DEFAULT_DYNAMIC_LIMIT = 48 * 1024


class _Report:
    def __init__(self, path: Path):
        self.path = path
        self.data: dict = {"phase": "setup", "done": [], "errors": [], "device": None, "api": None,
                           "work_attributes": None, "sweep_times": None, "heavy_times_ms": None,
                           "heavy_attributes": {}, "notes": [], "seconds": {}}
        self.save()

    def save(self) -> None:
        write_result(self.path, self.data)

    def phase(self, name: str) -> None:
        self.data["phase"] = name
        self.save()

    def error(self, phase: str, message: str, student: bool) -> None:
        self.data["errors"].append({"phase": phase, "message": message[-1500:], "student": student})
        self.save()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def _context_lost(exc: BaseException) -> bool:
    text = str(exc)
    return "CUDA_ERROR" in text or "cudaError" in text


def device_props(runtime, dev: int) -> dict:
    p = runtime.getDeviceProperties(dev)
    name = p.get("name", b"")
    return {
        "name": name.decode(errors="replace") if isinstance(name, bytes) else str(name),
        "cc": f"{p['major']}.{p['minor']}",
        "sm_count": int(p["multiProcessorCount"]),
        "warp_size": int(p["warpSize"]),
        "max_threads_per_sm": int(p["maxThreadsPerMultiProcessor"]),
        "max_blocks_per_sm": int(p.get("maxBlocksPerMultiProcessor", 0)),
        "regs_per_sm": int(p["regsPerMultiprocessor"]),
        "smem_per_sm": int(p["sharedMemPerMultiprocessor"]),
        "smem_per_block_optin": int(p.get("sharedMemPerBlockOptin", 0)),
        "reserved_smem_per_block": int(p.get("reservedSharedMemPerBlock", 0)),
    }


def _attributes(kernel) -> dict:
    attrs = kernel.attributes
    return {"registers": int(attrs["num_regs"]), "static_smem": int(attrs["shared_size_bytes"]),
            "local_bytes": int(attrs["local_size_bytes"]),
            "max_threads_per_block": int(attrs["max_threads_per_block"])}


def _raise_dynamic_limit(driver, kernel, needed: int, static: int, optin: int, notes: list) -> int:
    """Raise the kernel's dynamic shared-memory limit when ``needed`` is above the default.
    Returns the limit in force afterwards."""
    default = DEFAULT_DYNAMIC_LIMIT - static
    if needed <= default:
        return default
    target = min(needed, max(optin - static, default))
    try:
        driver.funcSetAttribute(kernel.kernel.ptr, ATTR_MAX_DYNAMIC_SHARED, target)
    except Exception as exc:  # older CuPy: the RawKernel property does the same
        try:
            kernel.max_dynamic_shared_size_bytes = target
        except Exception:
            notes.append(f"could not raise the dynamic shared-memory limit to {target}: {_describe(exc)}")
            return default
    return target


def measure_api(cp, driver, runtime, spec: OccupancySpec, work, rep: _Report) -> dict:
    dev = runtime.getDevice()
    props = device_props(runtime, dev)
    attrs = _attributes(work)
    rep.data["work_attributes"] = attrs
    fptr = work.kernel.ptr
    potential_smem = int(spec.potential_smem)
    try:  # before any limit is raised, as a program that asks first would see it
        min_grid, best = driver.occupancyMaxPotentialBlockSize(fptr, potential_smem, 0)
        potential: dict[str, int | None] = {"smem": potential_smem, "best_block": int(best),
                                            "min_grid": int(min_grid)}
    except Exception as exc:
        rep.data["notes"].append(f"occupancyMaxPotentialBlockSize failed: {_describe(exc)}")
        potential = {"smem": potential_smem, "best_block": None, "min_grid": None}
    points = [(int(b), int(s)) for b, s in spec.api_points]
    limit = _raise_dynamic_limit(driver, work, max((s for _, s in points), default=0),
                                 attrs["static_smem"], props["smem_per_block_optin"],
                                 rep.data["notes"])
    occupancy = []
    for block, smem in points:
        if smem > limit:
            blocks = 0  # a launch above the kernel's limit cannot run at all
        else:
            try:
                blocks = int(driver.occupancyMaxActiveBlocksPerMultiprocessor(fptr, block, smem))
            except Exception as exc:
                rep.data["notes"].append(f"occupancy query at block {block}, smem {smem}: {_describe(exc)}")
                blocks = 0
        occupancy.append({"block": block, "smem": smem, "blocks": blocks})
    return {"device": props,
            "work": {"registers": attrs["registers"], "static_smem": attrs["static_smem"]},
            "occupancy": occupancy, "potential": potential, "dynamic_limit": limit}


def time_launches(cp, launches: dict, warmup: int, reps: int, min_reps: int,
                  budget_s: float) -> tuple[dict, int]:
    """Fastest time (ms) per key over interleaved rounds; each key timed once per round."""
    for launch in launches.values():
        for _ in range(max(1, warmup)):
            launch()
    cp.cuda.Device().synchronize()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    best = {k: math.inf for k in launches}
    t0 = time.monotonic()
    rounds = 0
    for r in range(reps):
        for key, launch in launches.items():
            start.record()
            launch()
            stop.record()
            stop.synchronize()
            best[key] = min(best[key], float(cp.cuda.get_elapsed_time(start, stop)))
        rounds = r + 1
        if rounds >= min_reps and time.monotonic() - t0 > budget_s:
            break
    return best, rounds


def load_work(cp, driver, runtime, spec: OccupancySpec, rep: _Report):
    """Load ``work`` and ask the Occupancy API about it (nothing timed). Returns the kernel, or None
    when it could not be loaded or asked about (the error is recorded)."""
    rep.phase("load")
    work_name = spec.work_kernel
    if not spec.cubin:
        rep.error("load", spec.work_problem or f"`{work_name}` was not built", student=True)
        return None
    try:
        work = cp.RawModule(path=spec.cubin).get_function(work_name)
        _ = work.attributes  # loads the module now, so a missing kernel shows here
    except Exception as exc:
        rep.error("load", f"`{work_name}` could not be loaded from the compiled {spec.source}: "
                          f"{_describe(exc)}", student=True)
        return None

    rep.phase("api")
    t0 = time.monotonic()
    try:
        rep.data["api"] = measure_api(cp, driver, runtime, spec, work, rep)
    except Exception as exc:
        rep.error("api", f"the Occupancy API calls failed: {_describe(exc)}\n{traceback.format_exc()}",
                  student=False)
        return None
    rep.data["seconds"]["api"] = round(time.monotonic() - t0, 3)
    rep.data["done"].append("api")
    rep.save()
    return work


def time_sweeps(cp, np, driver, work, spec: OccupancySpec, rep: _Report, inp, out, n: int) -> str:
    """Re-run both sweeps with ``work``. Returns "ok", "skipped" or "context lost"."""
    rep.phase("sweeps")
    t0 = time.monotonic()
    sw, work_name = spec.sweeps, spec.work_kernel
    total, iters = int(sw.total_threads), int(sw.iters)
    launches, keys = {}, {}
    current: dict[str, tuple[int, int] | None] = {"point": None}

    def work_launch(block: int, smem: int, grid: int):
        def launch():
            current["point"] = (block, smem)
            work((grid,), (block,), (inp, out, np.int32(n), np.int32(iters)), shared_mem=smem)
        return launch

    limit = rep.data["api"].get("dynamic_limit", DEFAULT_DYNAMIC_LIMIT)
    for name in ("smem", "block"):
        for block, smem in getattr(sw, name):
            block, smem = int(block), int(smem)
            if smem > limit:
                _raise_dynamic_limit(driver, work, smem, rep.data["work_attributes"]["static_smem"],
                                     rep.data["device"]["smem_per_block_optin"], rep.data["notes"])
                limit = smem
            launches[(name, block, smem)] = work_launch(block, smem, -(-total // block))
            keys[(name, block, smem)] = smem if name == "smem" else block
    try:
        best, rounds = time_launches(cp, launches, int(sw.warmup), int(sw.reps),
                                     int(sw.min_reps), float(sw.max_seconds))
    except Exception as exc:
        block, smem = current["point"] or (None, None)
        rep.error("sweeps", f"`{work_name}` failed in the grader's re-run of the sweeps (block {block}, "
                            f"{smem} B dynamic shared memory): {_describe(exc)}", student=True)
        return "context lost" if _context_lost(exc) else "skipped"
    times: dict = {"smem": {}, "block": {}}
    for (name, block, smem), ms in best.items():
        times[name][str(keys[(name, block, smem)])] = ms
    rep.data["sweep_times"] = times
    rep.data["sweep_rounds"] = rounds
    rep.data["sweep_work"] = {"total_threads": total, "iters": iters, "n": n}
    rep.data["seconds"]["sweeps"] = round(time.monotonic() - t0, 3)
    rep.data["done"].append("sweeps")
    rep.save()
    return "ok"


def load_heavy(cp, np, spec: OccupancySpec, rep: _Report, inp, out, n: int) -> tuple[dict, list[str], dict]:
    """Load ``heavy`` from every cap's cubin (nothing timed): (cap -> its launch, the errors that
    :func:`time_heavy` records, where a failing launch was: ``current["point"]``)."""
    rep.phase("heavy")
    t0, hv, heavy_name = time.monotonic(), spec.heavy, spec.heavy_kernel
    block, h_iters, current = int(hv.block), int(hv.iters), {"point": None}
    grid, launches, errors = -(-int(hv.total_threads) // block), {}, []
    for cap, path in hv.cubins.items():
        try:
            kern = cp.RawModule(path=path).get_function(heavy_name)
            attrs = rep.data["heavy_attributes"][cap] = _attributes(kern)
        except Exception as exc:
            errors.append(f"`{heavy_name}` (built with -maxrregcount={cap}) could not be loaded: {_describe(exc)}")
            continue
        if attrs["max_threads_per_block"] < block:
            errors.append(f"`{heavy_name}` built with -maxrregcount={cap} cannot be launched with {block} threads "
                          f"per block: with {attrs['registers']} registers a block holds at most "
                          f"{attrs['max_threads_per_block']} threads")
            continue

        def launch(kern=kern, cap=cap):
            current["point"] = cap
            kern((grid,), (block,), (inp, out, np.int32(n), np.int32(h_iters)))
        launches[cap] = launch
    rep.data["seconds"]["heavy_load"] = round(time.monotonic() - t0, 3)
    return launches, errors, current


def time_heavy(cp, spec: OccupancySpec, rep: _Report, launches: dict, errors: list[str], current: dict) -> None:
    """Time heavy at every cap loaded; record the loading's errors first (none after a lost context)."""
    rep.phase("heavy")
    t0, hv = time.monotonic(), spec.heavy
    for message in errors:
        rep.error("heavy", message, student=True)
    if launches:
        try:
            best, rounds = time_launches(cp, launches, int(hv.warmup), int(hv.reps),
                                         int(hv.min_reps), float(hv.max_seconds))
            rep.data["heavy_times_ms"] = best
            rep.data["heavy_rounds"] = rounds
        except Exception as exc:
            rep.error("heavy", f"`{spec.heavy_kernel}` built with -maxrregcount={current['point']} failed when "
                               f"the grader timed it (block {int(hv.block)}): {_describe(exc)}", student=True)
    rep.data["seconds"]["heavy"] = round(time.monotonic() - t0, 3)
    rep.data["done"].append("heavy")


def run(spec: OccupancySpec, result: Path) -> int:
    rep = _Report(result)
    t_start = time.monotonic()
    try:
        import cupy as cp
        import numpy as np
        from cupy.cuda import driver, runtime

        rep.data["device"] = device_props(runtime, runtime.getDevice())
        n = int(spec.n)
        inp = cp.full(n, 0.5, dtype=cp.float32)
        out = cp.zeros(n, dtype=cp.float32)
        cp.cuda.Device().synchronize()
    except Exception as exc:
        rep.error("setup", f"CuPy or the device is not usable: {_describe(exc)}", student=False)
        return 0
    rep.data["seconds"]["setup"] = round(time.monotonic() - t_start, 3)

    # -- everything untimed first: the modules, the Occupancy API ---------------------------------
    work = load_work(cp, driver, runtime, spec, rep)
    heavy, heavy_errors, current = load_heavy(cp, np, spec, rep, inp, out, n)
    if spec.gate and (work is not None or heavy):
        rep.phase("ready")  # the timed part waits for the GPU alone (grader/sandbox/turns.py)
        try:
            wait_at_gate(result, "sweeps")
        except GateClosed as exc:
            rep.data["notes"].append(str(exc))
            rep.phase("stopped")
            return 0

    # -- timed: the sweeps with work, then heavy at each register cap ------------------------------
    if work is not None and time_sweeps(cp, np, driver, work, spec, rep, inp, out, n) == "context lost":
        rep.error("heavy", "not timed: the CUDA context was lost when "
                           f"`{spec.work_kernel}` failed", student=True)
        return 0
    time_heavy(cp, spec, rep, heavy, heavy_errors, current)
    rep.data["phase"] = "finished"
    rep.data["seconds"]["total"] = round(time.monotonic() - t_start, 3)
    rep.save()
    return 0
