"""grader.children: one entry point and protocol, one launcher, and a closed set of runtime files.

Children run from a copy of exactly ``RUNTIME_FILES`` (the sandbox shows them that way, without
the grader's source); these tests run them from such a copy, with tests/fake_cupy standing in for
a GPU where one is needed.
"""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grader import PACKAGE_DIR
from grader.children import RUNTIME_FILES
from grader.children.inputs import make_inputs_xp
from grader.children.protocol import CHECK, MODES
from grader.evidence.protocol import ProbeSpec, ProfileSpec
from grader.records import from_jsonable
from grader.sandbox.launch import child_command, child_env, launch
from tests.child_helpers import launch_json

ROOT = PACKAGE_DIR.parent
FAKE_CUPY = ROOT / "tests" / "fake_cupy"
# What a child may import besides the runtime files: the standard library, NumPy, CuPy and dacite (the
# records' reader: pure Python in the interpreter's site-packages, which the fence shows).
THIRD_PARTY = {"numpy", "cupy", "cupy_backends", "dacite"}


def _module_file(name: str) -> str | None:
    """The runtime-file path of grader module ``name`` (None when it is no file of the package)."""
    rel = Path(*name.split(".")[1:])
    for cand in (rel / "__init__.py", rel.with_suffix(".py")):
        if (PACKAGE_DIR / cand).is_file():
            return cand.as_posix()
    return None


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The nodes under ``if TYPE_CHECKING:``: read by the type checker, never imported when the file runs."""
    skip: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {n for stmt in node.body for n in ast.walk(stmt)}
    return skip


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    tree = ast.parse(path.read_text())
    skip = _type_checking_only(tree)
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_runtime_files_are_closed_under_the_childrens_imports():
    stdlib = set(sys.stdlib_module_names)
    for rel in RUNTIME_FILES:
        for name in _imports(PACKAGE_DIR / rel):
            top = name.split(".")[0]
            if top == "grader":
                target = _module_file(name)
                if target is None and _module_file(name.rsplit(".", 1)[0]):
                    continue  # `from grader.x import name`: a name inside a listed module
                assert target in RUNTIME_FILES, f"{rel} imports {name}, which is not a runtime file"
            else:
                assert top in stdlib or top in THIRD_PARTY or top == "__future__", f"{rel} imports {name}"
    for mode in MODES:
        assert f"children/{mode}.py" in RUNTIME_FILES


def _runtime_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "runtime"
    for rel in RUNTIME_FILES:
        (dest / "grader" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(PACKAGE_DIR / rel, dest / "grader" / rel)
    return dest


def test_a_child_runs_from_the_runtime_files_alone(tmp_path, monkeypatch):
    """The checker, from a copy of the runtime files only, outside the checkout."""
    runtime = _runtime_copy(tmp_path)
    n = 16
    a, b = make_inputs_xp(np, n, 5, "fp32")
    np.save(tmp_path / "c.npy", (a.astype(np.float64) @ b).astype(np.float32))
    spec = {"stages": [{"id": "naive", "inputs": "fp32", "rtol": 1e-4, "out_dir": str(tmp_path),
                        "cases": [{"n": n, "seed": 5, "file": "c.npy", "kind": "check"}]}]}
    monkeypatch.chdir(tmp_path)
    env = child_env(tmp_path / "cache", runtime)
    loaded = ("import sys, grader.children.__main__, grader.children.stage, grader.children.check, "
              "grader.children.profile, grader.children.sanitize, grader.children.occupancy, grader.children.probe, "
              "grader.children.warm; "
              "print('\\n'.join(m.__file__ for n, m in sys.modules.items() if n.split('.')[0] == 'grader'))")
    out = subprocess.run([sys.executable, "-c", loaded], env=env, capture_output=True, text=True, timeout=60)
    files = out.stdout.split()
    assert out.returncode == 0 and len(files) >= 8, out.stderr
    assert all(Path(f).is_relative_to(runtime) for f in files), files
    got, res = launch_json("check", spec, tmp_path / "w", 60, 20_000, runtime=runtime)
    assert got.proc.ok, got.proc.stderr
    assert res["verdicts"]["naive"]["cases"][0]["passed"] is True
    assert got.spec_path.name == "check_spec.json" and got.result_path.name == "check_result.json"


def test_probe_on_the_stand_in_gpu_and_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY))
    got, res = launch_json("probe", {}, tmp_path / "probe", 60, 20_000, cache_dir=tmp_path / "cache")
    assert got.proc.ok, got.proc.stderr
    assert res["ok"] is True and res["cc"] == [9, 0] and res["sms"] == 132
    env = child_env(tmp_path / "cache")
    assert env["CUPY_TF32"] == "0" and env["PYTHONUNBUFFERED"] == "1"
    assert env["CUPY_CACHE_DIR"] == str(tmp_path / "cache")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32")  # one queue per context, whatever the host says
    assert child_env(tmp_path / "cache")["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(ROOT), str(FAKE_CUPY)]


def _numpy_cupy(events: list[str]):
    """A ``cupy`` module over NumPy that records when the memory pool gives its cached blocks back."""
    import types

    fake = types.ModuleType("cupy")
    for name in ("arange", "uint32", "uint16", "float32", "float16", "float64", "ascontiguousarray", "full"):
        setattr(fake, name, getattr(np, name))

    class Pool:
        def free_all_blocks(self):
            events.append("release")

    def made(*_args, **_kwargs):
        raise RuntimeError("no GPU here")

    fake.get_default_memory_pool = lambda: Pool()
    fake.RawModule = made
    fake.cuda = types.SimpleNamespace(Device=lambda: types.SimpleNamespace(synchronize=lambda: None))
    return fake


def test_the_profile_child_gives_cached_blocks_back_once_its_inputs_are_made(tmp_path, monkeypatch):
    # ncu saves every allocation a kernel could reach around each replay pass: the inputs'
    # temporaries must be gone from CuPy's pool before the first launch (and after a late kind).
    from grader.children import profile
    events: list[str] = []
    made = profile.make_inputs_xp
    monkeypatch.setattr(profile, "make_inputs_xp", lambda xp, n, seed, kind: (events.append(kind), made(xp, n, seed, kind))[1])
    monkeypatch.setitem(sys.modules, "cupy", _numpy_cupy(events))
    spec = {"n": 8, "seed": 3, "inputs": ["fp32", "bf16"],
            "stages": [{"id": "wmma", "inputs": "fp16", "cubin": "x.cubin", "kernel": "k",
                        "launch": {"block": [16, 16], "tile": [16, 16], "smem": 0}}]}
    assert profile.run(from_jsonable(ProfileSpec, spec), tmp_path / "result.json") == 0
    assert events == ["fp32", "bf16", "release", "fp16", "release"]
    got = json.loads((tmp_path / "result.json").read_text())
    assert "no GPU here" in got["failures"]["wmma"]


def test_a_child_that_dies_leaves_no_result_and_a_wrong_mode_is_refused(tmp_path):
    # The stage child imports CuPy first: without it (no stand-in on the path) it dies before any result.
    spec = {"id": "naive", "inputs": "fp32", "baseline": "cublas_sgemm", "correctness": [], "out_dir": str(tmp_path)}
    got, res = launch_json("stage", spec, tmp_path, 60, 20_000)
    assert not got.proc.ok and res is None and "ModuleNotFoundError" in got.proc.stderr
    assert got.no_result == "the child wrote no result"
    with pytest.raises(ValueError, match="unknown child mode"):
        child_command("stage.py", tmp_path / "s.json", tmp_path / "r.json")
    with pytest.raises(TypeError, match="takes a CheckSpec"):
        launch(CHECK, ProbeSpec(), tmp_path, 60, 20_000)
    usage = subprocess.run([sys.executable, "-m", "grader.children", "nonsense"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert usage.returncode == 2 and "usage: python -m grader.children {probe,stage" in usage.stderr


def test_a_wrapping_tool_runs_the_child(tmp_path):
    """ncu and compute-sanitizer run the child as their own command; the result still comes back."""
    wrapper = tmp_path / "wrap.sh"
    wrapper.write_text('#!/bin/sh\necho "wrapped: $*" >&2\nexec "$@"\n')
    wrapper.chmod(0o755)
    got, res = launch_json("check", {"stages": []}, tmp_path / "w", 60, 20_000, wrap=[str(wrapper)], name="racecheck")
    assert got.proc.ok and res is not None and res["verdicts"] == {}
    assert "-m grader.children check" in got.proc.stderr
    assert json.loads((tmp_path / "w" / "racecheck_spec.json").read_text()) == {"stages": [], "gate": False, "expect": {"references": []}}


# ---------------------------------------------------------------------------------------
# The stage child's timed launches on the stand-in GPU: the fingerprint vectors
# ---------------------------------------------------------------------------------------
BENCH_N, TIMED = 32, 4


def _stage_run(tmp_path: Path, monkeypatch, name: str, gemm: dict,
               profile_n: int | None = None) -> tuple[dict, dict, list[set[str]]]:
    """Run ``grader.children stage`` on the stand-in GPU (its kernel computes A @ B, or replays): the
    child's spec, its report, and what device memory held during each of its kernel's launches."""
    work, log = tmp_path / name, tmp_path / f"{name}-device.log"
    work.mkdir()
    cubin = work / "tiled.cubin"
    cubin.write_bytes(b"\x7fELF fake cubin: mmTiled")
    spec = {"id": "tiled", "inputs": "fp32", "baseline": "cublas_sgemm", "out_dir": str(work), "l2_bytes": 0,
            "correctness": [{"n": 16, "seed": 3}],
            "bench": {"n": BENCH_N, "seed": 5, "warmup": 1, "reps": TIMED, "min_reps": TIMED,
                      "max_seconds": 600, "flush_l2": True, "profile_n": profile_n},
            "kernel": {"cubin": str(cubin), "kernel": "mmTiled", "inputs": "fp32",
                       "launch": {"block": [16, 16], "tile": [16, 16], "smem": 0}}}
    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY))
    monkeypatch.setenv("FAKE_CUPY", json.dumps({"gemm": gemm, "device_log": str(log)}))
    got, res = launch_json("stage", spec, work, 120, 20_000, cache_dir=tmp_path / f"{name}-cache")
    assert got.proc.ok and res["error"] is None, (got.proc.stderr, res)
    held = [set(json.loads(line)) for line in log.read_text().splitlines()]
    # the correctness launch, the warm-up, the timed launches, those at the profile size
    assert len(held) == 1 + 1 + TIMED + (3 if profile_n else 0)
    return spec, res, held


def _checked(spec: dict, report: dict) -> list[dict]:
    """The checker's verdicts on a stage run (spec and report in their JSON forms), as the grader asks for them."""
    from grader.children.check import check
    from grader.children.warm import _check_entry
    from grader.evidence.protocol import CheckSpec, StageResult, StageSpec
    from grader.records import to_jsonable

    entry = _check_entry("tiled", from_jsonable(StageSpec, spec), from_jsonable(StageResult, report), 1e-3)
    return to_jsonable(check(CheckSpec(stages=[entry]))["tiled"].cases)


