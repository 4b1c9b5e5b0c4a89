"""A trusted warm CuPy kernel cache: every CuPy child's own cache starts as a copy of it.

Why: CuPy compiles each of its own elementwise and reduction kernels (the input draws, the NaN
fills, the checker's comparisons) with NVRTC the first time a process uses it, into
``$CUPY_CACHE_DIR``. Every stage child has a cache folder of its own, in its fenced scratch
folder; starting empty, each would compile the same kernels again, most of each stage child's
correctness phase and of the checker's time (docs/measurements/2026-11-30-h200-service-speed-truth.md).

How: the trusted ``warm`` child (grader/children/warm.py) makes the stage child's, the checker's
and the profile child's CuPy calls, at the rubric's sizes and types, on a kernel of the grader's
own, into a folder only the grader writes; its files are then listed with their SHA-256 in a
manifest. Each child's cache folder starts as a COPY of exactly those files
(:func:`grader.sandbox.launch.seed_cache`): never a link, never a shared writable folder, so a
child (a stage child runs a student's kernel in its process) can change only its own copy, which
no other child loads.

Where: per machine, so only the first grading pays for it: ``$GRADER_CUPY_CACHE`` (default
``~/.cache/gemm-grader/cupy``), one folder per set of kernels, named by its key: CuPy's version, the
device (name, compute capability, CUDA runtime and driver), the grader's code version (the *base*),
then the warm calls (sizes, input kinds, baselines). A grading uses a kept folder of its base whose
manifest lists every call it needs (:func:`covers`), its own key's first. A folder is made for the
grading's calls together with those of the rubric the grader ships (``grader.DEFAULT_RUBRIC``), so a
rubric that takes only some of the shipped stages (``--stages``, a TA's trimmed copy, the GPU suite's
composite of hostile cases) finds the shipped rubric's folder enough: a warm child takes seconds
under the GPU's lock, and the GPU suite would otherwise make two, one for rubric.yaml and one for its
composite (docs/measurements/2026-12-01-h200-speed-round5.md). A kept folder is used only while

* it and its root belong to the grader's user and nobody else may write them;
* no student code can run as the grader's own user (the bwrap fence, or a student user): in the
  weak fence without one, a student's program could write there, so the cache is then made for
  each grading, in its work folder, like ``GRADER_CUPY_CACHE=off``;
* every file still has its listed hash, and there is no other file (else it is made again).

Gradings on one machine share a base under a lock file, so two never make a folder at once. A cache
that lacks a kernel costs only time: the child compiles it into its own copy.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.children.protocol import WARM
from grader.evidence.protocol import BenchSpec, Case, Draw, Kernel, LaunchShape, ProbeResult, WarmSpec, WarmStage
from grader.records import to_jsonable
from grader.rubric.types import Rubric
from grader.sandbox.kept import file_hashes, kept_root, private_dir
from grader.sandbox.launch import launch
from grader.sandbox.lock import held

CACHE_VAR = "GRADER_CUPY_CACHE"  # a folder, or "off": a cache for each grading only
CACHE = "cupy-cache"  # in a warm folder: the flat folder of CuPy's cubins
MANIFEST = "manifest.json"  # in a warm folder: {"key": ..., "files": {name: sha256}}
KERNEL = "warm_gemm"  # grader/children/warm.py's kernel
SPEC_VERSION = 1  # bump when the warm child's calls change in a way the code version would not show


@dataclass(frozen=True)
class WarmCache:
    folder: Path  # the verified flat folder of cubins every child's cache starts as a copy of
    key: str
    persistent: bool  # kept for later gradings on this machine
    warm_s: float | None = None  # the warm child's wall time, when it ran for this grading


def _device_identity(device: ProbeResult) -> dict[str, object]:
    return {k: getattr(device, k) for k in ("name", "cc", "runtime_version", "driver_version", "cupy_version")}


def warm_runs(rubric: Rubric) -> list[WarmStage]:
    """One run per kind of stage (inputs, baseline, benchmark size, L2 flush), as the stage child
    would be asked, without the paths and seeds (they change no kernel)."""
    sizes = list(rubric.correctness_sizes)
    kinds = dict.fromkeys((st.inputs, st.baseline, st.bench.n, st.bench.flush_l2, st.rtol) for st in rubric.stages)
    runs = []
    for inputs, baseline, n, flush, rtol in kinds:
        tile = 16 if all(m % 16 == 0 for m in [*sizes, n]) else 1  # one thread per element of C
        kernel = Kernel(cubin="", kernel=KERNEL, inputs=inputs,
                        launch=LaunchShape(block=[tile, tile], tile=[tile, tile], smem=0))
        runs.append(WarmStage(id="", inputs=inputs, baseline=baseline, rtol=rtol, kernel=kernel, out_dir="",
                              correctness=[Case(n=m, seed=0) for m in sizes],
                              bench=BenchSpec(n=n, seed=0, warmup=1, reps=1, min_reps=1, max_seconds=0,
                                              flush_l2=flush)))
    return runs


def _calls(rubric: Rubric) -> tuple[list[WarmStage], list[Draw]]:
    """The warm child's calls for ``rubric``: :func:`warm_runs`, and the profile child's draws (the
    ncu launch's; the sanitizer's launcher uses no CuPy)."""
    inputs = sorted({st.inputs for st in rubric.stages})
    return warm_runs(rubric), [Draw(n=rubric.profile.n, inputs=k) for k in inputs]


def _canon(thing: object) -> str:
    return json.dumps(to_jsonable(thing), sort_keys=True, default=str)


def _digest_of(core: object) -> str:
    return hashlib.sha256(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()[:16]


def base_key(device: ProbeResult) -> str:
    """What every kernel of a cache depends on: the warm calls' version, the grader's code, CuPy and the device."""
    from grader import code_version

    return _digest_of({"version": SPEC_VERSION, "code": code_version(), "device": _device_identity(device)})


@dataclass(frozen=True)
class Calls:
    """A set of warm calls, each as its canonical JSON text (the manifest lists them so)."""

    runs: frozenset[str]
    draws: frozenset[str]

    @classmethod
    def of(cls, runs: list[WarmStage], draws: list[Draw]) -> Calls:
        return cls(frozenset(_canon(r) for r in runs), frozenset(_canon(d) for d in draws))

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Calls):
            return NotImplemented
        return self.runs <= other.runs and self.draws <= other.draws

    def digest(self) -> str:
        return _digest_of({"runs": sorted(self.runs), "draws": sorted(self.draws)})


def _key(device: ProbeResult, calls: Calls) -> str:
    return f"{base_key(device)}-{calls.digest()}"


def warm_key(rubric: Rubric, device: ProbeResult) -> str:
    """What the cache's kernels depend on: CuPy and the device, the grader's code, the calls made."""
    return _key(device, Calls.of(*_calls(rubric)))


def covers(folder: Path, base: str, calls: Calls) -> bool:
    """Whether a kept folder's manifest says it was made, for this base, with every one of ``calls``
    (its files are checked by :func:`verified`)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        made = Calls(frozenset(manifest["runs"]), frozenset(manifest["draws"]))
        return str(manifest.get("key", "")).startswith(f"{base}-") and calls <= made
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _shipped_calls(rubric_sha256: str) -> tuple[list[WarmStage], list[Draw]]:
    """The shipped rubric's calls (grader.DEFAULT_RUBRIC), none when the grading's rubric (its
    ``rubric_sha256``) is it or it does not load."""
    from grader import DEFAULT_RUBRIC
    from grader.rubric.load import RubricError, load_rubric

    try:
        shipped = load_rubric(DEFAULT_RUBRIC)
    except (RubricError, OSError):
        return [], []
    return ([], []) if shipped.sha256 == rubric_sha256 else _calls(shipped)


