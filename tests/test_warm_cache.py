"""The trusted warm CuPy cache (grader/gpu/warm.py) and how the GPU steps use it.

The warm child itself needs a GPU (tests/test_warm_cache_gpu.py runs it); here it is replaced by a
stand-in that writes "compiled kernels" into its cache folder, and the stage children and the
checker by stand-ins that report what they were given. The rest is the real code: the key, the
per-machine folder and its checks, the manifest, the copies, the lock, the wiring.
"""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

import pytest

from grader.children.protocol import wait_at_gate
from grader.evidence.compile import CompileResult, KernelResources
from grader.evidence.limits import Peaks
from grader.evidence.protocol import ProbeResult, WarmResult
from grader.evidence.sandbox import Confinement
from grader.gpu import racecheck, warm
from grader.gpu import session as run_early
from grader.gpu import stages as run_stages
from grader.gpu.job import Job
from grader.gpu.sanitize import Finding, SanitizerRun
from grader.gpu.session import GpuSession
from grader.grading import Environment, StageOutcome
from grader.model import ProcRecord, Verdict
from grader.records import from_jsonable, to_jsonable
from grader.rubric.load import load_rubric
from grader.sandbox import guard as sandbox
from grader.sandbox.launch import ChildResult, seed_cache
from tests.hang_guard import no_hang

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
DEVICE = ProbeResult(ok=True, name="NVIDIA H200", cc=[9, 0], l2_bytes=60 << 20, runtime_version=13000,
                     driver_version=13000, cupy_version="13.6.0")


@pytest.fixture
def warm_child(monkeypatch):
    """The warm child replaced (it needs a GPU): it writes two cubins into its cache; ``calls`` counts runs."""
    state = {"calls": 0, "ok": True, "delay": 0.0}

    def launch(mode, spec, work, timeout_s, output_limit, *, cache_dir=None, **_kw):
        assert mode.name == "warm" and cache_dir is not None
        state["calls"] += 1
        time.sleep(state["delay"])
        cache_dir.mkdir(parents=True, exist_ok=True)
        for name in ("aaa_2.cubin", "bbb_2.cubin"):
            (cache_dir / name).write_bytes(os.urandom(64))
        assert {r.inputs for r in spec.runs} == {"fp32", "fp16", "bf16"}
        ok = state["ok"]
        proc = ProcRecord(["python", "-m", "grader.children", "warm"], 0 if ok else 1, wall_s=1.5,
                          stderr="" if ok else "ImportError: cupy")
        return ChildResult(proc, WarmResult(ok=True) if ok else None, work / "warm_spec.json", work / "warm_result.json")

    monkeypatch.setattr(warm, "launch", launch)
    return state


@pytest.fixture
def bwrap_mode():
    if sandbox.mode().confinement is not Confinement.BWRAP:
        pytest.skip(f"the per-machine cache is kept only with the bwrap fence or a student user: {sandbox.mode()}")


def test_a_childs_cache_starts_as_a_copy_never_a_link(tmp_path):
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "k_2.cubin").write_bytes(b"kernel")
    (seed / "sub").mkdir()
    os.symlink("/etc/hostname", seed / "link_2.cubin")
    dest = tmp_path / "child" / "cupy-cache"
    seed_cache(seed, dest)
    assert sorted(p.name for p in dest.iterdir()) == ["k_2.cubin"]
    assert os.stat(dest / "k_2.cubin").st_ino != os.stat(seed / "k_2.cubin").st_ino
    (dest / "k_2.cubin").write_bytes(b"changed by the child")
    assert (seed / "k_2.cubin").read_bytes() == b"kernel"


def test_the_key_follows_what_cupys_kernels_depend_on():
    key = warm.warm_key(RUBRIC, DEVICE)
    assert key == warm.warm_key(RUBRIC, dataclasses.replace(DEVICE, total_mem=1, sms=132))  # not what changes no kernel
    for change in ({"cupy_version": "14.0.0"}, {"cc": [8, 0]}, {"runtime_version": 12080}, {"name": "H100"}):
        assert warm.warm_key(RUBRIC, dataclasses.replace(DEVICE, **change)) != key, change
    other_sizes = dataclasses.replace(RUBRIC, correctness_sizes=(512, 1024))
    assert warm.warm_key(other_sizes, DEVICE) != key