def _digest(v: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(v, dtype=np.float32).tobytes()).hexdigest()


def test_no_timed_launch_sees_its_fingerprint_vector_and_the_checker_verifies_every_launch(tmp_path, monkeypatch):
    """Each timed launch's fingerprint vector is drawn after that launch ended, from a seed the spec does
    not hold (two runs of one spec draw different ones): it is in no device memory while the kernel
    runs, nor is a vector the spec's seeds give. The checker verifies every fingerprint and the last
    launch's whole output, and still catches a kernel that replays an earlier result."""
    from grader.children.inputs import integrity_vector
    spec, report, held = _stage_run(tmp_path, monkeypatch, "honest", {})
    from_spec = {_digest(integrity_vector(BENCH_N, s)) for s in (spec["bench"]["seed"], spec["bench"]["seed"] + 1)}
    assert all(not from_spec & during for during in held), "a vector the kernel could derive was in device memory"
    seeds = report["bench"]["vector_seeds"]
    assert report["bench"]["timed_launches"] == TIMED and len(set(seeds)) == TIMED
    for r, seed in enumerate(seeds):
        v = _digest(integrity_vector(BENCH_N, seed))
        assert all(v not in during for during in held[:2 + r + 1]), f"v of timed launch {r} was there before it ended"
    assert any(_digest(integrity_vector(BENCH_N, seeds[0])) in during for during in held[3:])  # the log sees vectors
    cases = _checked(spec, report)
    assert [(c["kind"], c["passed"]) for c in cases] == [("check", True), ("bench", True), ("timed", True)]
    assert f"all {TIMED} timed launches" in cases[2]["description"]

    spec, again, _ = _stage_run(tmp_path, monkeypatch, "again", {})
    assert not set(again["bench"]["vector_seeds"]) & set(seeds)  # not from the spec: drawn afresh

    spec, replayed, _ = _stage_run(tmp_path, monkeypatch, "replay", {"replay_from": 3})  # timed launches 2-4 replay
    cases = _checked(spec, replayed)
    assert [(c["kind"], c["passed"]) for c in cases] == [("check", True), ("bench", False), ("timed", False)]
    assert "timed launch 2, 3, 4 of 4 was wrong" in cases[2]["problem"]