def _union(*sets: tuple[list[WarmStage], list[Draw]]) -> tuple[list[WarmStage], list[Draw]]:
    runs: dict[str, WarmStage] = {}
    draws: dict[str, Draw] = {}
    for rs, ds in sets:
        runs.update((_canon(r), r) for r in rs)
        draws.update((_canon(d), d) for d in ds)
    return list(runs.values()), list(draws.values())


def warm_spec(rubric: Rubric, device: ProbeResult, folder: Path) -> WarmSpec:
    """The warm child's spec: :func:`warm_runs` with their seeds and output folders, and the draws."""
    return _spec(*_calls(rubric), device, folder)


def _spec(runs: list[WarmStage], draws: list[Draw], device: ProbeResult, folder: Path) -> WarmSpec:
    seeded = []
    for i, run in enumerate(copy.deepcopy(runs)):
        run.correctness = [Case(n=c.n, seed=11 + j) for j, c in enumerate(run.correctness)]
        if run.bench is not None:
            run.bench.seed = 5
        run.out_dir, run.l2_bytes = str(folder / f"run{i}"), device.l2_bytes
        seeded.append(run)
    return WarmSpec(runs=seeded, draws=list(draws))


def cache_root() -> Path | None:
    """The per-machine folder of warm caches, or None: switched off, not safe here, or unusable
    (grader/sandbox/kept.py)."""
    return kept_root(CACHE_VAR, "cupy")


