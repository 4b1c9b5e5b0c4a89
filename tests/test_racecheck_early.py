"""racecheck's children start before the compiles and get each kernel as its compile ends.

The child under the tool is real (grader.children sanitize, through the stand-in driver and a
stand-in compute-sanitizer that runs its command); the grading's side is the real schedule and
compile step, with the compiles replaced by ones that take known times.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader import pipeline
from grader.children.protocol import GateClosed, gate_files, wait_at_gate, write_result
from grader.evidence.compile import CompileResult, KernelResources
from grader.evidence.limits import Peaks
from grader.evidence.protocol import Kernel, ProbeResult
from grader.gpu import racecheck, sanitize
from grader.gpu import session as gpu_session
from grader.gpu.job import Job
from grader.gpu.launch_plan import launch_plan
from grader.gpu.plan import Role, Starts
from grader.gpu.sanitize import SanitizerRun
from grader.gpu.session import GpuSession
from grader.grading import Environment, StageOutcome
from grader.model import Verdict
from grader.records import from_jsonable
from grader.rubric.load import load_rubric
from grader.sandbox.turns import Schedule, State
from tests.test_sanitize_child import STAGE, _calls, _stand_in, _use_fake

ROOT = Path(__file__).resolve().parents[1]
RUBRIC = load_rubric(ROOT / "rubric.yaml")


def test_the_guess_before_the_compile_reads_the_source(tmp_path):
    guesses = {st.id: racecheck.may_use_shared_memory(ROOT / "solutions", st) for st in RUBRIC.stages}
    assert guesses == {"naive": False, "coalesced": False, "tiled": True, "blocktiling_1d": True,
                       "blocktiling_2d": True, "wmma": True, "hopper": True}
    assert not any(racecheck.may_use_shared_memory(ROOT / "starter", st) for st in RUBRIC.stages)
    naive = RUBRIC.stage("naive")
    (tmp_path / "gemm").mkdir()
    (tmp_path / "gemm" / "naive.cu").write_text('#include "tiles.cuh"\n__global__ void mmNaive() {}\n')
    assert racecheck.may_use_shared_memory(tmp_path, naive)  # a header may declare it
    (tmp_path / "gemm" / "naive.cu").unlink()
    assert racecheck.may_use_shared_memory(tmp_path, naive)  # unreadable: the compile will say why


def _gated(tmp_path: Path, work: Path, **kw) -> tuple[threading.Thread, dict]:
    """run_gated in a thread (as the schedule runs it); the holder gets its result."""
    got: dict = {}
    handed: dict = {}
    known = from_jsonable(Kernel, {"id": "tiled", "kernel": STAGE["kernel"], "inputs": STAGE["inputs"], "cubin": "",
                                   "launch": {"block": [], "tile": [], "smem": 0}})

    def go() -> None:
        got["run"] = sanitize.run_gated("racecheck", _stand_in(tmp_path), known, 256, work, 60,
                                        handed=lambda: from_jsonable(Kernel, handed["spec"]) if "spec" in handed else None, blocks=(2, 2), **kw)

    thread = threading.Thread(target=go)
    thread.start()
    got["handed"] = handed
    return thread, got


def _arrives(result: Path, gate: str = "racecheck", within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not gate_files(result, gate)[0].exists():
        assert time.monotonic() < deadline, "the child never reached its gate"
        time.sleep(0.01)


def test_a_gated_child_starts_the_driver_and_uploads_its_inputs_then_waits_for_its_kernel(
        tmp_path, monkeypatch, fake_libcuda):
    cubin = tmp_path / "tiled.cubin"
    cubin.write_bytes(b"\x7fELF")
    log, work = tmp_path / "driver.log", tmp_path / "w"
    _use_fake(monkeypatch, fake_libcuda, log)
    thread, got = _gated(tmp_path, work)
    result = work / "racecheck_result.json"
    _arrives(result)
    # At the gate: the context and both inputs are there, nothing of the student's is loaded.
    assert _calls(log, "cuInit") and len(_calls(log, "cuMemAlloc_v2")) == 2 and not _calls(log, "cuModuleLoad")
    spec = {**STAGE, "cubin": str(cubin)}
    got["handed"]["spec"] = spec
    write_result(gate_files(result, "racecheck")[1], {"stages": [spec]})
    thread.join(60)
    run = got["run"]
    assert run.reason == "" and not run.rerun and run.proc.returncode == 0, run.proc.stdout + run.proc.stderr
    assert _calls(log, "cuModuleLoad") == [[str(cubin)]]
    assert [c[1:3] for c in _calls(log, "cuLaunchKernel")] == [["2", "2"]]  # the corner of the 4 x 8 grid
    argv = (work / "argv").read_text().split()
    assert argv[6:8] == ["--kernel-name", "kns=mmTiled"]


def test_a_gated_child_whose_corner_launch_fails_is_run_again_on_the_whole_grid(tmp_path, monkeypatch,
                                                                                 fake_libcuda):
    cubin = tmp_path / "tiled.cubin"
    cubin.write_bytes(b"\x7fELF")
    log, work = tmp_path / "driver.log", tmp_path / "w"
    _use_fake(monkeypatch, fake_libcuda, log)
    monkeypatch.setenv("FAKE_CUDA_MIN_BLOCKS", "8")
    thread, got = _gated(tmp_path, work)
    _arrives(work / "racecheck_result.json")
    spec = {**STAGE, "cubin": str(cubin)}
    got["handed"]["spec"] = spec
    write_result(gate_files(work / "racecheck_result.json", "racecheck")[1], {"stages": [spec]})
    thread.join(60)
    assert got["run"].reason == "" and not got["run"].launch_failed
    assert [c[1:3] for c in _calls(log, "cuLaunchKernel")] == [["2", "2"], ["4", "8"]]


def test_a_gated_child_stopped_at_its_gate_launches_nothing(tmp_path, monkeypatch, fake_libcuda):
    log, work = tmp_path / "driver.log", tmp_path / "w"
    _use_fake(monkeypatch, fake_libcuda, log)
    thread, got = _gated(tmp_path, work)
    _arrives(work / "racecheck_result.json")
    write_result(gate_files(work / "racecheck_result.json", "racecheck")[1], {"stop": True})
    thread.join(60)
    run = got["run"]
    assert run.reason == "not checked: stopped before the launch" and not run.findings and not run.rerun
    assert not _calls(log, "cuModuleLoad") and not _calls(log, "cuLaunchKernel")


def test_an_older_sanitizer_refusing_kernel_name_sends_the_gated_run_back_to_be_run_again(
        tmp_path, monkeypatch, fake_libcuda):
    _use_fake(monkeypatch, fake_libcuda, tmp_path / "driver.log")
    monkeypatch.setenv("REFUSE", "1")
    thread, got = _gated(tmp_path, tmp_path / "w")
    thread.join(60)  # the tool refused before the child started: it never reaches the gate
    assert got["run"].rerun and got["run"].reason.startswith("not checked")


# ---- the grading's side: handed over as each compile ends ------------------------------------------
def _job(tmp_path: Path, stages: list[str]) -> tuple[Job, GpuSession]:
    env = Environment(ProbeResult(ok=True, name="NVIDIA H200", cc=[9, 0]), "", SimpleNamespace(path="/bin/false"),
                      None, ["-arch=sm_90a"], Peaks(66.9, 989.0, "test"))
    job = Job(RUBRIC, ROOT / "solutions", tmp_path / "work", env, stages, False, lambda _m: None)
    gpu = GpuSession()
    gpu.schedule = Schedule(8)
    return job, gpu


def _start_early_racecheck(job: Job, gpu: GpuSession, stages: list) -> None:
    """The racecheck children the grading's plan starts with the session, for ``stages``."""
    plan = launch_plan(job, stages)
    assert gpu.schedule is not None and [r.stage for r in plan.racecheck] == [
        p.stage for p in plan.gpu.starting(Starts.SESSION, Role.RACECHECK)]
    gpu.launches = plan
    for r in plan.racecheck:
        r.work.mkdir(parents=True, exist_ok=True)
        gpu.racecheck[r.stage] = gpu.schedule.add(gpu_session._gated_party(r, plan.sanitizer, plan.sanitizer_tool))


