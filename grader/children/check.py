"""Trusted child process: computes float64 references and judges saved outputs.

``python -m grader.children check SPEC.json VERDICTS.json``. It runs no student code.
It regenerates each stage's inputs from the seeds the grading process chose,
multiplies them in float64 (cuBLAS through CuPy when a GPU is there, NumPy
otherwise) and compares every output the runner saved, using the one test in
:mod:`grader.run.numerics`.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import numpy as np

from grader.children.protocol import GateClosed, wait_at_gate, write_result
from grader.run.inputs import make_inputs_xp, product_operands, rep_seed
from grader.run.numerics import compare


def _array_module():
    try:
        import cupy as cp

        cp.cuda.runtime.getDeviceCount()
        return cp
    except Exception:
        return np


def _load_output(path: Path, n: int, xp):
    """The saved output as an xp array, or a problem string."""
    if not path.is_file():
        return None, "no output was saved (the run stopped before this point)"
    try:
        c = np.load(path, allow_pickle=False)
    except Exception as exc:
        return None, f"output file unreadable ({exc})"
    if c.shape != (n, n) or c.dtype != np.float32:
        return None, f"output has shape {c.shape} and dtype {c.dtype}, expected ({n}, {n}) float32"
    return xp.asarray(c), None


def check_fingerprints(out_dir: Path, case: dict, rtol: float, inputs: str, xp) -> dict:
    """Every timed launch's fingerprint C_r @ v against A_r (B_r v), computed here in float64."""
    n, fp = case["n"], case["fingerprints"]
    base = {"n": n, "kind": "timed", "max_scaled_err": 0.0}
    count = int(fp["count"])
    try:
        got = np.load(out_dir / fp["file"], allow_pickle=False).astype(np.float64)
    except Exception as exc:
        return {**base, "passed": False, "problem": f"fingerprints of the timed launches unreadable ({exc})"}
    if count < 1 or got.shape != (count, n):
        return {**base, "passed": False, "problem": f"fingerprints have shape {got.shape}, expected ({count}, {n})"}
    v = np.random.default_rng(int(fp["integrity_seed"])).random(n, dtype=np.float32) * 2 - 1
    v64 = xp.asarray(v.astype(np.float64))
    bad, worst = [], 0.0
    for r in range(count):
        a, b = make_inputs_xp(xp, n, rep_seed(int(fp["integrity_seed"]), r), inputs)
        a64, b64 = product_operands(xp, a, b, inputs)
        expected = a64 @ (b64 @ v64)
        expected = expected if xp is np else xp.asnumpy(expected)
        scale = np.abs(expected) + np.sqrt(np.mean(expected * expected))
        err = np.abs(got[r] - expected) / scale
        finite = bool(np.isfinite(err).all())
        worst = max(worst, float(err.max()) if finite else float("inf"))
        if not finite or (err > rtol).any():
            bad.append(r + 1)
    if bad:
        return {**base, "passed": False, "max_scaled_err": worst, "problem": (
            f"the output of timed launch {', '.join(map(str, bad[:5]))} of {count} was wrong: every timed "
            "launch gets fresh inputs, and the kernel's result did not match them (a kernel must compute "
            "every launch from its inputs, not reuse an earlier result or skip work)")}
    return {**base, "passed": True, "max_scaled_err": worst, "problem": None,
            "description": f"all {count} timed launches computed the right result for their own fresh inputs"}


class _Times:
    """The checker's own account of its time (seconds per part, summed over the stages), for the
    grading's phase table; each part ends with the device's work done, so it is charged to itself."""

    def __init__(self, xp, into: dict[str, float]):
        self.xp, self.into = xp, into

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self.xp is not np:
                self.xp.cuda.Device().synchronize()
            self.into[name] = round(self.into.get(name, 0.0) + time.perf_counter() - t0, 3)


def _started(times: dict[str, float]):
    """CuPy (or NumPy) ready, its float64 product and input kernels loaded; the time in ``times["start"]``."""
    t0 = time.perf_counter()
    xp = _array_module()
    if xp is not np:
        a, b = make_inputs_xp(xp, 64, 1, "fp32")
        (a.astype(xp.float64) @ b.astype(xp.float64)).sum()
        xp.cuda.Device().synchronize()
    times["start"] = round(time.perf_counter() - t0, 3)
    return xp


def check(spec: dict, times: dict[str, float] | None = None, xp=None) -> dict:
    """Every stage's verdicts; ``times`` (if given) gets the seconds of each part: ``start`` (CuPy's
    import and the CUDA context), ``load`` (the saved outputs), ``references`` (float64 products),
    ``compare`` and ``fingerprints``. ``xp``: the array module, already started."""
    times = times if times is not None else {}
    if xp is None:
        xp = _started(times)
    timer = _Times(xp, times)
    refs: dict[tuple[int, int, str], object] = {}

    def reference(n: int, seed: int, inputs: str):
        key = (n, seed, inputs)
        if key not in refs:
            with timer.part("references"):
                a, b = make_inputs_xp(xp, n, seed, inputs)
                a64, b64 = product_operands(xp, a, b, inputs)
                refs.clear()  # one reference at a time keeps device memory small
                refs[key] = a64 @ b64
        return refs[key]

    verdicts: dict[str, dict] = {}
    for stage in spec["stages"]:
        out_dir = Path(stage["out_dir"])
        results = []
        for case in stage["cases"]:
            n = case["n"]
            with timer.part("load"):
                c, problem = _load_output(out_dir / case["file"], n, xp)
            if problem:
                results.append({"n": n, "kind": case["kind"], "passed": False, "problem": problem})
                continue
            ref = reference(n, case["seed"], stage["inputs"])
            with timer.part("compare"):
                cmp = compare(c, ref, stage["rtol"], xp)
            results.append({"n": n, "kind": case["kind"], "problem": None,
                            "description": cmp.describe(), **asdict(cmp)})
            if case.get("fingerprints"):
                with timer.part("fingerprints"):
                    results.append(check_fingerprints(out_dir, case, stage["rtol"], stage["inputs"], xp))
        verdicts[stage["id"]] = {"cases": results, "backend": xp.__name__}
    return verdicts


def run(spec: dict, result: Path) -> int:
    """RESULT.json: ``{"verdicts": {stage id: ...}, "times": {part: seconds}}``.

    With ``"gate": true`` the checker starts (CuPy, the CUDA context, its kernels) while the stages
    run, then waits at the gate ``compare`` for the list of stages to judge (grader/run/turns.py)."""
    times: dict[str, float] = {}
    xp = None
    if spec.get("gate"):
        xp = _started(times)  # the grader times the wait at the gate itself (it holds this child's clock)
        try:
            spec = {**spec, "stages": wait_at_gate(result, "compare").get("stages") or []}
        except GateClosed:
            write_result(result, {"verdicts": {}, "times": times, "stopped": True})
            return 0
    verdicts = check(spec, times, xp)
    write_result(result, {"verdicts": verdicts, "times": times})
    return 0