def verified(folder: Path, key: str) -> bool:
    """The folder is the grader's alone, and its cache holds exactly the manifest's files, unchanged."""
    cache = folder / CACHE
    if not (private_dir(folder) and private_dir(cache)):
        return False
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        return manifest.get("key") == key and file_hashes(cache) == manifest.get("files")
    except (OSError, ValueError):
        return False


def _make(folder: Path, calls: tuple[list[WarmStage], list[Draw]], device: ProbeResult, key: str,
          timeout_s: float) -> tuple[float | None, str]:
    """Run the warm child into ``folder/cupy-cache`` and write the manifest: (its seconds, "") or
    (None, why not). The child's outputs (matrices at the benchmark size) are deleted after."""
    cache, runs = folder / CACHE, folder / "runs"
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    spec, made = _spec(*calls, device, runs), Calls.of(*calls)
    child = launch(WARM, spec, folder, timeout_s, 20_000, cache_dir=cache)
    shutil.rmtree(runs, ignore_errors=True)
    if not (child.proc.ok and child.result and child.result.ok):
        return None, f"{child.proc.brief()}: {child.no_result or child.proc.stderr.strip()[-300:]}"
    files = file_hashes(cache)
    if files is None:
        return None, "the warm child left something other than files in its cache"
    (folder / MANIFEST).write_text(json.dumps({"key": key, "files": files, "runs": sorted(made.runs),
                                               "draws": sorted(made.draws)}, indent=1))
    return child.proc.wall_s, ""


def _kept(root: Path, base: str, key: str, calls: Calls) -> Path | None:
    """A verified kept folder of ``base`` that covers ``calls``: ``key``'s own first, then the others."""
    others = sorted(p for p in root.glob(f"{base}-*") if p.name != key and not p.name.startswith("."))
    for folder in [root / key, *others]:
        if folder.is_dir() and covers(folder, base, calls) and verified(folder, folder.name):
            return folder
    return None


@dataclass(frozen=True)
class WarmRequest:
    """What one grading asks of the warm cache, read from its rubric and device up front (grader/gpu/launch_plan.py):
    its warm calls, the device they are made on, its rubric's hash (the shipped rubric's calls are added
    for any other), its work folder (a cache of its own when none may be kept) and the warm child's limit."""

    runs: list[WarmStage]
    draws: list[Draw]
    device: ProbeResult
    rubric_sha256: str
    work: Path
    timeout_s: float


def request(rubric: Rubric, device: ProbeResult, work: Path, timeout_s: float) -> WarmRequest:
    """The warm cache ``rubric``'s grading in ``work`` asks for on ``device``."""
    runs, draws = _calls(rubric)
    return WarmRequest(runs, draws, device, rubric.sha256, work, timeout_s)


def prepare(rubric: Rubric, device: ProbeResult, work: Path, timeout_s: float) -> tuple[WarmCache | None, str]:
    """:func:`prepare_request` for ``rubric``'s grading in ``work`` on ``device``."""
    return prepare_request(request(rubric, device, work, timeout_s))


def prepare_request(req: WarmRequest) -> tuple[WarmCache | None, str]:
    """The warm cache for this grading: a kept one of the machine that covers its calls (made now, for
    its calls and the shipped rubric's, if there is none), else one made in its work folder. (cache, "") or
    (None, why there is none: the children then compile CuPy's kernels themselves)."""
    own = (req.runs, req.draws)
    own_calls, base = Calls.of(*own), base_key(req.device)
    key = _key(req.device, own_calls)
    root = cache_root()
    if root is None:
        return _fresh(req.work / "cupy-warm", own, key, req, kept_in=None)
    with held(root / f"{base}.lock"):
        found = _kept(root, base, key, own_calls)
        if found is not None:
            return WarmCache(found / CACHE, found.name, True), ""
        calls = _union(own, _shipped_calls(req.rubric_sha256))
        key = _key(req.device, Calls.of(*calls))
        return _fresh(root / key, calls, key, req, kept_in=root)


def _fresh(folder: Path, calls: tuple[list[WarmStage], list[Draw]], key: str, req: WarmRequest,
           kept_in: Path | None) -> tuple[WarmCache | None, str]:
    """A cache made now into ``folder`` for ``calls``: kept for later gradings when ``kept_in`` (the
    machine's root, whose lock is held) is given, made in a temporary folder there and renamed into
    place once complete; else the grading's own."""
    shutil.rmtree(folder, ignore_errors=True)
    # 0700; renamed into place once complete
    made = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=kept_in)) if kept_in is not None else folder
    secs, why = _make(made, calls, req.device, key, req.timeout_s)
    if secs is None:
        if kept_in is not None:
            shutil.rmtree(made, ignore_errors=True)
        return None, why
    if kept_in is not None:
        os.rename(made, folder)
    return WarmCache(folder / CACHE, key, kept_in is not None, secs), ""