def test_each_racecheck_child_gets_its_kernel_when_its_own_compile_ends(tmp_path, monkeypatch):
    """tiled compiles quickly, wmma slowly: tiled's racecheck launches while wmma still compiles.
    naive was never given a child (no shared memory in its source); blocktiling_1d's child is stopped
    at its gate (it compiled without shared memory after all), and so is blocktiling_2d's (its compile
    failed)."""
    events: list[tuple[str, float]] = []
    took = {"naive": 0.05, "tiled": 0.1, "blocktiling_1d": 0.2, "blocktiling_2d": 0.1, "wmma": 1.0}

    def fake_gated(tool, _sanitizer, known, _n, work, _timeout_s, *, handed, control=None, **_kw):
        result = work / "racecheck_result.json"
        try:
            wait_at_gate(result, "racecheck")
        except GateClosed:
            events.append((f"{known.id} stopped", time.monotonic()))
            return SanitizerRun(tool, known.id, reason="not checked: stopped before the launch")
        assert handed().cubin.endswith(f"{known.id}.cubin")
        events.append((f"{known.id} launched", time.monotonic()))
        return SanitizerRun(tool, known.id)

    def fake_compile(job, st, _sizes):
        time.sleep(took[st.id])
        events.append((f"{st.id} compiled", time.monotonic()))
        smem = 0 if st.id in ("naive", "blocktiling_1d") else 4096
        c = CompileResult(st.id, st.id != "blocktiling_2d", cubin=str(tmp_path / f"{st.id}.cubin"),
                          kernel=KernelResources(st.kernel, "sm_90a", registers=40, shared_bytes=smem),
                          launch=st.launch)
        o = StageOutcome(stage=st, compile=c)
        if not c.ok:
            o.verdict = Verdict.NOT_COMPILED
        return o, [("compile", took[st.id])]

    monkeypatch.setattr(gpu_session, "run_gated", fake_gated)
    monkeypatch.setattr(pipeline, "_compile_one", fake_compile)
    job, gpu = _job(tmp_path, list(took))
    with gpu:
        _start_early_racecheck(job, gpu, [RUBRIC.stage(s) for s in took])
        assert sorted(gpu.racecheck) == ["blocktiling_1d", "blocktiling_2d", "tiled", "wmma"]
        pipeline.compile_stages(job, gpu)
        assert list(job.outcomes) == list(took)  # the rubric's order
        sched = gpu.schedule
        assert sched is not None
        sched.settle(lambda: all(p.state is State.DONE for p in sched.parties))
    when = dict(events)
    assert when["tiled launched"] < when["wmma compiled"]  # launched while wmma still compiled
    assert when["wmma launched"] > when["wmma compiled"]
    assert "blocktiling_1d stopped" in when and "blocktiling_2d stopped" in when
    assert sorted(gpu.racecheck) == ["tiled", "wmma"]  # what sanitize will read


