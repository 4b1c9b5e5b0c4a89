"""Hostile kernels cost little: each stage child's time limit derives from its reference kernel, and a
flood of output is stopped the moment it passes the output limit (no GPU needed).

The derivation (grader/rubric/limits.py) is checked against a simulation of the stage child's own
benchmark loop; the flood kill against a real child process; the wiring in run_stages with the stage
child (the GPU process) replaced by its recorded ending.
"""
from __future__ import annotations

import dataclasses
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from grader.clock import Phase
from grader.evidence.compile import CompileResult, KernelResources
from grader.evidence.limits import LimitSource, Peaks
from grader.evidence.protocol import BenchRun, CaseRun, ProbeResult, StageResult
from grader.evidence.rubric import Bench
from grader.gpu import session as run_early
from grader.gpu import stages as run_stages
from grader.gpu.job import Job
from grader.gpu.session import GpuSession
from grader.grading import Environment, Grading, StageOutcome
from grader.instructor.stage_limits import limit_proposals, render_lines
from grader.model import Limit, ProcRecord, Verdict
from grader.rubric.errors import RubricError
from grader.rubric.limits import bench_seconds, derived_seconds, stage_limit
from grader.rubric.load import load_rubric, parse_rubric
from grader.rubric.types import Rubric
from grader.sandbox.launch import ChildResult
from grader.sandbox.process import run_process

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
RAW = yaml.safe_load((ROOT / "rubric.yaml").read_text())


def simulate_stage_child(per_rep_s: float, bench: Bench, sizes, allowance_s: float) -> float:
    """The seconds a stage child takes when one benchmark repetition takes ``per_rep_s``: the same loop
    as grader/children/stage.py (Runner.bench), written out step by step."""
    t = allowance_s + per_rep_s * sum((n / bench.n) ** 3 for n in sizes)
    t += bench.warmup * per_rep_s
    start = t
    for rep in range(bench.reps):
        t += per_rep_s
        if t - start > bench.max_seconds and rep + 1 >= bench.min_reps:
            break
    return t


# ---- the derivation -------------------------------------------------------------------------------
def test_the_benchmark_stopping_rule():
    b = Bench(n=4096, warmup=2, reps=20, min_reps=5, max_seconds=20.0)
    assert bench_seconds(0.1, b) == pytest.approx(22 * 0.1)  # fast: every rep
    assert bench_seconds(3.0, b) == pytest.approx((2 + 7) * 3.0)  # the 7th rep ends past 20 s
    assert bench_seconds(30.0, b) == pytest.approx((2 + 5) * 30.0)  # min_reps, however slow
    for per_rep in (0.01, 0.4, 1.0, 2.5, 7.0, 40.0):
        assert bench_seconds(per_rep, b) == pytest.approx(simulate_stage_child(per_rep, b, (), 0.0))


def test_a_correct_kernel_five_times_slower_than_the_reference_is_never_stopped():
    lim = RUBRIC.stage_limits
    for st in RUBRIC.stages:
        limit = stage_limit(st, RUBRIC)
        assert limit.source is LimitSource.DERIVED and limit.reference_s == st.limits.reference_s
        assert st.limits.reference_s is not None
        per_rep = st.limits.reference_s / (st.bench.warmup + st.bench.reps)
        for slower in (1, 2, 3, lim.multiple):
            needs = simulate_stage_child(slower * per_rep, st.bench, RUBRIC.correctness_sizes, lim.allowance_s)
            assert needs <= limit.seconds, (st.id, slower, needs, limit.seconds)


def test_a_hang_costs_the_ten_second_floor_at_the_default_sizes():
    limits = {st.id: stage_limit(st, RUBRIC).seconds for st in RUBRIC.stages}
    # naive: 5 s + 5 x its one timed launch (no warm-up) and its correctness runs, under the floor
    assert derived_seconds(RUBRIC.stage("naive").limits.reference_s, RUBRIC.stage("naive"), RUBRIC) < 10.0
    assert all(v == RUBRIC.stage_limits.floor_s == 10.0 for v in limits.values()), limits
    assert sum(limits.values()) < RUBRIC.timeouts.submission_s  # the budget never cuts derived limits


