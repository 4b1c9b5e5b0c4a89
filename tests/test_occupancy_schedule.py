"""The occupancy work on the grading's GPU schedule (grader/occupancy/early.py, grader/sandbox/turns.py).

No GPU: the measurement child is the real grader.children.occupancy on tests/fake_cupy (a stand-in
CuPy that answers from the calculator and, asked to, logs when each launch ran), the student's
program is a shell script printing the JSON a correct program prints, the builds are files holding
the kernels' names (what the fake CuPy looks for), and the stage children are the stand-ins of
tests/test_turns.py, which record when their turns ran. What is checked is the schedule's promise:
the measurements do their untimed part at once and wait at their gate, never time anything while a
benchmark runs (nor before every stage run has ended), reach the occupancy step, which grades them as
it grades runs made without a schedule, and nothing outlives ``close()``.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from grader.clock import Clock
from grader.evidence.compile import KernelResources
from grader.evidence.protocol import ProbeResult
from grader.gpu import session as gpu_session
from grader.model import Limit, Status
from grader.occupancy import run as occ_run
from grader.occupancy.build import Build, Prebuilt
from grader.occupancy.exercises import simulated_api
from grader.records import from_jsonable, to_jsonable
from grader.rubric.load import load_default_occupancy
from grader.rubric.occupancy import load_occupancy_config
from grader.sandbox.turns import Schedule, State
from tests.hang_guard import no_hang
from tests.test_turns import child_party, overlaps

ROOT = Path(__file__).resolve().parent.parent
FAKE_CUPY = ROOT / "tests" / "fake_cupy"
CFG = load_default_occupancy()
# What the occupancy step grades from the program's output and the grader's measurements.
MEASURED = ("ex2.device_props", "ex2.program_api_blocks", "ex2.program_occupancy", "ex2.program_best_block",
            "ex4.smem_sweep_occupancy", "ex4.block_sweep_occupancy", "ex4.equal_work", "ex4.smem_conclusion",
            "ex4.block_conclusion", "ex6.fastest_claim")


def _fake_gpu(monkeypatch, tmp_path: Path, **fake) -> Path:
    """The measurement child imports the fake CuPy; returns the file its launches are logged to."""
    log = tmp_path / "launches.log"
    old = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY) + (os.pathsep + old if old else ""))
    monkeypatch.setenv("FAKE_CUPY", json.dumps({"launch_log": str(log), **fake}))
    return log


def _program_doc() -> dict:
    """What the solution's program prints on the GPU the fake CuPy describes (an H200)."""
    api = simulated_api(CFG, "9.0", registers=32, sm_count=132)
    rows = {(r["block"], r["smem"]): r["blocks"] for r in api["occupancy"]}

    def point(block, smem):
        return {"block": block, "smem": smem, "grid": (1 << 20) // block, "iters": 256,
                "blocks": rows[(block, smem)], "occupancy": rows[(block, smem)] * -(-block // 32) / 64, "time_ms": 1.0}

    ex2 = point(CFG.ex2.block_size, CFG.ex2.dynamic_smem)
    return {"format": "occupancy-v1", "device": dict(api["device"], name="NVIDIA H200"),
            "work": {"registers": api["work"]["registers"], "static_smem": 0, "local_bytes": 0},
            "ex2": {**{k: ex2[k] for k in ("block", "smem", "blocks", "occupancy")},
                    "best_block": api["potential"]["best_block"], "min_grid": api["potential"]["min_grid"]},
            "ex4": {"smem_sweep": [point(CFG.ex4.smem_block_size, s) for s in CFG.ex4.smem_points],
                    "block_sweep": [point(b, CFG.ex4.block_smem) for b in CFG.ex4.block_points]}}


def _prebuilt(tmp_path: Path, src: Path, program: str | None = None) -> Prebuilt:
    """occ.cu's builds as the fake CuPy reads them; the program a script (``program``: its body)."""
    out = tmp_path / "build"
    out.mkdir(parents=True)
    default = out / "occ_default.cubin"
    default.write_bytes(b"work heavy")
    exe = out / "occ"
    exe.write_text("#!/bin/sh\n" + (program or f"cat <<'EOF'\n{json.dumps(_program_doc())}\nEOF\n"))
    exe.chmod(0o755)
    builds = {"default": Build("default", None, default, ok=True), "exe": Build("exe", None, exe, ok=True)}
    for cap in CFG.ex6.register_caps:
        path = out / f"occ_r{cap}.cubin"
        path.write_bytes(b"heavy")
        heavy = KernelResources("heavy", "sm_90a", registers=min(cap, 168), spill_stores=4 * (cap < 168))
        builds[f"r{cap}"] = Build(f"r{cap}", cap, path, ok=True, kernels={"heavy": heavy})
    return Prebuilt(src, builds, 0.0)


def _launches(log: Path) -> list[tuple[str, float, float]]:
    rows = [line.split() for line in log.read_text().splitlines()]
    return [(name, float(t0), float(t1)) for name, t0, t1 in rows]


def test_the_measurements_wait_at_their_gate_and_never_time_beside_a_bench(tmp_path, monkeypatch):
    """Two stage runs (correctness, then a 0.4 s bench each) and a tool beside them: the measurement
    child starts with them, waits through both benches with its clock held, and launches nothing
    until every stage run has ended; its report reaches the occupancy step's side."""
    log = _fake_gpu(monkeypatch, tmp_path, launch_s=0.001)
    sched = Schedule(max_children=8)
    stages = [sched.add(child_party(tmp_path, f"s{i}", work=0.2, gate=("correctness", "bench"), turn=0.4),
                        start=False) for i in range(2)]
    tool = sched.add(child_party(tmp_path, "racecheck", work=0.5, gate=None), start=False)
    early = gpu_session.occupancy_parties(CFG, _prebuilt(tmp_path, tmp_path / "occ.cu"), tmp_path / "occupancy", sched, stages)
    assert early is not None and early.measure is not None and early.timed() == [early.measure]
    try:
        sched.take_turns(stages + early.timed())
        got = early.measured()
    finally:
        sched.close()
    runs = {p.name: p.result().result for p in [*stages, tool]}
    busy = [runs[f"s{i}"][g] for i in range(2) for g in ("correctness", "bench")] + [runs["racecheck"]["work"]]
    launches = _launches(log)
    assert {name for name, _, _ in launches} == {"work", "heavy"}
    last_stage = max(runs[f"s{i}"]["bench"][1] for i in range(2))
    for _name, t0, t1 in launches:
        assert t0 >= last_stage  # after every stage run's bench...
        assert not any(overlaps([t0, t1], b) for b in busy)  # ...so never beside one, nor beside a tool
    assert got is not None and got.proc.ok, got.proc.stderr if got else None
    assert got.report is not None and got.report.phase == "finished" and got.report.errors == []
    assert set(got.report.heavy_times_ms or {}) == {str(c) for c in CFG.ex6.register_caps}
    assert got.held_s >= 0.8  # it waited through both 0.4 s benches, its clock held
    assert got.seconds == pytest.approx(got.proc.wall_s - got.held_s)
    assert got.report.api is not None and "heavy_load" in got.report.seconds  # untimed, before the gate


def test_close_stops_the_waiting_child_and_the_running_program(tmp_path, monkeypatch):
    _fake_gpu(monkeypatch, tmp_path)
    sched = Schedule(max_children=4)
    blocker = sched.add(child_party(tmp_path, "s0", work=0.0, gate="bench"))  # never let through here
    early = gpu_session.occupancy_parties(CFG, _prebuilt(tmp_path, tmp_path / "occ.cu", program="sleep 120\n"),
                            tmp_path / "occupancy", sched, [blocker])
    assert early is not None and early.measure is not None
    sched.poll()
    sched.settle(lambda: early.measure.state in (State.WAITING, State.DONE))
    assert early.measure.state is State.WAITING, early.measure.result()[1].stderr
    early.start_program()
    assert early.program is not None and early.program.state is State.WORKING
    time.sleep(0.3)
    with no_hang("closing the schedule under a working program"):
        sched.close()
    report, proc = early.measure.result()
    assert proc.ok and report is not None and report.phase == "stopped" and report.sweep_times is None
    assert early.program.result().proc.limit is Limit.CANCELLED


def _submission(tmp_path: Path) -> tuple[Path, SimpleNamespace]:
    sub = tmp_path / "sub"
    (sub / "occupancy").mkdir(parents=True)
    for name in ("occ.cu", "answers.yaml"):
        shutil.copy(ROOT / "solutions" / "occupancy" / name, sub / "occupancy" / name)
    raw = yaml.safe_load((ROOT / "rubric.yaml").read_text())["occupancy"]
    raw["files"] = {"program": "occupancy/occ.cu", "answers": "occupancy/answers.yaml"}
    rubric = SimpleNamespace(occupancy=load_occupancy_config(raw), source="rubric.yaml",
                             timeouts=SimpleNamespace(compile_s=300))
    return sub, rubric


@pytest.mark.parametrize("mode", ["schedule", "collected", "none"])
def test_the_occupancy_step_grades_the_same_with_or_without_a_schedule(tmp_path, monkeypatch, mode):
    """On the schedule the step only collects (it runs nothing itself: both runners fail if called);
    from the runs' results read once (``collected``: pipeline.py grades them on another thread while
    ncu runs) it touches the schedule no more; without one (no GPU schedule, a caller of its own) it
    runs both. Same items, same verdicts."""
    scheduled = mode != "none"
    _fake_gpu(monkeypatch, tmp_path)
    sub, rubric = _submission(tmp_path)
    src, _text, problem = occ_run._program_source(sub, rubric.occupancy)
    assert src is not None, problem
    prebuilt = _prebuilt(tmp_path, src)
    env = SimpleNamespace(has_gpu=True, device_reason="", nvcc=SimpleNamespace(path="/bin/false"), arch_flags=[],
                          cuobjdump=None)
    work, clock, early, sched = tmp_path / "occupancy", Clock(), None, None
    if scheduled:
        sched = Schedule(max_children=4)
        early = gpu_session.occupancy_parties(rubric.occupancy, prebuilt, work, sched, [])
        assert early is not None
        sched.take_turns(early.timed())
        early.start_program()

        def runs_nothing(*_a, **_k):
            raise AssertionError("the occupancy step ran again what the schedule ran")

        monkeypatch.setattr(occ_run, "run_program", runs_nothing)
        monkeypatch.setattr(occ_run, "run_child", runs_nothing)
        if mode == "collected":
            sched.settle(early.finished)
            early = early.collect()

            def untouched(*_a, **_k):
                raise AssertionError("the collected runs went back to the schedule")

            monkeypatch.setattr(Schedule, "poll", untouched)
            monkeypatch.setattr(Schedule, "settle", untouched)
    try:
        results = occ_run.grade_occupancy_submission(sub, rubric, env, work, clock=clock, prebuilt=prebuilt,
                                                     early=early)
    finally:
        if sched is not None:
            monkeypatch.undo()
            sched.close()
    by_item = {r.item: r for r in results}
    for item in MEASURED:
        assert (by_item[item].status, by_item[item].score) == (Status.PASSED, by_item[item].max_score), \
            (item, by_item[item].message)
    phases = [p.name for p in clock.phases if p.stage == "occupancy"]
    assert phases == (["program", "measure", "measure.wait"] if scheduled else ["program", "measure"])
    steps = json.loads((work / occ_run.MEASUREMENTS_FILE).read_text())["steps"]
    assert ("gpu_child_wait_s" in steps) is scheduled and steps["program_s"] >= 0


def test_a_failure_of_the_measurement_child_stays_the_occupancy_items_own(tmp_path, monkeypatch):
    """A kernel of occ.cu that hangs in the sweeps: the child's own limit stops it (its wait at the gate
    not counted), and the items say so as they do without a schedule. Its own part before the gate (start,
    imports, the fake device's set-up) takes about 0.2 s here: the 3 s limit is far from it."""
    _fake_gpu(monkeypatch, tmp_path, hang="work")
    monkeypatch.setattr(gpu_session, "CHILD_TIMEOUT_S", 3.0)
    sub, rubric = _submission(tmp_path)
    src = occ_run._program_source(sub, rubric.occupancy)[0]
    prebuilt = _prebuilt(tmp_path, src)
    env = SimpleNamespace(has_gpu=True, device_reason="", nvcc=SimpleNamespace(path="/bin/false"), arch_flags=[],
                          cuobjdump=None)
    sched = Schedule(max_children=4)
    blocker = sched.add(child_party(tmp_path, "s0", work=0.0, gate="bench", turn=1.5), start=False)
    early = gpu_session.occupancy_parties(rubric.occupancy, prebuilt, tmp_path / "occupancy", sched, [blocker])
    assert early is not None
    try:
        sched.take_turns([blocker, *early.timed()])
        results = occ_run.grade_occupancy_submission(sub, rubric, env, tmp_path / "occupancy", prebuilt=prebuilt,
                                                     early=early)
    finally:
        sched.close()
    by_item = {r.item: r for r in results}
    assert by_item["ex4.block_conclusion"].status == Status.FAILED
    assert "did not finish within 3 s" in by_item["ex4.block_conclusion"].message
    assert by_item["ex2.program_api_blocks"].status == Status.PASSED
    # the 1.5 s bench, not counted (less the time it reached its gate after the bench's child reached its own)
    assert early.measure is not None and early.measure.control.held_s() >= 1.0


def test_a_party_after_others_waits_for_them_whatever_the_order(tmp_path):
    """``Party.after``: listed first and at its gate first, the sweeps still wait for both stage runs,
    the second of which is not even started yet (one slot besides theirs)."""
    sched = Schedule(max_children=2)
    s0 = child_party(tmp_path, "s0", work=0.0, gate="bench", turn=0.2)
    s1 = child_party(tmp_path, "s1", work=0.0, gate="bench", turn=0.2)
    occ = child_party(tmp_path, "occ", work=0.0, gate="sweeps", turn=0.1)
    occ.after = [s0, s1]
    for p in (occ, s0, s1):
        sched.add(p, start=False)
    try:
        sched.take_turns([occ, s0, s1])
    finally:
        sched.close()
    turns = {p.name: p.result().result["turn"] for p in (occ, s0, s1)}
    assert turns["occ"][0] >= max(turns["s0"][1], turns["s1"][1])


def test_run_stages_puts_the_occupancy_work_on_the_schedule(tmp_path, monkeypatch):
    """run_stages with stand-in stage children that pass their gates (correctness, then a timed bench)
    and the real measurement child on the fake CuPy: the sweeps come after every bench, the program
    runs once the timed turns are over, the profile step's wait finds it ended, and the occupancy step
    grades what they found; the stages keep their verdicts and timings."""
    from grader.children.protocol import wait_at_gate
    from grader.evidence.compile import CompileResult
    from grader.evidence.limits import Peaks
    from grader.gpu import session as run_early
    from grader.gpu import stages as run_stages
    from grader.gpu.job import Job
    from grader.gpu.sanitize import SanitizerRun
    from grader.gpu.session import GpuSession
    from grader.grading import Environment, StageOutcome
    from grader.model import ProcRecord, Verdict
    from grader.rubric.load import load_rubric
    from grader.sandbox.launch import ChildResult

    log = _fake_gpu(monkeypatch, tmp_path, launch_s=0.001)
    rubric = load_rubric(ROOT / "rubric.yaml")
    sub, _ = _submission(tmp_path)
    benches: list[tuple[float, float]] = []

    def child(mode, spec, work, *_a, **_kw):
        m, mode, spec = mode, mode.name, to_jsonable(spec)
        if mode == "stage":
            result = work / "stage_result.json"
            wait_at_gate(result, "correctness")
            wait_at_gate(result, "bench")
            t0 = time.monotonic()
            time.sleep(0.3)
            benches.append((t0, time.monotonic()))
            report = {"loaded": True, "correctness": [{"n": n, "seed": 1, "file": f"c_{n}.npy"}
                                                      for n in rubric.correctness_sizes],
                      "bench": {"n": 4096, "seed": 1, "student_ms": [1.0] * 5, "baseline_ms": [0.9] * 5}}
        else:
            stages = wait_at_gate(work / "check_result.json", "compare")["stages"]
            report = {"verdicts": {c["id"]: {"cases": [{"n": 512, "kind": "check", "passed": True,
                                                        "max_scaled_err": 1e-7}]} for c in stages}}
        return ChildResult(ProcRecord(["python"], 0, wall_s=0.5), from_jsonable(m.result, report), work / "spec.json", work / "result.json")

    monkeypatch.setattr(run_early, "launch", child)
    monkeypatch.setattr(run_early, "run_tool", lambda tool, _s, spec, *_a, **_k: SanitizerRun(tool, spec.id))
    monkeypatch.setattr(run_early, "run_gated", lambda tool, _s, spec, *_a, **_k: SanitizerRun(tool, spec.id))
    from grader.gpu import launch_plan

    monkeypatch.setattr(launch_plan, "_profile_launch", lambda *_a, **_k: None)
    monkeypatch.setattr(run_early.warm, "prepare_request", lambda _req: (None, "not made in this test"))
    monkeypatch.setattr(run_early, "occupancy_fence", lambda _work: None)  # the fake CuPy lives outside a fence
    outcomes = {}
    for sid in ("naive", "tiled"):
        st = rubric.stage(sid)
        c = CompileResult(sid, True, cubin=str(tmp_path / f"{sid}.cubin"),
                          kernel=KernelResources(st.kernel, "sm_90a", registers=40), launch=st.launch)
        outcomes[sid] = StageOutcome(stage=st, compile=c)
    env = Environment(ProbeResult(ok=True, name="NVIDIA H200", cc=[9, 0]), "", SimpleNamespace(path="/bin/false"),
                      None, ["-arch=sm_90a"], Peaks(66.9, 989.0, "test"))
    job = Job(rubric, sub, tmp_path / "work", env, None, False, lambda _m: None, outcomes=outcomes)
    job.prebuilt_occupancy = _prebuilt(tmp_path, occ_run._program_source(sub, rubric.occupancy)[0])
    from grader import pipeline

    with GpuSession() as gpu:
        for o in job.outcomes.values():  # the compile step hands each compiled kernel to the session
            gpu.hand_kernel(o)
        run_early.start_gpu_children(job, gpu)  # the session starts for the compiled stages
        run_stages.run_stages(job, gpu)
        early = gpu.occupancy
        assert early is not None and early.measure is not None and early.measure.state is State.DONE
        assert early.program is not None  # started once the timed turns were over
        run_stages.check_results(job, gpu)
        pipeline.profile(job, gpu)
        assert early.program.state is State.DONE  # ended before ncu's turn
        assert early.finished()  # so grade_occupancy, after the GPU lock is given back, needs no GPU
        pipeline.grade_occupancy(job, gpu)
    assert all(o.verdict is Verdict.CORRECT and o.timing is not None for o in job.outcomes.values())
    launches = _launches(log)
    assert len(benches) == 2 and launches and min(t0 for _, t0, _ in launches) >= max(t1 for _, t1 in benches)
    by_item = {i.item: i for i in job.items}
    assert all(by_item[i].status is Status.PASSED for i in MEASURED), \
        {i: by_item[i].message for i in MEASURED if by_item[i].status is not Status.PASSED}
    assert {p.name for p in job.clock.phases if p.stage == "occupancy"} == {"program", "measure", "measure.wait"}


def test_the_pipeline_grades_the_occupancy_items_while_ncu_runs_once_their_runs_have_ended(tmp_path, monkeypatch):
    """pipeline.profile hands the ended runs to another thread (_grade_occupancy_ahead) before it waits
    for ncu; grade_occupancy then only collects those items. Runs that have not ended are left to the
    occupancy step."""
    from grader import pipeline
    from grader.evidence.limits import Peaks
    from grader.gpu.job import Job
    from grader.gpu.session import GpuSession
    from grader.grading import Environment
    from grader.rubric.load import load_rubric

    rubric = load_rubric(ROOT / "rubric.yaml")
    env = Environment(ProbeResult(ok=True, name="NVIDIA H200", cc=[9, 0]), "", None, None, ["-arch=sm_90a"],
                      Peaks(66.9, 989.0, "test"))
    job = Job(rubric, ROOT / "solutions", tmp_path / "work", env, None, False, lambda _m: None)
    threads: list[str] = []

    def items(j, early):
        import threading

        threads.append(threading.current_thread().name)
        return [SimpleNamespace(item="graded", early=early)]

    monkeypatch.setattr(pipeline, "_occupancy_items", items)
    running = SimpleNamespace(finished=lambda: False)
    gpu = GpuSession()
    gpu.occupancy = running  # type: ignore[assignment]
    pipeline._grade_occupancy_ahead(job, gpu)
    assert gpu.occupancy_ahead is None  # its runs go on: the occupancy step grades them itself
    done = SimpleNamespace(finished=lambda: True, collect=lambda: "collected")
    gpu.occupancy = done  # type: ignore[assignment]
    pipeline._grade_occupancy_ahead(job, gpu)
    assert gpu.occupancy_ahead is not None
    pipeline.grade_occupancy(job, gpu)
    assert [(i.item, i.early) for i in job.items] == [("graded", "collected")]
    assert threads and threads[0].startswith("occupancy")  # not the grading's own thread
