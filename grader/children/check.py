"""Trusted child process: computes float64 references and judges saved outputs.

``python -m grader.children check SPEC.json VERDICTS.json``. It runs no student code.
It regenerates each stage's inputs from the seeds the grading process chose,
multiplies them in float64 (cuBLAS through CuPy when a GPU is there, NumPy
otherwise) and compares every output the runner saved, using the one test in
:mod:`grader.children.numerics`.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from grader.children.inputs import integrity_vector, make_inputs_xp, product_operands
from grader.children.numerics import compare
from grader.children.protocol import GateClosed, wait_at_gate, write_result
from grader.evidence.protocol import (
    CaseVerdict,
    CheckCase,
    CheckGo,
    CheckResult,
    CheckSpec,
    Expect,
    Fingerprints,
    StageVerdict,
)
from grader.records import from_jsonable


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


class Products:
    """The float64 products the checker compares with, each computed once per grading: references
    (A @ B for a size, a seed and an input kind) and the timed launches' fingerprints (A_r (B_r v_r)).
    :meth:`precompute` makes the references a grading is expected to need while the stages still run
    (the spec's ``expect``); what was not foreseen (a benchmark stopped early by its time cap: another
    last seed) is computed when asked for. The timed launches' inputs and the fingerprints' vectors are
    drawn by the stage children from the OS, each after the launch before, so their products (a
    benchmark's last output's reference among them) can only be made afterwards: :meth:`fingerprints`
    makes those of one launch from one drawing of its inputs."""

    def __init__(self, xp):
        self.xp = xp
        self.refs: dict[tuple[int, int, str], object] = {}
        self.kept: set[tuple[int, int, str]] = set()  # precomputed references, never evicted
        self.prints: dict[tuple[int, str, int, int], np.ndarray] = {}

    def reference(self, n: int, seed: int, inputs: str):
        key = (n, seed, inputs)
        if key not in self.refs:
            for old in [k for k in self.refs if k not in self.kept]:
                del self.refs[old]  # one unforeseen reference at a time keeps device memory small
            a, b = make_inputs_xp(self.xp, n, seed, inputs)
            a64, b64 = product_operands(self.xp, a, b, inputs)
            self.refs[key] = a64 @ b64
        return self.refs[key]

    def fingerprints(self, n: int, inputs: str, input_seed: int, vector_seeds: list[int]) -> None:
        """A_r (B_r v_r) of one timed launch, its inputs drawn from ``input_seed``, for each of
        ``vector_seeds`` (v_r as grader/children/stage.py draws it), from one drawing of the launch's
        inputs; kept on the host for :meth:`fingerprint`."""
        wanted = [s for s in dict.fromkeys(vector_seeds) if (n, inputs, input_seed, s) not in self.prints]
        if not wanted:
            return
        xp = self.xp
        a, b = make_inputs_xp(xp, n, input_seed, inputs)
        a64, b64 = product_operands(xp, a, b, inputs)
        vectors = xp.asarray(np.stack([integrity_vector(n, s) for s in wanted], axis=1).astype(np.float64))
        expected = a64 @ (b64 @ vectors)
        expected = expected if xp is np else xp.asnumpy(expected)
        for k, s in enumerate(wanted):
            self.prints[(n, inputs, input_seed, s)] = np.ascontiguousarray(expected[:, k])

    def fingerprint(self, n: int, inputs: str, input_seed: int, vector_seed: int) -> np.ndarray:
        """A_r (B_r v_r) of one timed launch, its inputs drawn from ``input_seed`` and its vector from
        ``vector_seed``, on the host."""
        self.fingerprints(n, inputs, input_seed, [vector_seed])
        return self.prints[(n, inputs, input_seed, vector_seed)]

    def precompute(self, expect: Expect) -> None:
        """``expect``: the references [n, seed, inputs] (grader/gpu/session.py: checker_expectations)."""
        for n, seed, inputs in expect.references:
            self.kept.add((int(n), int(seed), str(inputs)))
            self.reference(int(n), int(seed), str(inputs))


def _seeds(values: list[int], count: int, bits: int) -> list[int] | None:
    ok = len(values) == count and all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**bits
                                      for s in values)
    return values if ok else None


def vector_seeds(fp: Fingerprints) -> list[int] | None:
    """The seeds of a benchmark's fingerprint vectors, one per timed launch; None when missing or not
    ``count`` integers of 63 bits (grader/children/inputs.py: fresh_vector_seed)."""
    return _seeds(fp.vector_seeds, fp.count, 63)


def input_seeds(fp: Fingerprints) -> list[int] | None:
    """The seeds of a benchmark's timed launches' inputs, one per launch; None when missing or not
    ``count`` integers of 31 bits (grader/children/inputs.py: fresh_input_seed)."""
    return _seeds(fp.input_seeds, fp.count, 31)


def _all_fingerprints(spec: CheckSpec, products: Products) -> None:
    """Every stage's fingerprint products, launch by launch: one drawing of a launch's inputs serves
    every vector asked of it."""
    wanted: dict[tuple[int, str, int], list[int]] = {}
    for stage in spec.stages:
        for case in stage.cases:
            fp = case.fingerprints
            if fp is None:
                continue
            for seed, vseed in zip(input_seeds(fp) or [], vector_seeds(fp) or []):
                wanted.setdefault((case.n, stage.inputs, seed), []).append(vseed)
    for (n, inputs, seed), vseeds in sorted(wanted.items()):
        products.fingerprints(n, inputs, seed, vseeds)


def check_fingerprints(out_dir: Path, case: CheckCase, fp: Fingerprints, rtol: float, inputs: str,
                       products: Products) -> CaseVerdict:
    """Every timed launch's fingerprint C_r @ v_r against A_r (B_r v_r), computed here in float64."""
    n, count = case.n, fp.count

    def failed(problem: str, worst: float = 0.0) -> CaseVerdict:
        return CaseVerdict(n=n, kind="timed", passed=False, problem=problem, max_scaled_err=worst)

    seeds, launch_seeds = vector_seeds(fp), input_seeds(fp)
    if seeds is None or launch_seeds is None:
        which = "fingerprint vectors" if seeds is None else "inputs"
        return failed(f"the seeds of the timed launches' {which} are missing or malformed (expected {count} integers)")
    try:
        got = np.load(out_dir / fp.file, allow_pickle=False).astype(np.float64)
    except Exception as exc:
        return failed(f"fingerprints of the timed launches unreadable ({exc})")
    if count < 1 or got.shape != (count, n):
        return failed(f"fingerprints have shape {got.shape}, expected ({count}, {n})")
    bad, worst = [], 0.0
    for r in range(count):
        expected = products.fingerprint(n, inputs, launch_seeds[r], seeds[r])
        scale = np.abs(expected) + np.sqrt(np.mean(expected * expected))
        err = np.abs(got[r] - expected) / scale
        finite = bool(np.isfinite(err).all())
        worst = max(worst, float(err.max()) if finite else float("inf"))
        if not finite or (err > rtol).any():
            bad.append(r + 1)
    if bad:
        return failed(f"the output of timed launch {', '.join(map(str, bad[:5]))} of {count} was wrong: every timed "
                      "launch gets fresh inputs, and the kernel's result did not match them (a kernel must compute "
                      "every launch from its inputs, not reuse an earlier result or skip work)", worst)
    return CaseVerdict(n=n, kind="timed", passed=True, max_scaled_err=worst,
                       description=f"all {count} timed launches computed the right result for their own fresh inputs")


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


