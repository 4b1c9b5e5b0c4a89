"""Child process that runs ONE stage of student code. Holds no reference results.

``python -m grader.children stage SPEC.json RESULT.json`` draws inputs from the seeds in the
spec, loads the student's cubin, and:

1. for each correctness size: poisons C with NaN, launches once, saves C;
2. at the benchmark size: times the student's kernel interleaved with the cuBLAS
   baseline (CUDA events, warm-up, L2 flushed before every timed launch, C re-poisoned
   and fresh inputs from a seed the OS gives before every student launch, the baseline's
   inputs regenerated before each of its launches), then saves the C of the last timed
   launch so the checker can verify what was timed; then times a few launches at the
   profile size (grader/profile/agreement.py compares them with Nsight Compute's).

With ``"gate": true`` in the spec it waits at the gate ``correctness`` before step 1 (no other
stage's kernel runs meanwhile) and at ``bench`` before step 2 (nothing else runs on the GPU),
grader/sandbox/turns.py. Everything that is not the student's kernel is made ready before the first
gate (:meth:`Runner.prepare`: every input, the output buffers, cuBLAS and CuPy's kernels warmed up),
so the turns hold only the launches and what they must read back; after the last timed launch
it frees its device memory and releases the GPU (protocol.release_turn) before saving its files.
It rewrites RESULT.json after every phase, so a crash or a time-out still leaves
what was done; the output matrices go to the spec's out_dir. It never judges: the
trusted checker compares the saved outputs with references it computes itself.

Only the student's DEVICE code runs here, never host code: the cubin (``nvcc -cubin``
output: device ELF only) is loaded by the driver (``cp.RawModule(path=...)``) and its one
kernel launched with pointers and N; everything on the host is this file's code. A kernel can
still write anywhere in this process's device memory, CuPy's loaded kernels' data included, so
this child's CuPy cache folder is its own: a copy of the trusted warm cache
(grader/gpu/warm.py, grader/sandbox/launch.py: seed_cache) that no other child loads.
"""
from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("CUPY_TF32", "0")  # cuBLAS SGEMM baseline in true FP32

import numpy as np  # noqa: E402

from grader.children.inputs import (  # noqa: E402
    fresh_input_seed,
    fresh_vector_seed,
    integrity_vector,
    make_inputs_xp,
)
from grader.children.protocol import GateClosed, launch_grid, release_turn, wait_at_gate, write_result  # noqa: E402
from grader.evidence.protocol import BenchRun, BenchSpec, CaseRun, Kernel, KernelGo, StageResult, StageSpec  # noqa: E402
from grader.records import from_jsonable  # noqa: E402

# cuBLAS enums (cublas_api.h / library_types.h)
_CUDA_R_32F, _CUDA_R_16F, _CUDA_R_16BF = 0, 2, 14
_OP_N, _OP_T = 0, 1
_CUBLAS_COMPUTE_32F = 68
_CUBLAS_GEMM_DEFAULT = -1
# cublasGemmEx baselines: (op on the first operand, B; the input data type)
_GEMM_EX = {"cublas_gemmex_fp16": (_OP_N, _CUDA_R_16F), "cublas_gemmex_bf16": (_OP_T, _CUDA_R_16BF)}


