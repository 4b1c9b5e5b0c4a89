"""The run steps record a typed Verdict where things happen, and later steps decide from it.

Only compute-sanitizer (a GPU tool) is replaced, by a function that records which stages it was
asked about; the selection and the verdicts are the real code's.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.evidence.compile import CompileResult, KernelResources
from grader.evidence.limits import Peaks
from grader.evidence.protocol import CaseRun, CaseVerdict, ProbeResult, StageResult, StageVerdict
from grader.gpu import racecheck
from grader.gpu import stages as run_stages
from grader.gpu.job import Job
from grader.gpu.sanitize import Finding, SanitizerRun
from grader.gpu.session import GpuSession
from grader.grading import Environment, StageOutcome
from grader.model import ProcRecord, Status, Verdict
from grader.profile.timing import summarize
from grader.rubric.load import load_rubric
from grader.score.stages import score

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
PEAKS = Peaks(66.9, 989.0, "test")


def _proc(**kw) -> ProcRecord:
    return ProcRecord(["python", "-m", "grader.children.stage"], kw.pop("returncode", 0), timeout_s=240.0, **kw)


_CASE = CaseRun(n=512, seed=1, file="c_512.npy", wall_ms=1.0)


def test_how_a_run_ended_is_a_verdict():
    sizes = RUBRIC.correctness_sizes
    ended = run_stages._run_end(_proc(returncode=None, timed_out=True), StageResult(loaded=True), RUBRIC)
    assert ended is not None and ended[0] is Verdict.TIMED_OUT and f"at N={sizes[0]}" in ended[1]
    ended = run_stages._run_end(_proc(), StageResult(prepared=True, loaded=True, correctness=[_CASE], error="illegal address"), RUBRIC)
    assert ended == (Verdict.CRASHED, f"the kernel failed during the correctness run at N={sizes[1]}: "
                                      "`illegal address`")  # the child's words, quoted
    assert run_stages._run_end(_proc(returncode=1, stderr="boom"), None, RUBRIC)[0] is Verdict.CRASHED
    assert run_stages._run_end(_proc(returncode=-9), StageResult(loaded=True), RUBRIC)[0] is Verdict.CRASHED
    assert run_stages._run_end(_proc(), StageResult(loaded=True, correctness=[_CASE] * len(sizes)), RUBRIC) is None


def test_the_checkers_answer_is_a_verdict():
    o = StageOutcome(stage=RUBRIC.stage("tiled"))
    run_stages._correctness(o, None)
    assert o.verdict is Verdict.NO_VERDICT and o.correct is False
    run_stages._correctness(o, StageVerdict([CaseVerdict(n=512, kind="check", passed=False, problem="NaN")], "numpy"))
    assert o.verdict is Verdict.WRONG and o.correctness_message == "N=512: NaN"
    run_stages._correctness(o, StageVerdict([CaseVerdict(n=512, kind="check", passed=True, max_scaled_err=1e-7)], "numpy"))
    assert o.verdict is Verdict.CORRECT and o.correct is True and o.correctness_message.startswith("correct at N")


def _outcome(stage_id: str, verdict: Verdict, message: str) -> StageOutcome:
    st = RUBRIC.stage(stage_id)
    k = KernelResources(st.kernel, "sm_90a", registers=40, shared_bytes=8192)  # every one uses shared memory
    c = CompileResult(st.id, True, cubin=f"/w/{st.id}.cubin", kernel=k, launch=st.launch)
    o = StageOutcome(stage=st, compile=c, verdict=verdict, correctness_message=message)
    if verdict is Verdict.CORRECT:
        o.timing = summarize(4096, [3.0] * 5, [2.7] * 5, 66.9)
    return o


@pytest.fixture
def sanitizer_calls(monkeypatch):
    """compute-sanitizer replaced: racecheck finds a race in `tiled` only; memcheck finds nothing."""
    calls: dict[str, list[str]] = {}

    def run_many(tool, _sanitizer, specs, _n, _work, _timeout_s, **_kw):
        calls[tool] = [s.id for s in specs]
        found = {"tiled": [Finding("Race reported between Write access at mmTiled+0x10 in tiled.cu:21")]}
        return {s.id: SanitizerRun(tool, s.id, found.get(s.id, []) if tool == "racecheck" else [])
                for s in specs}

    monkeypatch.setattr(racecheck, "run_many", run_many)
    return calls


def test_sanitizers_pick_stages_by_verdict_and_a_race_is_a_verdict(tmp_path, sanitizer_calls):
    # The messages say the opposite of the verdicts: only the verdicts may decide.
    outcomes = {o.stage.id: o for o in (
        _outcome("coalesced", Verdict.TIMED_OUT, "correct (words only)"),
        _outcome("tiled", Verdict.CORRECT, "timed out (words only)"),
        _outcome("blocktiling_1d", Verdict.WRONG, "shared-memory race (words only)"),
        _outcome("blocktiling_2d", Verdict.NOT_RUN, "correct"),
        _outcome("wmma", Verdict.CRASHED, "the kernel failed"),
    )}
    env = Environment(ProbeResult(ok=True, name="test GPU"), "", None, None, ["-arch=sm_90a"], PEAKS)
    job = Job(RUBRIC, tmp_path, tmp_path / "work", env, None, False, lambda _m: None, outcomes=outcomes)
    run_stages.sanitize(job, GpuSession())
    # A kernel that timed out would hang again; one the time budget skipped never ran.
    assert sanitizer_calls["racecheck"] == ["tiled", "blocktiling_1d", "wmma"]
    tiled = outcomes["tiled"]
    assert tiled.verdict is Verdict.RACE and tiled.timing is None and tiled.correct is False
    assert tiled.correctness_message.startswith("shared-memory race in mmTiled:")
    # memcheck explains failures, not races (the race is the explanation).
    assert sanitizer_calls["memcheck"] == ["blocktiling_1d", "wmma"]
    items = {(i.stage, i.item): i for i in score(outcomes, PEAKS)}
    assert items[("tiled", "correct")].status == Status.FAILED
    assert items[("tiled", "speed")].message.startswith("not timed: the kernel is not correct")