def check(spec: CheckSpec, times: dict[str, float] | None = None, xp=None,
          products: Products | None = None) -> dict[str, StageVerdict]:
    """Every stage's verdicts; ``times`` (if given) gets the seconds of each part: ``start`` (CuPy's
    import and the CUDA context), ``load`` (the saved outputs), ``references`` (float64 products),
    ``compare`` and ``fingerprints``. ``xp``: the array module, already started; ``products``: the
    products computed so far (:meth:`Products.precompute`)."""
    times = times if times is not None else {}
    if xp is None:
        xp = _started(times)
    products = products or Products(xp)
    timer = _Times(xp, times)

    with timer.part("fingerprints"):
        _all_fingerprints(spec, products)
    verdicts: dict[str, StageVerdict] = {}
    for stage in spec.stages:
        out_dir = Path(stage.out_dir)
        results = []
        for case in stage.cases:
            n = case.n
            with timer.part("load"):
                c, problem = _load_output(out_dir / case.file, n, xp)
            if problem:
                results.append(CaseVerdict(n=n, kind=case.kind, passed=False, problem=problem))
                continue
            with timer.part("references"):
                ref = products.reference(n, case.seed, stage.inputs)
            with timer.part("compare"):
                cmp = compare(c, ref, stage.rtol, xp)
            results.append(CaseVerdict(
                n=n, kind=case.kind, passed=cmp.passed, description=cmp.describe(), max_scaled_err=cmp.max_scaled_err,
                max_abs_err=cmp.max_abs_err, rtol=cmp.rtol, bad_count=cmp.bad_count,
                nonfinite_count=cmp.nonfinite_count, first_bad=None if cmp.first_bad is None else list(cmp.first_bad),
                got=cmp.got, expected=cmp.expected))
            if case.fingerprints is not None:
                with timer.part("fingerprints"):
                    results.append(check_fingerprints(out_dir, case, case.fingerprints, stage.rtol, stage.inputs,
                                                      products))
        verdicts[stage.id] = StageVerdict(cases=results, backend=xp.__name__)
    return verdicts


def run(spec: CheckSpec, result: Path) -> int:
    """RESULT.json: ``{"verdicts": {stage id: ...}, "times": {part: seconds}}``.

    With ``"gate": true`` the checker starts (CuPy, the CUDA context, its kernels) while the stages
    run, computes the products the spec's ``expect`` foresees, then waits at the gate ``compare`` for
    the list of stages to judge (grader/sandbox/turns.py)."""
    times: dict[str, float] = {}
    xp = products = None
    if spec.gate:
        xp = _started(times)  # the grader times the wait at the gate itself (it holds this child's clock)
        products = Products(xp)
        t0 = time.perf_counter()
        products.precompute(spec.expect)
        if xp is not np:
            xp.cuda.Device().synchronize()
        times["precompute"] = round(time.perf_counter() - t0, 3)
        try:
            spec = CheckSpec(stages=from_jsonable(CheckGo, wait_at_gate(result, "compare")).stages)
        except GateClosed:
            write_result(result, CheckResult(times=times, stopped=True))
            return 0
    verdicts = check(spec, times, xp, products)
    write_result(result, CheckResult(verdicts=verdicts, times=times))
    return 0