class Runner:
    def __init__(self, spec: StageSpec, result: Path):
        import cupy as cp

        self.cp = cp
        self.spec = spec
        self.result = result
        self.out = Path(spec.out_dir)
        self.report = StageResult()
        self.tensor_maps = False

    def save(self) -> None:
        write_result(self.result, self.report)

    # -- loading -------------------------------------------------------------------
    def load(self) -> None:
        """Load the student's cubin (the spec's ``kernel``: under a gate, handed over at the correctness
        turn, once the stage has compiled)."""
        cp = self.cp
        k = self.compiled()
        # The Hopper contract: two tensor maps the grader encodes, then the pointers (grader/children/tma.py).
        self.tensor_maps = k.operands == "tensor_maps"
        self.module = cp.RawModule(path=k.cubin)
        self.kernel = self.module.get_function(k.kernel)
        if k.launch.smem > 48 * 1024:
            self.kernel.max_dynamic_shared_size_bytes = k.launch.smem
        self.report.attributes = {k: int(v) for k, v in self.kernel.attributes.items()
                                  if isinstance(v, (int, np.integer))}
        if self.tensor_maps:  # launched through the driver: CuPy cannot pass a CUtensorMap by value
            from grader.children.tma import MapLauncher

            self.map_launch = MapLauncher(k)
        self.report.loaded = True
        self.save()

    def compiled(self) -> Kernel:
        if self.spec.kernel is None:
            raise ValueError("the spec names no kernel (none was handed over at the gate)")
        return self.spec.kernel

    def bench_spec(self) -> BenchSpec:
        if self.spec.bench is None:
            raise ValueError("the spec has no benchmark")
        return self.spec.bench

    def launch(self, a, b, c, n: int) -> None:
        lp = self.compiled().launch
        bx, by = lp.block
        if self.tensor_maps:
            self.map_launch(self.kernel, a, b, c, n)
        else:
            self.kernel(launch_grid(n, lp.tile), (bx, by, 1), (a, b, c, np.int32(n)), shared_mem=int(lp.smem))

    def device_inputs(self, n: int, seed: int):
        return make_inputs_xp(self.cp, n, seed, self.spec.inputs)

    # -- before the first gate: everything but the student's kernel --------------------------------
    def prepare(self) -> None:
        """Draw every input, make every buffer, warm up cuBLAS and CuPy's kernels: untimed work that
        shares the GPU with the other stages' turns, so the turns hold only the launches. No correct
        product is left in device memory (the baseline's warm-up output is overwritten with NaN)."""
        cp = self.cp
        self.cases = []
        for case in self.spec.correctness:
            n = case.n
            a, b = self.device_inputs(n, case.seed)
            self.cases.append((case, a, b, cp.full((n, n), cp.nan, dtype=cp.float32)))
        self.timing: dict | None = self._bench_buffers() if self.spec.bench is not None else None
        cp.cuda.Device().synchronize()
        self.report.prepared = True

    # -- phase 1: correctness ------------------------------------------------------
    def correctness(self) -> None:
        cp = self.cp
        for case, a, b, c in self.cases:
            n, seed = case.n, case.seed
            t0 = time.perf_counter()
            self.launch(a, b, c, n)
            cp.cuda.Device().synchronize()
            entry = CaseRun(n=n, seed=seed, file=f"c_{n}.npy", wall_ms=(time.perf_counter() - t0) * 1e3)
            np.save(self.out / entry.file, cp.asnumpy(c))
            self.report.correctness.append(entry)
            self.save()
        self.cases = []  # their memory goes back to the pool before the benchmark

    # -- phase 2: timing -----------------------------------------------------------
    def baseline(self, a, b, c_ref):
        cp = self.cp
        if self.spec.baseline == "cublas_sgemm":
            return lambda: cp.matmul(a, b, out=c_ref)
        try:
            from cupy_backends.cuda.libs import cublas
        except ImportError:  # older CuPy
            from cupy.cuda import cublas
        handle = cp.cuda.device.get_cublas_handle()
        n = a.shape[0]
        one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
        # Row-major C = A B is column-major C^T = B^T A^T: pass B first. The BF16 stage's B arrives
        # transposed (K-major), so that first operand is taken transposed (op T).
        op_b, dtype = _GEMM_EX[self.spec.baseline]

        def gemm_ex():
            cublas.gemmEx(handle, op_b, _OP_N, n, n, n, one.ctypes.data, b.data.ptr, dtype, n,
                          a.data.ptr, dtype, n, zero.ctypes.data, c_ref.data.ptr, _CUDA_R_32F, n,
                          _CUBLAS_COMPUTE_32F, _CUBLAS_GEMM_DEFAULT)
        return gemm_ex

    def _bench_buffers(self) -> dict:
        """The benchmark's inputs and buffers, its baseline run once (cuBLAS's library, handle and
        kernel choice loaded) and the matrix-vector kernel of the fingerprints loaded, before any gate."""
        cp = self.cp
        bs = self.bench_spec()
        n = bs.n
        a, b = self.device_inputs(n, bs.seed)
        c = cp.full((n, n), cp.nan, dtype=cp.float32)
        c_ref = cp.empty((n, n), dtype=cp.float32)
        base = self.baseline(a, b, c_ref)
        base()
        c_ref.fill(cp.nan)  # no correct product may sit in device memory while student code runs
        flush = cp.empty(max(self.spec.l2_bytes * 2, 64 << 20), dtype=cp.uint8)
        flush.fill(1)
        # C_r @ v_r of every timed output goes to the checker (see _measure); each v_r is drawn after its
        # launch, so only the matrix-vector kernel is loaded now, on a vector that is no secret.
        cp.asnumpy(c_ref @ cp.ones(n, dtype=cp.float32))
        # The baseline's pristine inputs: copied into a and b before each of its launches, each copy checked
        # against the originals' sums (the student's kernel may write anywhere in device memory).
        a0, b0 = a.copy(), b.copy()
        t = {"n": n, "a": a, "b": b, "c": c, "c_ref": c_ref, "base": base, "flush": flush,
             "pristine": (a0, b0, self._digest(a0), self._digest(b0))}
        pn = self._profile_n()
        if pn:
            pa, pb = self.device_inputs(pn, bs.seed)
            t["profile"] = (pn, pa, pb, cp.full((pn, pn), cp.nan, dtype=cp.float32))
        return t

    def _digest(self, x) -> int:
        """The sum of ``x``'s 16-bit words: a changed element changes it (bar a change made to keep it)."""
        return int(x.view(self.cp.uint16).sum(dtype=self.cp.uint64))

    def _pristine_baseline_inputs(self, t: dict, run: BenchRun) -> None:
        """Put the baseline's own inputs in a and b; when their copies no longer match their sums (a kernel
        wrote there), draw them again from the benchmark's seed, and count it in ``run``."""
        a, b, (a0, b0, da, db) = t["a"], t["b"], t["pristine"]
        a[...], b[...] = a0, b0
        if self._digest(a) != da or self._digest(b) != db:
            a0[...], b0[...] = make_inputs_xp(self.cp, t["n"], self.bench_spec().seed, self.spec.inputs)
            a[...], b[...] = a0, b0
            run.baseline_inputs_redrawn += 1

    def _profile_n(self) -> int | None:
        """The profile size when the benchmark is to time launches there (the kernel's tile divides it)."""
        bs = self.bench_spec()
        pn = bs.profile_n
        tile = self.spec.kernel.launch.tile if self.spec.kernel is not None else None
        if not pn or bs.profile_launches < 1 or (tile is not None and (pn % tile[0] or pn % tile[1])):
            return None
        return pn

    def bench(self) -> None:
        """Time the kernel against the baseline (:meth:`_measure`), release the GPU, save the files."""
        n = self.bench_spec().n
        prints, vector_seeds, last = self._measure()
        self.release()  # _measure's arrays are gone with its frame: their memory can be freed
        run = self.report.bench
        assert run is not None  # _measure made it
        run.file = f"c_bench_{n}.npy"
        run.last_seed = run.input_seeds[-1]
        run.timed_launches = len(prints)
        run.fingerprints = "fingerprints.npy"
        run.vector_seeds = vector_seeds  # v_r of each fingerprint, for the checker
        np.save(self.out / "fingerprints.npy", np.stack(prints).astype(np.float32))
        np.save(self.out / run.file, last)
        self.save()

    def _measure(self) -> tuple[list, list[int], np.ndarray]:
        """The timed launches: (each timed output's fingerprint, the seed of each fingerprint's vector,
        the last output); the times and every launch's inputs' seed go to ``self.report.bench``."""
        cp = self.cp
        bs = self.bench_spec()
        t, self.timing = self.timing, None
        assert t is not None  # prepare() made it
        n, seed = t["n"], bs.seed
        a, b, c, c_ref, flush, base = t["a"], t["b"], t["c"], t["c_ref"], t["flush"], t["base"]
        student = lambda: self.launch(a, b, c, n)  # noqa: E731
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        # Timing integrity: every warm-up and timed student launch gets fresh inputs, drawn on the GPU
        # outside the timed region from a seed the OS gives once the launch before has ended (its end
        # event synchronised): a kernel can read its own inputs' seed from them, but no launch can know
        # or compute a later one's, so none can compute a later product ahead. A fingerprint C_r @ v_r
        # of each timed output is kept, v_r drawn the same way once launch r has ended. The trusted
        # checker, given every seed afterwards, verifies each fingerprint against A_r (B_r v_r) in float64,
        # so a kernel that replays an earlier result or skips work on later launches is caught, whatever
        # it caches; the last output is checked in full. The baseline gets its own pristine inputs before
        # each of its launches (:meth:`_pristine_baseline_inputs`), never the buffers the kernel just had.
        run = BenchRun(n=n, seed=seed)
        prints: list[np.ndarray] = []
        vector_seeds: list[int] = []

        def fresh_inputs() -> int:
            drawn = fresh_input_seed()
            a[...], b[...] = make_inputs_xp(cp, n, drawn, self.spec.inputs)
            return drawn

        def timed(fn, is_student: bool, seeds: list[int]) -> float:
            if is_student:
                seeds.append(fresh_inputs())
                c.fill(cp.nan)  # the kernel must write every element again
            else:
                self._pristine_baseline_inputs(t, run)
            ms = self._timed_launch(fn, flush, e0, e1)
            if is_student:  # the launch has ended: now, and not before, its fingerprint's vector
                vector_seeds.append(fresh_vector_seed())
                prints.append(cp.asnumpy(c @ cp.asarray(integrity_vector(n, vector_seeds[-1]))))
            if not is_student:
                # No correct product may sit in device memory while student code runs:
                # a kernel could otherwise find cuBLAS's answer and copy it.
                c_ref.fill(cp.nan)
            return ms

        for _ in range(bs.warmup):
            run.warmup_ms.append(timed(student, True, run.warmup_seeds))
            timed(base, False, [])
        del prints[:], vector_seeds[:]  # only timed launches are checked (launch numbers 0, 1, ...)
        student_ms, base_ms = run.student_ms, run.baseline_ms
        self.report.bench = run
        start = time.perf_counter()
        for rep in range(bs.reps):
            # Alternate the order so neither kernel always runs on a warmer GPU.
            if rep % 2 == 0:
                student_ms.append(timed(student, True, run.input_seeds))
                base_ms.append(timed(base, False, []))
            else:
                base_ms.append(timed(base, False, []))
                student_ms.append(timed(student, True, run.input_seeds))
            if time.perf_counter() - start > bs.max_seconds and rep + 1 >= bs.min_reps:
                break
        last = cp.asnumpy(c)
        if "profile" in t and self._profile_n():
            run.profile_n, run.profile_ms = t["profile"][0], self._at_profile_size(t["profile"], flush, e0, e1)
        return prints, vector_seeds, last

    def _at_profile_size(self, buffers: tuple, flush, e0, e1) -> list[float]:
        """Launches at the profile size, each on fresh inputs and timed as the benchmark's are, after the
        timed ones: a kernel that takes another path for the profiler's size, its launch count or the
        profiler itself shows it in these times (grader/profile/agreement.py). Their outputs are not
        judged: only their durations are compared."""
        cp = self.cp
        pn, pa, pb, pc = buffers
        times = []
        for _ in range(self.bench_spec().profile_launches):
            pa[...], pb[...] = make_inputs_xp(cp, pn, fresh_input_seed(), self.spec.inputs)
            pc.fill(cp.nan)
            times.append(self._timed_launch(lambda: self.launch(pa, pb, pc, pn), flush, e0, e1))
        return times

    def _timed_launch(self, fn: Callable[[], None], flush, e0, e1) -> float:
        """Milliseconds of ``fn()`` between two events, after the L2 flush when the benchmark asks for it: how
        every timed launch is timed (the benchmark's, the baseline's and those at the profile size)."""
        if self.bench_spec().flush_l2:
            flush.fill(1)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        return float(self.cp.cuda.get_elapsed_time(e0, e1))

    def release(self) -> None:
        """The last kernel has run: free the device memory and let the next turn start while this
        child saves its files and exits (grader/sandbox/turns.py: State.RELEASED)."""
        self.cp.cuda.Device().synchronize()
        self.cp.get_default_memory_pool().free_all_blocks()
        if self.spec.gate:
            release_turn(self.result, "bench")


