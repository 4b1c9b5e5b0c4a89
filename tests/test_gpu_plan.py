"""The grading's GPU plan (grader/gpu/plan.py) and the session that executes it (grader/gpu/session.py).

The plan is data: which children a grading starts, when, the gates each waits at and what each waits
for. Here it is read for a full grading, without a GPU, for a submission missing stages (before and
after its compiles), on a GPU that cannot run the Hopper stage, and for a grading of some stages only;
then the session is started from it with stand-in children (no GPU here) and closed, also when a step
fails.
"""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from grader import pipeline
from grader.evidence.compile import CompileResult, KernelResources
from grader.evidence.limits import Peaks
from grader.evidence.protocol import ProbeResult, StageResult
from grader.gpu import launch_plan
from grader.gpu import session as gpu_session
from grader.gpu.job import Job
from grader.gpu.launch_plan import plan_for
from grader.gpu.plan import GateKind, GpuPlan, Role, Starts
from grader.gpu.session import GpuSession, start_gpu_children
from grader.grading import Environment, StageOutcome
from grader.model import ProcRecord
from grader.pipeline import detect_environment
from grader.rubric.load import load_rubric
from grader.sandbox.launch import ChildResult
from grader.sandbox.process import Control
from grader.sandbox.turns import Party, Schedule, State

ROOT = Path(__file__).resolve().parents[1]
RUBRIC = load_rubric(ROOT / "rubric.yaml")
STAGES = [st.id for st in RUBRIC.stages]  # naive, coalesced, tiled, blocktiling_1d, blocktiling_2d, wmma, hopper
SHARED = ["tiled", "blocktiling_1d", "blocktiling_2d", "wmma", "hopper"]  # the solutions' files that declare __shared__
H200 = Environment(ProbeResult(ok=True, name="NVIDIA H200", cc=[9, 0]), "", None, None, ["-arch=sm_90a"],
                   Peaks(66.9, 989.0, "test"))
ADA = Environment(ProbeResult(ok=True, name="NVIDIA L4", cc=[8, 9]), "", None, None, ["-arch=sm_89"],
                  Peaks(30.0, 121.0, "test"))


@pytest.fixture
def ncu_found(monkeypatch):
    monkeypatch.setattr(launch_plan, "_ncu_found", lambda: True)


def _job(tmp_path: Path, env: Environment, submission: Path = ROOT / "solutions", parts: list[str] | None = None,
         outcomes: dict[str, StageOutcome] | None = None) -> Job:
    return Job(RUBRIC, submission, tmp_path / "work", env, parts, False, lambda _m: None, outcomes=outcomes or {})


def _compiled(sid: str, ok: bool = True, shared_bytes: int = 0) -> StageOutcome:
    st = RUBRIC.stage(sid)
    k = KernelResources(st.kernel, "sm_90a", registers=40, shared_bytes=shared_bytes)
    return StageOutcome(stage=st, compile=CompileResult(sid, ok, cubin=f"/w/{sid}.cubin", kernel=k, launch=st.launch))