def test_past_max_seconds_the_limit_stops_growing():
    """A slow reference (or a slower GPU) meets the benchmark's own cap: the limit follows it, not M x."""
    st = RUBRIC.stage("coalesced")  # 10 reps, at least 5, 2 warm-up launches
    slow = derived_seconds(100.0, st, RUBRIC)  # one rep: 5 x 100 / 12 = 42 s: min_reps (5) of them
    per_rep = RUBRIC.stage_limits.multiple * 100.0 / (st.bench.warmup + st.bench.reps)
    assert slow == pytest.approx(RUBRIC.stage_limits.allowance_s + (st.bench.warmup + st.bench.min_reps) * per_rep
                                 + per_rep * 0.0325, abs=0.2)
    assert slow < RUBRIC.stage_limits.allowance_s + RUBRIC.stage_limits.multiple * 100.0 * 0.8


def _rubric_with(edit) -> Rubric:
    raw = yaml.safe_load((ROOT / "rubric.yaml").read_text())
    edit(raw)
    return parse_rubric(raw)


def test_a_limit_set_by_hand_wins():
    def hand(raw):
        raw["settings"]["timeouts"]["stage_run_s"] = 45
        raw["stages"][1]["limits"]["run_s"] = 7

    r = _rubric_with(hand)
    naive, coalesced = stage_limit(r.stage("naive"), r), stage_limit(r.stage("coalesced"), r)
    assert (naive.seconds, naive.source) == (45, LimitSource.RUBRIC)
    assert (coalesced.seconds, coalesced.source) == (7, LimitSource.STAGE)
    unmeasured = _rubric_with(lambda raw: raw["stages"][0].pop("limits"))
    lim = stage_limit(unmeasured.stage("naive"), unmeasured)
    assert (lim.seconds, lim.source) == (240, LimitSource.UNMEASURED) and "reference" in lim.why


@pytest.mark.parametrize("edit,key", [
    (lambda raw: raw["stages"][2]["limits"].update(reference_s=-1), "stages[2].limits.reference_s"),
    (lambda raw: raw["stages"][2]["limits"].update(run_seconds=3), "stages[2].limits.run_seconds"),
    (lambda raw: raw["settings"]["stage_limits"].update(multiple=0), "settings.stage_limits.multiple"),
    (lambda raw: raw["settings"]["timeouts"].update(stage_run_s="fast"), "settings.timeouts.stage_run_s"),
])
def test_bad_limit_keys_name_the_key(edit, key):
    with pytest.raises(RubricError) as err:
        _rubric_with(edit)
    assert key in str(err.value)


