"""The compile step runs its compiles side by side and starts occ.cu's builds with them.

Real nvcc on the reference solutions, twice: one compile at a time, then side by side. What each
compile gives (ptxas, the launch shape, the SASS, occ.cu's builds) and the order of everything
recorded must be the same; only the compiles' overlap differs. The occupancy step then uses the
builds made beside the stages' compiles and builds nothing itself.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import grader.compile.sass as sass_module
import grader.occupancy.build as occ_build
import grader.occupancy.run as occ_run
from grader import pipeline
from grader.compile.toolchain import find_nvcc
from grader.gpu.job import Job
from grader.gpu.session import GpuSession
from grader.rubric.load import load_rubric
from grader.sandbox import guard as sandbox
from grader.sandbox.fence import Fence

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = load_rubric(ROOT / "rubric.yaml")
NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(not NVCC.ok, reason=f"nvcc not usable: {NVCC.reason or NVCC.problems}")
PARTS = ["naive", "coalesced", "occupancy"]  # two quick stages and the occupancy section


def _spy(monkeypatch, module, name: str, spans: list[tuple[str, float, float]]) -> None:
    real = getattr(module, name)

    def timed(*args, **kwargs):
        t0 = time.monotonic()
        try:
            return real(*args, **kwargs)
        finally:
            spans.append((name, t0, time.monotonic()))

    monkeypatch.setattr(module, name, timed)


def _most_at_once(spans: list[tuple[str, float, float]]) -> int:
    events = sorted([(t0, 1) for _, t0, _ in spans] + [(t1, -1) for _, _, t1 in spans])
    now = best = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


def _compile(tmp_path: Path, monkeypatch, workers: int) -> tuple[Job, list, list[str]]:
    spans: list[tuple[str, float, float]] = []
    threads: set[str] = set()
    messages: list[str] = []
    with monkeypatch.context() as m:
        m.setattr(pipeline, "compile_workers", lambda: workers)
        _spy(m, pipeline, "compile_stage", spans)
        _spy(m, occ_build, "_compile", spans)
        real_dump = sass_module.dump_sass

        def dump(*a, **k):
            threads.add(threading.current_thread().name)
            return real_dump(*a, **k)

        m.setattr(sass_module, "dump_sass", dump)
        env = pipeline.detect_environment(RUBRIC, use_gpu=False)
        job = Job(RUBRIC, ROOT / "solutions", tmp_path / "work", env, PARTS, False, messages.append)
        with GpuSession() as gpu:
            pipeline.compile_stages(job, gpu)
            assert all(o.sass is None for o in job.outcomes.values())  # still being read: the compile step went on
            pipeline.read_sass(job, gpu)
    assert threads and all(name.startswith("sass") for name in threads)  # the SASS dumps ran in their own pool
    return job, spans, messages


def _what_was_built(job: Job) -> dict:
    out: dict = {}
    for sid, o in job.outcomes.items():
        c = o.compile
        assert c is not None
        out[sid] = (c.ok, c.problem, c.launch, c.launch_source, c.found_kernels, vars(c.kernel) if c.kernel else None,
                    (o.sass.opcodes, o.sass.reason) if o.sass else None, o.verdict)
    pre = job.prebuilt_occupancy
    assert pre is not None
    out["occupancy"] = {label: (b.ok, b.problem, {k: vars(r) for k, r in b.kernels.items()})
                        for label, b in pre.builds.items()}
    return out


@needs_nvcc
def test_compiles_run_side_by_side_with_the_same_results_in_the_same_order(tmp_path, monkeypatch):
    """Also: the occupancy step then uses the builds made beside the stages' and builds nothing."""
    one, spans_one, said_one = _compile(tmp_path / "one", monkeypatch, workers=1)
    many, spans_many, said_many = _compile(tmp_path / "many", monkeypatch, workers=4)
    # One worker: one compile at a time. Four: the stages' compiles and occ.cu's builds overlap.
    assert _most_at_once(spans_one) == 1
    assert _most_at_once(spans_many) >= 3
    stage_spans = [s for s in spans_many if s[0] == "compile_stage"]
    occ_spans = [s for s in spans_many if s[0] == "_compile"]
    assert RUBRIC.occupancy is not None
    assert len(stage_spans) == 2 and len(occ_spans) == len(RUBRIC.occupancy.ex6.register_caps)
    assert min(t0 for _, t0, _ in occ_spans) < max(t1 for _, _, t1 in stage_spans)  # started with the stages

    built = _what_was_built(one)
    assert built == _what_was_built(many)
    assert all(built[s][0] for s in ("naive", "coalesced")), built
    assert all(ok for ok, _, _ in built["occupancy"].values()), built["occupancy"]
    # Rubric order, whatever order the compiles ended in: outcomes, phases, progress messages.
    for job, said in ((one, said_one), (many, said_many)):
        assert list(job.outcomes) == ["naive", "coalesced"]
        listed_first = () if sandbox.confines(Fence(scratch=tmp_path)) else ("compile.deps",)  # nvcc -M outside bwrap
        parts = ("compile", "compile.scratch", *listed_first, "compile.nvcc", "compile.cubin")
        assert [(p.name, p.stage) for p in job.clock.phases] == [
            *((name, "naive") for name in parts), *((name, "coalesced") for name in parts),
            ("build", "occupancy"), ("sass", "naive"), ("sass", "coalesced")]
        for sid in ("naive", "coalesced"):  # where each compile's time went, inside its total
            took = {p.name: p.seconds for p in job.clock.phases if p.stage == sid}
            assert took["compile.nvcc"] > 0 and all(took[name] > 0 for name in listed_first)
            assert sum(took[name] for name in parts[1:]) <= took["compile"] + 0.01
            assert job.outcomes[sid].compile.seconds["nvcc"] == took["compile.nvcc"]
        assert said == ["compiling naive", "compiling coalesced", "occupancy: compiling occ.cu"]

    # The occupancy step uses the builds made beside the stages' compiles and builds nothing itself.
    job = many

    def no_second_build(*_a, **_k):
        raise AssertionError("occ.cu was built again in the occupancy step")

    monkeypatch.setattr(occ_run, "build_all", no_second_build)
    pipeline.grade_occupancy(job, GpuSession())
    ptxas = [i for i in job.items if i.item.startswith("ex6")]
    assert ptxas and not any("not compiled" in i.message or "did not compile" in i.message for i in ptxas)
    assert not any("grader failed" in i.message for i in job.items)
    # The occupancy step recorded no build of its own: the one build phase is the compile step's.
    assert [p.name for p in job.clock.phases if p.stage == "occupancy"] == ["build"]


def test_a_grader_failure_in_an_early_build_leaves_the_occupancy_step_to_build_again(tmp_path):
    from concurrent.futures import Future

    broken: Future = Future()
    broken.set_exception(RuntimeError("a bug"))
    pending = occ_run.PendingBuilds(tmp_path / "occ.cu", {"r255": broken})
    assert pending.wait() is None