def test_a_full_grading_plans_every_stage_its_tools_and_the_occupancy_work_in_the_order_they_start(
        tmp_path, ncu_found):
    plan = plan_for(_job(tmp_path, H200))
    assert plan.names() == [*STAGES, *(f"racecheck:{s}" for s in SHARED), "checker", "ncu",
                            "racecheck:naive", "racecheck:coalesced", "occupancy:measure", "occupancy:program"]
    assert [p.name for p in plan.starting(Starts.SESSION)] == plan.names()[:len(STAGES) + len(SHARED) + 2]
    assert [p.name for p in plan.starting(Starts.RUNS)] == ["racecheck:naive", "racecheck:coalesced",
                                                           "occupancy:measure"]
    assert [p.name for p in plan.starting(Starts.TIMED_OVER)] == ["occupancy:program"]
    # The gates: each stage's correctness shared, its benchmark alone; racecheck's a tool gate the compile
    # step opens; the checker's and the profiler's opened by their steps; the occupancy sweeps alone.
    naive = plan.party("naive")
    assert naive is not None and naive.hold_startup and not naive.late
    assert [(g.name, g.kind, g.opened_by) for g in naive.gates] == [
        ("correctness", GateKind.SHARED, "run_stages"), ("bench", GateKind.EXCLUSIVE, "run_stages")]
    gates = {p.name: [(g.name, g.kind, g.opened_by) for g in p.gates] for p in plan.parties}
    assert gates["racecheck:tiled"] == [("racecheck", GateKind.TOOL, "compile_stages")]
    assert gates["racecheck:naive"] == []  # beside the runs, only if it compiled with shared memory
    assert gates["checker"] == [("compare", GateKind.STEP, "check_results")]
    assert gates["ncu"] == [("launch", GateKind.STEP, "profile")]
    assert gates["occupancy:measure"] == [("sweeps", GateKind.EXCLUSIVE, "run_stages")]
    assert gates["occupancy:program"] == []
    late = {p.name for p in plan.parties if p.late}
    assert late == {"checker", "ncu"}  # they wait for later steps, not for a turn
    # The dependencies: the sweeps after every stage run; the turns in the rubric's order, the sweeps last.
    measure = plan.party("occupancy:measure")
    assert measure is not None and measure.after == tuple(STAGES)
    assert plan.turns() == [*STAGES, "occupancy:measure"]
    # The schedule's gate kinds come from the plan: the same as the schedule's own defaults.
    sched = Schedule(2)
    try:
        assert plan.gates(GateKind.SHARED) == sched.shared_gates and plan.gates(GateKind.TOOL) == sched.tool_gates
    finally:
        sched.close()


def test_without_a_gpu_the_plan_is_empty_and_the_session_starts_nothing(tmp_path):
    job = _job(tmp_path, detect_environment(RUBRIC, use_gpu=False))
    plan = plan_for(job)
    assert plan == GpuPlan(why_none="no GPU")
    with GpuSession() as gpu:
        assert start_gpu_children(job, gpu) is job
        assert gpu.schedule is None and not gpu.stage_runs and gpu.checker is None and not job.seeds
    assert gpu.timeline == [] and gpu.closed


def test_a_submission_missing_stages_plans_them_until_its_compiles_say_otherwise(tmp_path, ncu_found):
    sub = tmp_path / "sub"
    (sub / "gemm").mkdir(parents=True)
    (sub / "gemm" / "tiled.cu").write_text("__global__ void mmTiled() { __shared__ float a[4]; }\n")
    (sub / "gemm" / "naive.cu").write_text("__global__ void mmNaive() {}\n")
    parts = ["naive", "tiled", "wmma"]  # wmma's file is missing
    before = plan_for(_job(tmp_path, H200, sub, parts))
    # Before the compiles every selected stage gets its child (the compile decides); a file that
    # cannot be read may declare shared memory, so its racecheck child starts early too.
    assert before.names() == ["naive", "tiled", "wmma", "racecheck:tiled", "racecheck:wmma", "checker", "ncu",
                              "racecheck:naive"]
    assert before.turns() == ["naive", "tiled", "wmma"]  # no occupancy section selected
    # After them (a GPU lock: the session starts once the lock is held) only what compiled is planned,
    # and racecheck starts with the session for the stage whose compile shows shared memory.
    outcomes = {"naive": _compiled("naive"), "tiled": _compiled("tiled", shared_bytes=4096),
                "wmma": _compiled("wmma", ok=False)}
    compiled = [o.stage for o in outcomes.values() if o.compile is not None and o.compile.ok]
    after = plan_for(_job(tmp_path, H200, sub, parts, outcomes), compiled)
    assert after.names() == ["naive", "tiled", "racecheck:tiled", "checker", "ncu", "racecheck:naive"]
    assert after.turns() == ["naive", "tiled"]