def _turn(runner: Runner, gate: str) -> KernelGo | None:
    """With ``"gate": true`` in the spec, wait for the grader's go at ``gate`` (grader/sandbox/turns.py):
    the correctness runs share the GPU with no other stage's kernel, the timing with nothing at all.
    The grader times the wait itself (it holds this child's clock meanwhile). Returns what the go
    handed over (the spec's own kernel without a gate), None when it said stop."""
    if not runner.spec.gate:
        return KernelGo(runner.compiled())
    runner.save()
    try:
        go = wait_at_gate(runner.result, gate)
        return KernelGo(runner.compiled()) if gate == "bench" else from_jsonable(KernelGo, go)
    except GateClosed as why:
        runner.report.stopped = str(why)
        runner.save()
        return None


def run(spec: StageSpec, result: Path) -> int:
    """Under a gate the child starts before its stage has compiled: everything but the student's
    kernel is made ready (:meth:`Runner.prepare`), and the correctness turn's go hands over the
    compiled kernel (:class:`~grader.children.protocol.KernelGo`)."""
    runner = None
    try:
        t0 = time.perf_counter()
        runner = Runner(spec, result)  # imports CuPy
        times: dict[str, float] = {}  # the report's, filled as the turns end
        runner.report.times = times
        runner.prepare()  # the CUDA context, inputs, buffers, cuBLAS: everything but the student's kernel
        times["prepare"] = round(time.perf_counter() - t0, 3)
        go = _turn(runner, "correctness")
        if go is None:
            return 0
        runner.spec.kernel = go.kernel
        t1 = time.perf_counter()
        runner.load()  # the student's cubin
        runner.correctness()
        times["correctness"] = round(time.perf_counter() - t1, 3)
        if spec.bench is not None:
            if _turn(runner, "bench") is None:
                return 0
            t2 = time.perf_counter()
            runner.bench()
            times["bench"] = round(time.perf_counter() - t2, 3)
        runner.save()
        return 0
    except Exception as exc:  # a student's launch failure is data, written to RESULT.json
        if runner is None:
            raise
        runner.report.error = f"{type(exc).__name__}: {exc}"
        runner.report.traceback = traceback.format_exc(limit=4)
        runner.save()
        return 3