def test_the_warm_child_is_asked_for_every_kind_of_stage_at_the_rubrics_sizes(tmp_path):
    spec = to_jsonable(warm.warm_spec(RUBRIC, DEVICE, tmp_path))
    kinds = {(st.inputs, st.baseline, st.bench.n, st.bench.flush_l2) for st in RUBRIC.stages}
    assert {(r["inputs"], r["baseline"], r["bench"]["n"], r["bench"]["flush_l2"]) for r in spec["runs"]} == kinds
    for run in spec["runs"]:
        assert [c["n"] for c in run["correctness"]] == list(RUBRIC.correctness_sizes)
        assert run["l2_bytes"] == DEVICE.l2_bytes and run["kernel"]["kernel"] == warm.KERNEL
        tile = run["kernel"]["launch"]["tile"][0]
        assert all(n % tile == 0 for n in [*RUBRIC.correctness_sizes, run["bench"]["n"]])
    # the ncu launch's draws only: the sanitizer's launcher uses no CuPy
    assert {(d["n"], d["inputs"]) for d in spec["draws"]} == {(RUBRIC.profile.n, k) for k in ("fp32", "fp16", "bf16")}


def test_the_machines_cache_is_made_once_then_reused_and_remade_when_changed(tmp_path, monkeypatch, warm_child,
                                                                            bwrap_mode):
    root = tmp_path / "machine"
    monkeypatch.setenv(warm.CACHE_VAR, str(root))
    made, why = warm.prepare(RUBRIC, DEVICE, tmp_path / "work1", 60)
    assert made is not None and why == "" and made.persistent and made.warm_s == 1.5
    assert made.folder == root / made.key / warm.CACHE and warm_child["calls"] == 1
    assert oct(root.stat().st_mode & 0o777) == "0o700"
    assert not (tmp_path / "work1" / "cupy-warm").exists()

    again, _ = warm.prepare(RUBRIC, DEVICE, tmp_path / "work2", 60)
    assert again is not None and again.folder == made.folder and again.warm_s is None and warm_child["calls"] == 1

    (made.folder / "aaa_2.cubin").write_bytes(b"not what the warm child wrote")
    assert warm.prepare(RUBRIC, DEVICE, tmp_path / "work3", 60)[0] is not None and warm_child["calls"] == 2
    (made.folder / "extra_2.cubin").write_bytes(b"a file nobody listed")
    assert warm.prepare(RUBRIC, DEVICE, tmp_path / "work4", 60)[0] is not None and warm_child["calls"] == 3
    assert sorted(p.name for p in made.folder.iterdir()) == ["aaa_2.cubin", "bbb_2.cubin"]


def test_a_cache_others_may_write_or_off_is_made_for_the_grading_only(tmp_path, monkeypatch, warm_child, bwrap_mode):
    root = tmp_path / "machine"
    root.mkdir(mode=0o777)
    root.chmod(0o777)  # group and others may write: not trusted
    monkeypatch.setenv(warm.CACHE_VAR, str(root))
    made, _ = warm.prepare(RUBRIC, DEVICE, tmp_path / "work", 60)
    assert made is not None and not made.persistent and made.folder == tmp_path / "work" / "cupy-warm" / warm.CACHE
    assert list(root.iterdir()) == []
    monkeypatch.setenv(warm.CACHE_VAR, "off")
    made, _ = warm.prepare(RUBRIC, DEVICE, tmp_path / "work2", 60)
    assert made is not None and not made.persistent and warm_child["calls"] == 2


def test_with_the_weak_fence_and_no_student_user_nothing_is_kept(tmp_path, monkeypatch, warm_child):
    monkeypatch.setenv(sandbox.SANDBOX_VAR, "weak")
    monkeypatch.delenv(sandbox.STUDENT_USER_VAR, raising=False)
    monkeypatch.setenv(warm.CACHE_VAR, str(tmp_path / "machine"))
    sandbox.reset_mode()
    try:
        assert warm.cache_root() is None  # a student's program would run as the grader's own user
        made, _ = warm.prepare(RUBRIC, DEVICE, tmp_path / "work", 60)
        assert made is not None and not made.persistent
    finally:
        monkeypatch.undo()
        sandbox.reset_mode()