def test_every_benchmark_launch_gets_inputs_no_earlier_launch_could_see(tmp_path, monkeypatch):
    """Each warm-up and timed launch's inputs come from a seed drawn after the launch before it ended:
    no device memory of an earlier launch holds them, the seeds are not the spec's and differ from run
    to run, the report gives each one (the checker reads them) and each warm-up launch's time; the
    launches at the profile size are timed after the timed ones, on fresh inputs too."""
    from grader.children.inputs import make_inputs

    spec, report, held = _stage_run(tmp_path, monkeypatch, "seeds", {}, profile_n=16)
    bench = report["bench"]
    seeds = bench["warmup_seeds"] + bench["input_seeds"]
    assert len(bench["warmup_seeds"]) == len(bench["warmup_ms"]) == 1 and len(bench["input_seeds"]) == TIMED
    assert len(set(seeds)) == len(seeds) and spec["bench"]["seed"] not in seeds and bench["last_seed"] == seeds[-1]
    for k, seed in enumerate(seeds):  # held[0]: the correctness launch; held[1 + k]: benchmark launch k
        a = _digest(make_inputs(BENCH_N, seed, "fp32")[0])
        assert a in held[1 + k], f"launch {k} did not run on its reported inputs"
        assert all(a not in during for during in held[:1 + k]), f"launch {k}'s inputs were there before it"
    assert bench["profile_n"] == 16 and len(bench["profile_ms"]) == 3
    assert [(c["kind"], c["passed"]) for c in _checked(spec, report)] == [("check", True), ("bench", True),
                                                                            ("timed", True)]
    _, again, _ = _stage_run(tmp_path, monkeypatch, "seeds-again", {})
    assert not set(again["bench"]["input_seeds"]) & set(bench["input_seeds"])