@pytest.mark.parametrize("rerun", [False, True])
def test_collect_reads_the_early_runs_and_runs_again_only_what_could_not_be_judged(tmp_path, monkeypatch,
                                                                                    rerun):
    ran_now: list[str] = []

    def fake_gated(tool, _sanitizer, known, *_a, **_kw):
        return SanitizerRun(tool, known.id, rerun=rerun and known.id == "wmma")

    def run_many(tool, _sanitizer, specs, *_a, **_kw):
        ran_now.extend(s.id for s in specs)
        return {s.id: SanitizerRun(tool, s.id) for s in specs}

    monkeypatch.setattr(gpu_session, "run_gated", fake_gated)
    monkeypatch.setattr(racecheck, "run_many", run_many)
    job, gpu = _job(tmp_path, ["tiled", "wmma"])
    outcomes = []
    for sid in ("tiled", "wmma"):
        st = RUBRIC.stage(sid)
        c = CompileResult(sid, True, cubin=str(tmp_path / f"{sid}.cubin"),
                          kernel=KernelResources(st.kernel, "sm_90a", registers=40, shared_bytes=4096),
                          launch=st.launch)
        job.outcomes[sid] = o = StageOutcome(stage=st, compile=c, verdict=Verdict.CORRECT)
        outcomes.append(o)
    with gpu:
        _start_early_racecheck(job, gpu, [o.stage for o in outcomes])
        runs, _seconds = racecheck.collect(job, outcomes, None, gpu.racecheck, gpu.schedule)
    assert sorted(runs) == ["tiled", "wmma"]
    assert ran_now == (["wmma"] if rerun else [])