def test_the_hopper_stage_is_not_planned_on_a_gpu_that_cannot_run_it(tmp_path, ncu_found):
    plan = plan_for(_job(tmp_path, ADA))
    assert [p.name for p in plan.parties if p.role is Role.STAGE] == STAGES[:-1]
    assert "racecheck:hopper" not in plan.names()
    measure = plan.party("occupancy:measure")
    assert measure is not None and "hopper" not in measure.after
    hopper_only = plan_for(_job(tmp_path, ADA, parts=["hopper"]))
    assert hopper_only == GpuPlan(why_none="no stage to run")


def test_a_grading_of_some_stages_with_profiling_off_and_no_racecheck(tmp_path, monkeypatch):
    import dataclasses

    monkeypatch.setattr(launch_plan, "_ncu_found", lambda: True)
    rubric = dataclasses.replace(RUBRIC, profile=dataclasses.replace(RUBRIC.profile, enabled=False),
                                 sanitizer=dataclasses.replace(RUBRIC.sanitizer, racecheck=False))
    job = Job(rubric, ROOT / "solutions", tmp_path / "work", H200, ["tiled", "occupancy"], False, lambda _m: None)
    plan = plan_for(job)
    assert plan.names() == ["tiled", "checker", "occupancy:measure", "occupancy:program"]
    assert plan.gates(GateKind.TOOL) == ()


def test_the_launch_plan_reads_each_partys_record_from_the_job_once(tmp_path, monkeypatch):
    """What the session launches is read from the Job up front: each stage child's spec (the plan's
    seeds), folder and limit, each early racecheck child's known kernel and fence, the checker's
    expected products, the profiler's metrics on this chip, the warm cache's request."""
    from types import SimpleNamespace

    from grader.profile.ncu import wanted_metrics
    from grader.rubric.limits import stage_limit

    monkeypatch.setattr(launch_plan.toolchain, "find_ncu", lambda: SimpleNamespace(path="/opt/ncu"))
    job = _job(tmp_path, H200, parts=["naive", "tiled"])
    plan = launch_plan.launch_plan(job)
    work = tmp_path / "work"
    assert [s.stage for s in plan.stages] == ["naive", "tiled"]
    for s in plan.stages:
        assert s.work == work / s.stage and s.spec.out_dir == str(work / s.stage)
        assert s.limit == stage_limit(RUBRIC.stage(s.stage), RUBRIC) == plan.limit(s.stage)
        assert [c.seed for c in s.spec.correctness] == [plan.seeds[n] for n in RUBRIC.correctness_sizes]
        assert s.spec.bench is not None and s.spec.bench.seed == plan.seeds["bench"]
    assert [r.stage for r in plan.racecheck] == ["tiled"]  # naive's source declares no shared memory
    (r,) = plan.racecheck
    assert r.known.cubin == "" and r.known.kernel == RUBRIC.stage("tiled").kernel
    assert r.fence.readonly == (work / "tiled",) and r.work == work / "racecheck" / "tiled"
    assert plan.checker is not None and plan.checker.spec.gate
    assert plan.checker.spec.expect.references == [(n, plan.seeds[n], "fp32") for n in RUBRIC.correctness_sizes]
    assert plan.profile is not None and plan.profile.ncu == "/opt/ncu"
    assert list(plan.profile.metrics) == wanted_metrics(RUBRIC, H200.device)[0]
    assert plan.profile.fence.readonly == (work / "naive", work / "tiled")
    assert plan.warm is not None and plan.warm.work == work and plan.warm.rubric_sha256 == RUBRIC.sha256
    assert launch_plan.launch_plan(_job(tmp_path, detect_environment(RUBRIC, use_gpu=False))).gpu.why_none == "no GPU"


# ---- the session executes the plan --------------------------------------------------------------------
def _stand_ins(monkeypatch) -> list[str]:
    """Every child replaced by one that returns at once; the names of what was launched."""
    launched: list[str] = []
    lock = threading.Lock()

    def launch(mode, spec, work, *_a, **_kw):
        with lock:
            launched.append(mode.name)
        return ChildResult(ProcRecord(["python"], 0, wall_s=0.01), StageResult(), Path(work) / "s", Path(work) / "r")

    monkeypatch.setattr(gpu_session, "launch", launch)
    monkeypatch.setattr(gpu_session, "run_gated", lambda tool, _s, known, *_a, **_k: None)
    monkeypatch.setattr(gpu_session.warm, "prepare_request", lambda _req: (None, "not made in this test"))
    return launched