# ---- the flood kill -------------------------------------------------------------------------------
def _py(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_a_flood_is_stopped_the_moment_it_passes_the_cap():
    """Printing starts after the fast-watch second; with a 30 s watch interval only the reader's
    wake-up can stop it at once (polling would take 30 s)."""
    code = """
        import sys, time
        time.sleep(1.5)
        sys.stdout.write("x" * 30000); sys.stdout.flush()
        time.sleep(60)
    """
    rec = run_process(_py(code), timeout_s=60, cwd=None, env={}, output_limit=4000, output_cap=20_000,
                      watch=lambda _pid: None, watch_every_s=30.0)
    # stopped by its output cap, not at its 60 s limit nor at the 30 s watch
    assert rec.limit is Limit.OUTPUT and not rec.timed_out and rec.stdout_bytes >= 30000
    assert len(rec.stdout) < 4200 and "bytes trimmed" in rec.stdout


def test_past_the_cap_is_past_the_cap_even_when_it_exits_first():
    rec = run_process(_py("import sys; sys.stdout.write('y' * 25000)"), timeout_s=30, cwd=None, env={},
                      output_limit=4000, output_cap=20_000)
    assert rec.limit is Limit.OUTPUT and not rec.ok
    under = run_process(_py("print('fine')"), timeout_s=30, cwd=None, env={}, output_limit=4000, output_cap=20_000)
    assert under.limit is None and under.ok and under.stdout == "fine\n"


# ---- the verdicts and their wiring ----------------------------------------------------------------
def _proc(**kw) -> ProcRecord:
    return ProcRecord(["python", "-m", "grader.children", "stage"], kw.pop("returncode", -9), **kw)


def test_a_flood_and_a_hang_are_typed_verdicts_naming_their_limit():
    report = StageResult(prepared=True, loaded=True)
    flood = _proc(limit=Limit.OUTPUT, stdout_bytes=1_048_576, timeout_s=15.8)
    ended = run_stages._run_end(flood, report, RUBRIC, stage_limit(RUBRIC.stage("naive"), RUBRIC))
    assert ended is not None
    verdict, msg = ended
    assert verdict is Verdict.OUTPUT_LIMIT
    assert "it printed 1,048,576 bytes (shown trimmed)" in msg and "printf in a kernel's hot path" in msg
    assert "20,000-byte output limit" in msg and "at N=512" in msg
    hang = _proc(timed_out=True, limit=Limit.TIME, timeout_s=15.8)
    ended = run_stages._run_end(hang, report, RUBRIC, stage_limit(RUBRIC.stage("naive"), RUBRIC))
    assert ended is not None
    verdict, msg = ended
    assert verdict is Verdict.TIMED_OUT and msg.startswith("timed out after 15.8 s (this stage's time limit: ")
    assert f"{RUBRIC.stage('naive').limits.reference_s:g} s" in msg and "5 times slower" in msg
    # A flood whose printf is slow reaches the time limit first: a timeout, which names the printing.
    slow = _proc(timed_out=True, limit=Limit.TIME, timeout_s=5.8, stdout_bytes=12_000)
    ended = run_stages._run_end(slow, report, RUBRIC, stage_limit(RUBRIC.stage("naive"), RUBRIC))
    assert ended is not None and ended[0] is Verdict.TIMED_OUT and ended[1].startswith("timed out after 5.8 s")
    assert "it printed 12,000 bytes (shown trimmed)" in ended[1] and "output limit" not in ended[1]
    assert "shown trimmed" not in run_stages._run_end(hang, report, RUBRIC)[1]  # a silent hang printed nothing
    # Neither is run again under a sanitizer: it would flood or hang again.
    for v in (Verdict.OUTPUT_LIMIT, Verdict.TIMED_OUT):
        assert v not in run_stages.RACECHECKED and v not in run_stages.MEMCHECKED


def test_run_stages_passes_each_stage_its_limit_and_the_output_cap(tmp_path, monkeypatch):
    launched = {}

    def fake_launch(mode, spec, work, timeout_s, output_limit, *, fence=None, **_kw):
        sid = Path(work).name
        launched[sid] = (timeout_s, output_limit, fence.output_bytes)
        if sid == "naive":  # printf in the hot path: the fence stopped it
            proc = _proc(limit=Limit.OUTPUT, stdout_bytes=70_000, timeout_s=timeout_s)
        else:  # hangs
            proc = _proc(timed_out=True, limit=Limit.TIME, timeout_s=timeout_s)
        return ChildResult(proc, StageResult(prepared=True, loaded=True), Path(work) / "s.json", Path(work) / "r.json")

    monkeypatch.setattr(run_early, "launch", fake_launch)
    outcomes = {}
    for sid in ("naive", "tiled"):
        st = RUBRIC.stage(sid)
        k = KernelResources(st.kernel, "sm_90a", registers=40)
        outcomes[sid] = StageOutcome(stage=st, compile=CompileResult(sid, True, cubin=f"/w/{sid}.cubin", kernel=k,
                                                                     launch=st.launch))
    env = Environment(ProbeResult(ok=True, name="test GPU"), "", None, None, ["-arch=sm_90a"], Peaks(66.9, 989.0, "t"))
    job = Job(RUBRIC, tmp_path, tmp_path / "work", env, None, False, lambda _m: None, outcomes=outcomes)
    with GpuSession() as gpu:
        for o in job.outcomes.values():  # the compile step hands each compiled kernel to the session
            gpu.hand_kernel(o)
        run_early.start_gpu_children(job, gpu)  # the session starts for the compiled stages
        run_stages.run_stages(job, gpu)
    assert launched == {"naive": (10.0, 20_000, 20_000), "tiled": (10.0, 20_000, 20_000)}
    assert outcomes["naive"].verdict is Verdict.OUTPUT_LIMIT
    assert outcomes["tiled"].verdict is Verdict.TIMED_OUT and "timed out after 10 s" in outcomes["tiled"].correctness_message
    # The limit in force is recorded per stage, and grading.json reads it back.
    assert outcomes["tiled"].run_limit == stage_limit(RUBRIC.stage("tiled"), RUBRIC)
    g = Grading("sub", env, outcomes, [], 1.0)
    back = Grading.from_json(g.to_json())
    assert back.outcomes["naive"].run_limit == outcomes["naive"].run_limit
    assert g.to_json()["stages"]["naive"]["run_limit"]["source"] == "derived"


def test_the_budget_counts_the_runs_not_what_came_before(tmp_path, monkeypatch):
    """A grading that waited for the GPU lock (or compiled for long) still runs its stages."""
    monkeypatch.setattr(run_early, "launch", lambda mode, spec, work, *a, **kw: ChildResult(
        _proc(returncode=0), StageResult(prepared=True, loaded=True, correctness=[
            CaseRun(n=n, seed=1, file=f"c_{n}.npy", wall_ms=1.0) for n in (512, 1280)]),
        Path(work), Path(work)))
    st = RUBRIC.stage("naive")
    o = StageOutcome(stage=st, compile=CompileResult("naive", True, cubin="/w/n.cubin",
                                                     kernel=KernelResources(st.kernel, "sm_90a"), launch=st.launch))
    env = Environment(ProbeResult(ok=True, name="test GPU"), "", None, None, ["-arch=sm_90a"], Peaks(66.9, 989.0, "t"))
    job = Job(RUBRIC, tmp_path, tmp_path / "work", env, None, False, lambda _m: None, outcomes={"naive": o},
              started=time.monotonic() - 10 * RUBRIC.timeouts.submission_s)
    with GpuSession() as gpu:
        for o in job.outcomes.values():  # the compile step hands each compiled kernel to the session
            gpu.hand_kernel(o)
        run_early.start_gpu_children(job, gpu)  # the session starts for the compiled stages
        run_stages.run_stages(job, gpu)
    assert o.verdict is not Verdict.NOT_RUN and len(job.checks) == 1


# ---- calibrate's proposal ---------------------------------------------------------------------------
def test_calibrate_proposes_the_measured_reference_times():
    def graded(bench: dict[str, float], reps_done: int | None = None):
        # The typed record the stage child returns (a dict here would hide a crash).
        outcomes = {sid: SimpleNamespace(bench=BenchRun(n=4096, seed=0, student_ms=[1.0] * reps_done))
                    for sid in bench} if reps_done else {}
        return SimpleNamespace(phases=[Phase("run.bench", s, sid, True) for sid, s in bench.items()],
                               outcomes=outcomes)

    refs = [graded({"naive": 2.0, "tiled": 0.9}), graded({"naive": 2.31, "tiled": 0.8})]
    props = {p.stage: p for p in limit_proposals(RUBRIC, refs)}
    assert props["naive"].measured == [2.0, 2.31] and props["naive"].proposed == 2.31
    assert props["naive"].limit_s == derived_seconds(2.31, RUBRIC.stage("naive"), RUBRIC)
    naive_ref = RUBRIC.stage("naive").limits.reference_s
    assert props["naive"].current == naive_ref and props["naive"].current_limit_s == 10.0
    assert props["wmma"].proposed is None and "not measured" in props["wmma"].note
    lines = render_lines(list(props.values()))
    assert (f"  naive: measured 2.00 / 2.16 / 2.31 s -> reference_s: 2.31 (rubric: {naive_ref:g}); limit "
            f"{derived_seconds(2.31, RUBRIC.stage('naive'), RUBRIC):g} s (now 10 s)") \
        in lines, lines
    cut = {p.stage: p for p in limit_proposals(RUBRIC, [graded({"tiled": 25.0}, reps_done=7)])}
    assert "stopped after 7 of 20 reps" in cut["tiled"].note


def test_every_stage_of_the_shipped_rubric_has_a_measured_reference():
    raw_ids = [s["id"] for s in RAW["stages"] if "reference_s" in (s.get("limits") or {})]
    assert raw_ids == [s.id for s in RUBRIC.stages]
    assert dataclasses.asdict(RUBRIC.stage_limits) == RAW["settings"]["stage_limits"]