def test_two_gradings_make_the_machines_cache_once(tmp_path, monkeypatch, warm_child, bwrap_mode):
    monkeypatch.setenv(warm.CACHE_VAR, str(tmp_path / "machine"))
    warm_child["delay"] = 0.5
    got: list = []
    threads = [threading.Thread(target=lambda i=i: got.append(warm.prepare(RUBRIC, DEVICE, tmp_path / f"w{i}", 60)))
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert warm_child["calls"] == 1
    assert got[0][0] is not None and got[1][0] is not None and got[0][0].folder == got[1][0].folder


def test_a_failed_warm_child_leaves_nothing_and_says_why(tmp_path, monkeypatch, warm_child, bwrap_mode):
    root = tmp_path / "machine"
    monkeypatch.setenv(warm.CACHE_VAR, str(root))
    warm_child["ok"] = False
    made, why = warm.prepare(RUBRIC, DEVICE, tmp_path / "work", 60)
    assert made is None and "ImportError: cupy" in why
    assert [p.name for p in root.iterdir()] == [f"{warm.base_key(DEVICE)}.lock"]


def _trimmed(rubric, stage_ids: tuple[str, ...], **changes):
    """A rubric of some of ``rubric``'s stages, as a TA's trimmed copy or the GPU suite's composite is."""
    return dataclasses.replace(rubric, stages=tuple(st for st in rubric.stages if st.id in stage_ids),
                               sha256="a trimmed copy", **changes)


def test_a_rubric_of_some_of_the_shipped_stages_uses_the_shipped_rubrics_cache(tmp_path, monkeypatch, warm_child,
                                                                              bwrap_mode):
    """A rubric of some of the shipped stages (the GPU suite's composite of hostile cases) and the shipped
    rubric, started side by side, share one cache: whichever comes first makes it for both (each costs
    seconds under the GPU's lock)."""
    monkeypatch.setenv(warm.CACHE_VAR, str(tmp_path / "machine"))
    fp32_only = _trimmed(RUBRIC, ("naive", "coalesced"))
    assert warm.warm_key(fp32_only, DEVICE) != warm.warm_key(RUBRIC, DEVICE)
    first, why = warm.prepare(fp32_only, DEVICE, tmp_path / "w1", 60)  # the child is asked for every shipped kind
    assert first is not None and why == "" and first.persistent and warm_child["calls"] == 1
    shipped, _ = warm.prepare(RUBRIC, DEVICE, tmp_path / "w2", 60)
    assert shipped is not None and shipped.folder == first.folder and shipped.warm_s is None
    assert warm_child["calls"] == 1


def test_a_cache_made_for_the_shipped_rubric_serves_a_trimmed_one_and_not_a_rubric_of_other_calls(
        tmp_path, monkeypatch, warm_child, bwrap_mode):
    monkeypatch.setenv(warm.CACHE_VAR, str(tmp_path / "machine"))
    shipped, _ = warm.prepare(RUBRIC, DEVICE, tmp_path / "w1", 60)
    assert shipped is not None and warm_child["calls"] == 1
    trimmed, _ = warm.prepare(_trimmed(RUBRIC, ("wmma", "hopper")), DEVICE, tmp_path / "w2", 60)
    assert trimmed is not None and trimmed.folder == shipped.folder and warm_child["calls"] == 1
    other = _trimmed(RUBRIC, ("naive",), correctness_sizes=(512, 1024))  # calls no kept folder made
    made, _ = warm.prepare(other, DEVICE, tmp_path / "w3", 60)
    assert made is not None and made.folder != shipped.folder and warm_child["calls"] == 2
    assert warm.covers(made.folder.parent, warm.base_key(DEVICE), warm.Calls.of(*warm._calls(RUBRIC)))
    # both stay, each used by what it covers; another device's base is never taken
    for rubric, folder in ((RUBRIC, shipped.folder), (other, made.folder)):
        again, _ = warm.prepare(rubric, DEVICE, tmp_path / "w4", 60)
        assert again is not None and again.folder == folder
    assert warm_child["calls"] == 2
    elsewhere, _ = warm.prepare(RUBRIC, dataclasses.replace(DEVICE, cc=[8, 0]), tmp_path / "w5", 60)
    assert elsewhere is not None and elsewhere.folder not in (shipped.folder, made.folder) and warm_child["calls"] == 3


def test_a_manifest_that_claims_more_calls_than_its_files_hold_is_not_trusted(tmp_path, monkeypatch, warm_child,
                                                                             bwrap_mode):
    monkeypatch.setenv(warm.CACHE_VAR, str(tmp_path / "machine"))
    made, _ = warm.prepare(RUBRIC, DEVICE, tmp_path / "w1", 60)
    assert made is not None
    (made.folder / "aaa_2.cubin").write_bytes(b"changed")  # the listed hash no longer holds
    again, _ = warm.prepare(_trimmed(RUBRIC, ("naive",)), DEVICE, tmp_path / "w2", 60)
    assert again is not None and warm_child["calls"] == 2


# ------------------------------------------------------------------------------------------------
# The GPU steps hand the warm cache to every child
# ------------------------------------------------------------------------------------------------
def _job(tmp_path: Path, *stages: tuple[str, Verdict]) -> Job:
    outcomes = {}
    for sid, verdict in stages:
        st = RUBRIC.stage(sid)
        k = KernelResources(st.kernel, "sm_90a", registers=40, shared_bytes=8192)
        c = CompileResult(st.id, True, cubin=str(tmp_path / f"{sid}.cubin"), kernel=k, launch=st.launch)
        outcomes[sid] = StageOutcome(stage=st, compile=c, verdict=verdict)
    env = Environment(DEVICE, "", None, None, ["-arch=sm_90a"], Peaks(66.9, 989.0, "test"))
    return Job(RUBRIC, tmp_path, tmp_path / "work", env, None, False, lambda _m: None, outcomes=outcomes)


def test_every_stage_child_and_the_checker_start_from_the_warm_cache(tmp_path, monkeypatch, warm_child):
    monkeypatch.setenv(warm.CACHE_VAR, "off")
    seen: dict[str, Path | None] = {}

    def gpu_child(mode, spec, work, timeout_s, output_limit, *, cache_seed=None, **_kw):
        m, mode, spec = mode, mode.name, to_jsonable(spec)
        seen[spec.get("id", mode)] = cache_seed
        if mode == "stage":
            sizes = RUBRIC.correctness_sizes
            report = {"loaded": True, "correctness": [{"n": n, "seed": 1, "file": f"c_{n}.npy"} for n in sizes],
                      "bench": {"n": 4096, "seed": 1, "student_ms": [1.0] * 5, "baseline_ms": [0.9] * 5},
                      "times": {"load": 0.4, "correctness": 0.1, "bench": 0.5}}
        else:  # the checker, started with the runs: it waits at its gate for the stages to judge
            stages = wait_at_gate(work / "check_result.json", "compare")["stages"] if spec.get("gate") \
                else spec["stages"]
            report = {"verdicts": {c["id"]: {"cases": [{"n": 512, "kind": "check", "passed": True,
                                                        "max_scaled_err": 1e-7}]} for c in stages},
                      "times": {"start": 0.5, "references": 0.2, "compare": 0.1}}
        proc = ProcRecord(["python"], 0, wall_s=1.2)
        return ChildResult(proc, from_jsonable(m.result, report), work / "spec.json", work / "result.json")

    def sanitizer(tool, _sanitizer, spec, *_a, **kw):
        seen[tool] = kw.get("cache_seed")  # none: the sanitizer's launcher child uses no CuPy
        return SanitizerRun(tool, spec.id)

    monkeypatch.setattr(run_stages, "launch", gpu_child)
    monkeypatch.setattr(run_early, "launch", gpu_child)
    monkeypatch.setattr(run_early, "run_tool", sanitizer)
    monkeypatch.setattr(run_early, "run_gated", sanitizer)
    job = _job(tmp_path, ("naive", Verdict.NOT_EVALUATED), ("tiled", Verdict.NOT_EVALUATED))
    with GpuSession() as gpu:
        for o in job.outcomes.values():  # the compile step hands each compiled kernel to the session
            gpu.hand_kernel(o)
        run_early.start_gpu_children(job, gpu)  # the session starts for the compiled stages
        run_stages.run_stages(job, gpu)
        run_stages.check_results(job, gpu)
        run_stages.sanitize(job, gpu)
    assert job.cupy_cache == tmp_path / "work" / "cupy-warm" / warm.CACHE and warm_child["calls"] == 1
    assert seen == {"naive": job.cupy_cache, "tiled": job.cupy_cache, "check": job.cupy_cache,
                    "racecheck": None}
    assert all(o.verdict is Verdict.CORRECT for o in job.outcomes.values())
    names = [(p.name, p.stage) for p in job.clock.phases]
    assert ("cupy_cache", "") in names and ("cupy_cache.warm", "") in names
    assert {("check.start", ""), ("check.references", ""), ("check.compare", "")} <= set(names)
    start = next(p for p in job.clock.phases if p.name == "check.start")
    assert start.seconds == pytest.approx(1.2 - 0.3)  # the child's own start, and the process's


def test_without_a_warm_cache_the_children_compile_their_own_and_a_note_says_why(tmp_path, monkeypatch,
                                                                                warm_child):
    monkeypatch.setenv(warm.CACHE_VAR, "off")
    warm_child["ok"] = False
    seeds = []

    def crashing_child(*_a, cache_seed=None, **_k):
        seeds.append(cache_seed)
        return ChildResult(ProcRecord(["python"], 1), None, tmp_path / "s", tmp_path / "r")

    monkeypatch.setattr(run_stages, "launch", crashing_child)
    monkeypatch.setattr(run_early, "launch", crashing_child)
    job = _job(tmp_path, ("naive", Verdict.NOT_EVALUATED))
    with GpuSession() as gpu:
        for o in job.outcomes.values():  # the compile step hands each compiled kernel to the session
            gpu.hand_kernel(o)
        run_early.start_gpu_children(job, gpu)  # the session starts for the compiled stages
        run_stages.run_stages(job, gpu)
    assert seeds and all(s is None for s in seeds) and job.cupy_cache is None
    assert any("CuPy's kernels could not be compiled ahead" in n for n in job.notes)
    assert job.outcomes["naive"].verdict is Verdict.CRASHED  # the run's own verdict, unchanged by the missing cache


def test_racecheck_and_memcheck_run_at_once_and_a_race_stays_the_explanation(tmp_path, monkeypatch):
    spans: dict[str, tuple[float, float]] = {}
    seeds: list = []

    def run_many(tool, _sanitizer, specs, _n, _work, _timeout_s, **kw):
        t0 = time.monotonic()
        time.sleep(0.4)
        spans[tool] = (t0, time.monotonic())
        seeds.append(kw.get("cache_seed"))
        if tool == "racecheck":
            found = {"tiled": [Finding("Race reported between Write access at mmTiled+0x10 in tiled.cu:21")]}
        else:  # memcheck finds something in both failed stages
            found = {s.id: [Finding("Invalid __global__ write of size 4 bytes")] for s in specs}
        return {s.id: SanitizerRun(tool, s.id, found.get(s.id, [])) for s in specs}

    monkeypatch.setattr(racecheck, "run_many", run_many)
    job = _job(tmp_path, ("tiled", Verdict.WRONG), ("blocktiling_1d", Verdict.WRONG))
    job.cupy_cache = tmp_path / "warm"
    run_stages.sanitize(job, GpuSession())
    (r0, r1), (m0, m1) = spans["racecheck"], spans["memcheck"]
    assert r0 < m1 and m0 < r1  # side by side
    assert seeds == [None, None]  # the sanitizer's launcher child uses no CuPy, so no cache
    tiled, bt1d = job.outcomes["tiled"], job.outcomes["blocktiling_1d"]
    assert tiled.verdict is Verdict.RACE and "memcheck" not in tiled.correctness_message
    assert bt1d.verdict is Verdict.WRONG and "memcheck's first finding: `Invalid __global__ write" in \
        bt1d.correctness_message
    assert sorted(p.name for p in job.clock.phases) == ["memcheck", "racecheck"]


def test_racecheck_starts_with_the_runs_and_is_not_run_again(tmp_path, monkeypatch):
    """racecheck starts beside the stage runs (before the checker answers), once per shared-memory
    stage; sanitize reads those runs, and memcheck runs on the stage the checker failed."""
    events: list[tuple[str, float]] = []
    asked: list[str] = []

    def run_tool(tool, _sanitizer, spec, *_a, **_kw):
        asked.append(f"{tool}:{spec.id}")
        events.append((f"{tool} starts", time.monotonic()))
        time.sleep(0.3)
        found = [Finding("Race reported between Write access at mmTiled+0x10 in tiled.cu:21")] \
            if tool == "racecheck" and spec.id == "tiled" else []
        return SanitizerRun(tool, spec.id, found)

    def run_many(tool, _sanitizer, specs, *_a, **_kw):
        return {s.id: run_tool(tool, _sanitizer, s) for s in specs}

    def child(mode, spec, work, *_a, **_kw):
        m, mode, spec = mode, mode.name, to_jsonable(spec)
        if mode == "stage":
            report = {"loaded": True, "correctness": [{"n": 512, "seed": 1, "file": "c_512.npy"}],
                      "bench": {"n": 4096, "seed": 1, "student_ms": [1.0] * 5, "baseline_ms": [0.9] * 5}}
            return ChildResult(ProcRecord(["python"], 0, wall_s=0.1), from_jsonable(m.result, report), work / "s", work / "r")
        assert mode == "check" and spec.get("gate")
        wait_at_gate(work / "check_result.json", "compare")
        events.append(("checker ends", time.monotonic()))
        bad = [{"n": 512, "kind": "check", "passed": False, "problem": "wrong numbers"}]
        good = [{"n": 512, "kind": "check", "passed": True, "max_scaled_err": 1e-7}]
        verdicts = {"tiled": {"cases": bad}, "naive": {"cases": good}, "blocktiling_1d": {"cases": good}}
        return ChildResult(ProcRecord(["python"], 0, wall_s=0.3), from_jsonable(m.result, {"verdicts": verdicts, "times": {}}),
                           work / "s", work / "r")

    monkeypatch.setattr(run_early, "run_tool", run_tool)
    monkeypatch.setattr(run_early, "run_gated", run_tool)
    monkeypatch.setattr(racecheck, "run_many", run_many)
    monkeypatch.setattr(run_stages, "launch", child)
    monkeypatch.setattr(run_early, "launch", child)
    monkeypatch.setattr(warm, "prepare", lambda *_a: (None, "not in this test"))
    job = _job(tmp_path, ("naive", Verdict.NOT_EVALUATED), ("tiled", Verdict.NOT_EVALUATED),
               ("blocktiling_1d", Verdict.NOT_EVALUATED))
    job.outcomes["naive"].compile.kernel.shared_bytes = 0  # type: ignore[union-attr]  # no shared memory
    job.outcomes["naive"].compile.launch = dataclasses.replace(job.outcomes["naive"].compile.launch, smem=0)  # type: ignore[union-attr,type-var]
    with GpuSession() as gpu:
        for o in job.outcomes.values():  # the compile step hands each compiled kernel to the session
            gpu.hand_kernel(o)
        run_early.start_gpu_children(job, gpu)  # the session starts for the compiled stages
        run_stages.run_stages(job, gpu)
        run_stages.check_results(job, gpu)
        run_stages.sanitize(job, gpu)
    assert sorted(asked) == ["memcheck:tiled", "racecheck:blocktiling_1d", "racecheck:tiled"]
    first_checker_end = next(t for e, t in events if e == "checker ends")
    assert all(t < first_checker_end for e, t in events if e == "racecheck starts")
    tiled = job.outcomes["tiled"]
    assert tiled.verdict is Verdict.RACE and tiled.correctness_message.endswith("\nN=512: wrong numbers")
    assert "racecheck: no shared-memory hazard" in job.outcomes["blocktiling_1d"].correctness_message


def test_a_run_that_hangs_stops_its_racecheck(tmp_path, monkeypatch):
    """A stage run that timed out has its early racecheck stopped (the kernel would hang there too)."""
    from grader.model import Limit
    from grader.sandbox.process import Control
    stopped: list[bool] = []

    def run_tool(tool, _sanitizer, spec, *_a, control: Control | None = None, **_kw):
        assert control is not None
        stopped.append(control.cancel.wait(10))
        return SanitizerRun(tool, spec.id, reason="stopped")

    def child(mode, spec, work, *_a, **_kw):
        m, mode, spec = mode, mode.name, to_jsonable(spec)
        if mode == "stage":
            time.sleep(0.2)
            proc = ProcRecord(["python"], -9, wall_s=10.0, timed_out=True, timeout_s=10.0, limit=Limit.TIME)
            return ChildResult(proc, from_jsonable(m.result, {"loaded": True, "correctness": []}), work / "s", work / "r")
        return ChildResult(ProcRecord(["python"], 0), from_jsonable(m.result, {"verdicts": {}}), work / "s", work / "r")

    monkeypatch.setattr(run_early, "run_tool", run_tool)
    monkeypatch.setattr(run_early, "run_gated", run_tool)
    monkeypatch.setattr(run_stages, "launch", child)
    monkeypatch.setattr(run_early, "launch", child)
    monkeypatch.setattr(warm, "prepare", lambda *_a: (None, "not in this test"))
    job = _job(tmp_path, ("tiled", Verdict.NOT_EVALUATED))
    with no_hang("a grading whose warm-up child never ends"):
        with GpuSession() as gpu:
            for o in job.outcomes.values():  # the compile step hands each compiled kernel to the session
                gpu.hand_kernel(o)
            run_early.start_gpu_children(job, gpu)  # the session starts for the compiled stages
            run_stages.run_stages(job, gpu)
            run_stages.check_results(job, gpu)
            run_stages.sanitize(job, gpu)
    assert stopped == [True]
    assert job.outcomes["tiled"].verdict is Verdict.TIMED_OUT