def test_the_session_puts_the_plans_parties_on_the_schedule_in_its_order_with_its_gates(tmp_path, monkeypatch):
    _stand_ins(monkeypatch)
    monkeypatch.setattr(launch_plan, "_ncu_found", lambda: False)  # no profiler on this machine
    job = _job(tmp_path, H200, parts=["naive", "tiled", "wmma"])
    with GpuSession() as gpu:
        start_gpu_children(job, gpu)
        sched = gpu.schedule
        assert sched is not None
        planned = gpu.plan.starting(Starts.SESSION)
        assert [p.name for p in sched.parties] == [p.name for p in planned] == [
            "naive", "tiled", "wmma", "racecheck:tiled", "racecheck:wmma", "checker"]
        for party, p in zip(sched.parties, planned):
            assert party.gates == tuple(g.name for g in p.gates)
            assert (party.hold_startup, party.late) == (p.hold_startup, p.late)
        assert list(gpu.stage_runs) == ["naive", "tiled", "wmma"] and sorted(gpu.racecheck) == ["tiled", "wmma"]
        assert gpu.checker is sched.parties[5] and gpu.profile is None
        assert set(job.seeds) == {*RUBRIC.correctness_sizes, "bench"}
        start_gpu_children(job, gpu)  # started already: nothing more
        assert len(sched.parties) == 6
    assert all(p.state is State.DONE for p in sched.parties)
    assert [t.party for t in gpu.timeline] == [p.name for p in planned]


def _waits_for_cancel(started: threading.Event):
    def run(control: Control) -> None:
        started.set()
        control.cancel.wait(30)  # ends when the schedule stops it

    return run


def test_closing_the_session_after_a_failed_step_ends_every_child_and_thread(tmp_path):
    from grader.compile.sass import SassDumps

    started = threading.Event()
    with pytest.raises(RuntimeError, match="a step failed"):
        with GpuSession() as gpu:
            gpu.schedule = Schedule(2)
            party = gpu.schedule.add(Party("busy", (), None, _waits_for_cancel(started)))
            gpu.sass_dumps = SassDumps(None, 1)
            assert started.wait(10)
            raise RuntimeError("a step failed")
    assert party.state is State.DONE and party.future is not None and party.future.done()
    assert party.control.cancel.is_set()
    assert gpu.closed and [t.party for t in gpu.timeline] == ["busy"]
    assert gpu.timeline[0].events[-1][1] == "end"
    with pytest.raises(RuntimeError):  # the SASS dumps' pool is shut down
        gpu.sass_dumps.start("naive", "/w/naive.cubin")
    assert gpu.close() == gpu.timeline  # a second close does nothing


def test_the_sass_dumps_end_even_when_stopping_the_schedule_fails(tmp_path, monkeypatch):
    from grader.compile.sass import SassDumps

    gpu = GpuSession()
    gpu.schedule = Schedule(2)
    gpu.sass_dumps = SassDumps(None, 1)
    real_close = gpu.schedule.close

    def failing_close() -> None:
        real_close()
        raise OSError("a gate file could not be written")

    monkeypatch.setattr(gpu.schedule, "close", failing_close)
    with pytest.raises(OSError):
        gpu.close()
    with pytest.raises(RuntimeError):
        gpu.sass_dumps.start("naive", "/w/naive.cubin")
    assert gpu.closed and gpu.timeline == []


def test_a_grading_whose_step_fails_closes_its_session(tmp_path, monkeypatch):
    closed: list[GpuSession] = []

    class Watched(GpuSession):
        def close(self):
            closed.append(self)
            return super().close()

    def failing(*_a, **_k):
        raise RuntimeError("the compile step failed")

    monkeypatch.setattr(pipeline, "GpuSession", Watched)
    monkeypatch.setattr(pipeline, "_follow_compiles", failing)
    with pytest.raises(RuntimeError, match="the compile step failed"):
        pipeline.grade(ROOT / "solutions", RUBRIC, tmp_path / "out", stages=["naive"], use_gpu=False)
    assert len(closed) == 1 and closed[0].closed
    assert closed[0].sass_dumps is not None  # made by the compile step, ended by the close
    with pytest.raises(RuntimeError):
        closed[0].sass_dumps.start("naive", "/w/naive.cubin")