def test_the_baseline_is_timed_on_its_own_pristine_inputs_whatever_the_kernel_wrote():
    """Before each baseline launch its inputs are copied from its own originals into the buffers the
    student's kernel just had; when the originals no longer match their sums (a kernel wrote over them),
    they are drawn again from the benchmark's seed, and the run counts it."""
    from grader.children.inputs import make_inputs_xp
    from grader.children.stage import Runner
    from grader.evidence.protocol import BenchRun, BenchSpec, StageSpec

    n, seed = 64, 9
    runner = object.__new__(Runner)
    runner.cp = np
    runner.spec = StageSpec(id="tiled", inputs="fp32", baseline="cublas_sgemm", correctness=[], out_dir="",
                            bench=BenchSpec(n=n, seed=seed, warmup=0, reps=1, min_reps=1, max_seconds=1, flush_l2=False))
    a, b = make_inputs_xp(np, n, seed, "fp32")
    a0, b0 = a.copy(), b.copy()
    t = {"n": n, "a": a, "b": b, "pristine": (a0, b0, runner._digest(a0), runner._digest(b0))}
    want = make_inputs_xp(np, n, seed, "fp32")
    run = BenchRun(n=n, seed=seed)
    a[...], b[...] = make_inputs_xp(np, n, 1234, "fp32")  # the student's launch's inputs
    runner._pristine_baseline_inputs(t, run)
    assert np.array_equal(a, want[0]) and np.array_equal(b, want[1]) and run.baseline_inputs_redrawn == 0
    a0[5, :] = 0.0  # a kernel wrote over the originals, and over the buffers
    a[...] = 0.0
    runner._pristine_baseline_inputs(t, run)
    assert np.array_equal(a, want[0]) and np.array_equal(a0, want[0]) and run.baseline_inputs_redrawn == 1