def test_the_step_list_reads_in_the_order_the_grading_runs():
    names = [step.name for step in pipeline.STEPS]
    assert names == ["start_gpu_children", "compile_stages", "start_gpu_children", "run_stages", "check_results",
                     "sanitize", "drop_outputs", "profile", "read_sass", "score_stages", "grade_occupancy",
                     "grade_report"]
    first, again = pipeline.CPU_STEPS[0], pipeline.GPU_STEPS[0]
    alone = Job(RUBRIC, ROOT, ROOT, H200, None, False, lambda _m: None)
    shared = Job(RUBRIC, ROOT, ROOT, H200, None, False, lambda _m: None, gpu_lock=Path("/tmp/gpu.lock"))
    assert first.only_if is not None and again.only_if is not None
    assert (first.only_if(alone), again.only_if(alone)) == (True, False)
    assert (first.only_if(shared), again.only_if(shared)) == (False, True)


def test_the_job_holds_no_live_handle():
    """The Job is the evidence: none of its fields' types (nor any type inside one) is a handle that must
    be closed (the schedule, its parties, a future, a process, a lock, a file, a thread pool)."""
    import io
    import subprocess
    import typing
    from concurrent.futures import Executor, Future

    from grader.compile.sass import SassDumps
    from grader.gpu.ncu_run import EarlyProfile
    from grader.occupancy.early import EarlyOccupancy

    live = (Schedule, Party, Future, Executor, subprocess.Popen, io.IOBase, type(threading.Lock()), threading.Thread,
            SassDumps, EarlyProfile, EarlyOccupancy, GpuSession)

    def inside(hint) -> list:
        return [hint, *(t for arg in typing.get_args(hint) for t in inside(arg))]

    hints = typing.get_type_hints(Job)
    assert {"rubric", "outcomes", "items", "notes", "timeline"} <= set(hints)
    held = {name: t for name, hint in hints.items() for t in inside(hint) if isinstance(t, type) and issubclass(t, live)}
    assert held == {}


@pytest.mark.skipif(__import__("grader.compile.toolchain", fromlist=["find_nvcc"]).find_nvcc().path is None,
                    reason="no nvcc on this machine")
@pytest.mark.parametrize("lock", [False, True])
def test_a_grading_on_the_fake_device_starts_its_session_where_the_step_list_says(tmp_path, monkeypatch, lock):
    """`python -m grader grade` with the stand-in GPU (tests/fake_cupy): alone on it, the session starts
    before the compiles; with a GPU lock (a batch, the service), first under the lock. Either way every
    party of the timeline is one the plan names, and every one has ended."""
    from grader.grading import load_grading
    from tests.gradings_helpers import grader
    from tests.test_children import FAKE_CUPY

    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY))
    out = tmp_path / "out"
    extra = ["--gpu-lock", str(tmp_path / "gpu.lock")] if lock else []
    proc = grader("grade", str(ROOT / "solutions"), "--out", str(out), "--stages", "naive,tiled", "--quiet",
                  *extra, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    g = load_grading(out / "grading.json")
    assert g.env.has_gpu
    steps = [p.name for p in g.phases if not p.detail]
    first = ["start_gpu_children", "compile_stages"] if not lock else ["compile_stages", "gpu_wait", "start_gpu_children"]
    assert steps == ["probe", "intake", *first, "run_stages", "check_results", "sanitize", "drop_outputs", "profile",
                     "read_sass", "score_stages", "grade_occupancy", "grade_report", "outputs"]
    parties = [t.party for t in g.timeline]
    assert parties[:2] == ["naive", "tiled"] and "checker" in parties and "racecheck:tiled" in parties
    assert all(t.events and t.events[-1][1] in ("end", "not started") for t in g.timeline)
