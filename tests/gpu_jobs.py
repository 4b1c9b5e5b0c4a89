"""The GPU test suite's gradings: each made once per session and read by every test that needs it.

Graded one per test, one after another, the submissions would take minutes. Here every grading the collected GPU tests need starts when the first of them asks (tests/conftest.py:
``gpu_jobs``), those the early tests wait for a few seconds ahead (:data:`FIRST`); their compiles
and static checks run side by side on the CPU,
while one GPU lock file (``python -m grader grade --gpu-lock``, grader/pipeline.py: gpu_turn) keeps
their GPU steps one at a time, so no timing, profile or occupancy measurement shares the GPU.

* ``solutions``, ``starter``: full gradings of solutions/ and starter/ (every stage, the occupancy
  exercises, the report), read by tests/test_gpu_grading.py, test_gpu_ncu.py (the reference kernels'
  Nsight Compute metrics) and test_occupancy_run.py (the occupancy items).
* ``hostile``: ONE grading of every GPU case of tests/submissions/EXPECTED.yaml. Its rubric is
  rubric.yaml with one stage per (case, stage) pair: the stage's definition as it is (kernel,
  launch, limits, bench, items), its file the case's file, its id ``<case>__<stage>`` and its
  number ``<case>/<number>``. Each stage runs in its own child with its own limits, so the verdicts
  are the ones a grading of the case alone gives; a hang costs its own stage's limit and no other
  stage's (the budget counts runs, and is far above the sum of the limits).
* ``shifted``: one Nsight Compute run over the one-stage-shifted submission (test_gpu_ncu.py).
* ``attacks``: the attack cases that need a GPU (test_attacks.py), one after the other (a daemon
  of one would look like a leftover of the other), fenced as tests/attack_helpers.py fences them.
"""
from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SUBS = ROOT / "tests" / "submissions"
TEXTBOOK_STAGES = "naive,coalesced,tiled,blocktiling_1d,blocktiling_2d,wmma,hopper"
EXPECTED = yaml.safe_load((SUBS / "EXPECTED.yaml").read_text())
HOSTILE_CASES = [c for c, e in EXPECTED.items() if e.get("gpu")]
ATTACK_CASES = [c for c, e in EXPECTED.items() if e.get("attack_gpu")]
HOST_CODE_MARKER = Path("/tmp/gemm-grader-host-code-ran")  # what tests/submissions/host_static_initializer writes


@dataclass
class Graded:
    """One ``python -m grader grade`` run and what it wrote."""

    out: Path
    rc: int
    stderr: str
    wall_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def results(self) -> dict:
        return json.loads((self.out / "results.json").read_text())

    @property
    def tests(self) -> dict[str, dict]:
        return {t["number"]: t for t in self.results["tests"]}

    @property
    def detail(self) -> dict:
        """grading.json, as written."""
        return json.loads((self.out / "grading.json").read_text())

    def phase(self, name: str, stage: str = "") -> float | None:
        return next((p["seconds"] for p in self.detail.get("phases", [])
                     if p["name"] == name and p.get("stage", "") == stage), None)


def grade(sub: Path, out: Path, lock: Path, *extra: str) -> Graded:
    """``python -m grader grade SUB --out OUT --quiet --gpu-lock LOCK EXTRA...``."""
    cmd = [sys.executable, "-m", "grader", "grade", str(sub), "--out", str(out), "--quiet", "--gpu-lock", str(lock),
           *extra]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return Graded(out, proc.returncode, proc.stderr[-3000:], time.monotonic() - t0)


# ---- the hostile cases in one grading -------------------------------------------------------------
COMPOSITE_STAGE_LIMITS = {"allowance_s": 4, "floor_s": 4}
ONE_TIMED_LAUNCH = {"warmup": 0, "reps": 1, "min_reps": 1}


def composite_id(case: str, stage: str) -> str:
    return f"{case}__{stage}"


def composite(dest: Path) -> tuple[Path, Path]:
    """The submission holding every GPU case's folder, and the rubric with a stage per (case, stage)."""
    raw = yaml.safe_load((ROOT / "rubric.yaml").read_text())
    by_id = {s["id"]: s for s in raw["stages"]}
    sub, stages = dest / "submission", []
    for case in HOSTILE_CASES:
        shutil.copytree(SUBS / case, sub / case)
        for sid in EXPECTED[case]["stages"]:
            st = copy.deepcopy(by_id[sid])
            assert not any("stage" in it for it in st["items"]), "an item refers to another stage: remap it here"
            st.update(id=composite_id(case, sid), number=f"{case}/{st['number']}", file=f"{case}/{st['file']}")
            if not any(item.endswith(".speed") for item in EXPECTED[case].get("gpu", {})):
                # No speed verdict asked of the case: one timed launch (still checked, fingerprint and
                # all) instead of the stage's warm-ups and reps, taken one at a time under the lock.
                st["bench"] = {**st.get("bench", {}), **ONE_TIMED_LAUNCH}
            stages.append(st)
    raw["stages"] = stages
    for section in ("occupancy", "report"):  # they name the real stages; no case needs them
        raw.pop(section, None)
    # The stage limits still derive from each stage's reference, with less slack: the correctness turns
    # take one at a time, so the hang held every other case for its limit, the 10 s floor, under the
    # suite's GPU lock (docs/measurements/2026-12-01-h200-speed-round5.md). A stage child's start-up
    # and its waits at its gates are not counted (grader/sandbox/turns.py), and the cases' correct
    # kernels ran 0.3-0.7 s counted; the printf flood reached the output limit after 2.1-3.6 s. So the hang
    # is stopped after 5.8 s instead of 10, and the slowest reference's stage (tiled) may run 8.5 s.
    raw["settings"]["stage_limits"].update(COMPOSITE_STAGE_LIMITS)
    rubric = dest / "rubric.yaml"
    rubric.write_text(yaml.safe_dump(raw, sort_keys=False, width=1000))
    return sub, rubric


def case_tests(g: Graded, case: str) -> dict[str, dict]:
    """The case's items by their number in a grading of the case alone ("1.correct")."""
    prefix = f"{case}/"
    return {n[len(prefix):]: t for n, t in g.tests.items() if n.startswith(prefix)}


def _hostile(work: Path, lock: Path) -> Graded:
    sub, rubric = composite(work)
    HOST_CODE_MARKER.unlink(missing_ok=True)
    g = grade(sub, work / "out", lock, "--rubric", str(rubric))
    g.extra["host_code_ran"] = HOST_CODE_MARKER.exists()
    return g


# ---- the others -------------------------------------------------------------------------------------
def _shifted(work: Path, lock: Path):
    """Compile the one-stage-shifted submission's stages (side by side), then profile them under the lock."""
    import dataclasses

    from grader.clock import Clock
    from grader.compile import toolchain
    from grader.compile.stage import compile_stage
    from grader.gpu.ncu_run import profile_stages
    from grader.grading import StageOutcome
    from grader.instructor.shifted import write_shifted
    from grader.model import Verdict
    from grader.pipeline import gpu_turn
    from grader.rubric.load import load_rubric

    rubric = load_rubric(ROOT / "rubric.yaml")
    rubric = dataclasses.replace(rubric, profile=dataclasses.replace(rubric.profile, timeout_s=300))
    sub = work / "shifted"
    write_shifted(ROOT / "solutions", rubric, sub)
    ncu, nvcc = toolchain.find_ncu(), toolchain.find_nvcc()
    if ncu.path is None:
        return None, ncu.reason
    n = rubric.profile.n

    def build(st):
        return compile_stage(st, sub, work / st.id, nvcc, ["-arch=sm_90a"], rubric, [*rubric.correctness_sizes,
                                                                                    st.bench.n, n])

    with ThreadPoolExecutor(max_workers=len(rubric.stages)) as pool:
        compiled = dict(zip([s.id for s in rubric.stages], pool.map(build, rubric.stages)))
    outcomes = {st.id: StageOutcome(stage=st, compile=compiled[st.id], verdict=Verdict.CORRECT) for st in rubric.stages}
    bad = {sid: c.problem for sid, c in compiled.items() if not c.ok}
    if bad:
        return outcomes, f"did not compile: {bad}"
    with gpu_turn(lock, Clock(), True):
        run = profile_stages(outcomes, rubric, has_gpu=True, gpu_reason="", work_dir=work / "ncu", seed=1234,
                             ncu_tool=ncu)
    return outcomes, run


def _attacks(work: Path, lock: Path) -> dict[str, tuple[Any, bool]]:
    """Each GPU attack case, fenced (tests/attack_helpers.py), its GPU steps under the suite's GPU lock
    (``--gpu-lock``: its compiles run while the other gradings hold the GPU); then whether results.json
    stayed as the grader left it while the case's daemons would look for it."""
    from tests.attack_helpers import case_processes, end_processes
    from tests.attack_helpers import grade as fenced_grade

    rubric = attack_rubric(work / "rubric_attacks.yaml")
    done: dict[str, tuple[Any, bool]] = {}
    for case in ATTACK_CASES:
        end_processes(case_processes([]))  # a daemon an earlier, failed run left
        g = fenced_grade(SUBS / case, work / case, EXPECTED[case]["stages"], "--gpu-lock", str(lock), rubric=rubric,
                         gpu=True, limit_s=900)
        path = g.out / "results.json"
        first = path.read_bytes() if path.is_file() else b""
        time.sleep(3)  # the daemons look for results.json twice a second
        done[case] = (g, (path.read_bytes() if path.is_file() else b"") == first)
    return done


def attack_rubric(dest: Path) -> Path:
    """rubric.yaml with a shorter compile limit, so a preprocessor bomb stopped by time costs 45 s, not 120
    (the stages' own limits derive from their references: at most 10 s)."""
    text = (ROOT / "rubric.yaml").read_text()
    assert "compile_s: 120" in text, "rubric.yaml no longer has compile_s: 120"
    dest.write_text(text.replace("compile_s: 120", "compile_s: 45"))
    return dest


CITED = ROOT / "tests/fixtures/gradings/reference/grading.json"  # solutions/ graded on an H200

BUILDERS: dict[str, Callable[[Path, Path], Any]] = {
    # solutions/report.md cites an H200's numbers: on another GPU they are compared with the stored H200
    # grading of solutions/, as the service compares a report with a student's stored self-check.
    "solutions": lambda w, lock: grade(ROOT / "solutions", w / "out", lock, "--citations-from", str(CITED)),
    # the textbook kernels' GEMM stages (tests/test_textbook_gpu.py)
    "textbook": lambda w, lock: grade(SUBS / "textbook" / "course", w / "out", lock, "--stages", TEXTBOOK_STAGES),
    "starter": lambda w, lock: grade(ROOT / "starter", w / "out", lock, "--keep-work"),
    "hostile": _hostile,
    "shifted": _shifted,
    "attacks": _attacks,
}


def held_phases(work: Path) -> list[dict]:
    """Every grading.json under ``work``: its folder, wall seconds, and its wait for and hold of the GPU lock."""
    from grader.deploy.batch.pool import gpu_phases

    found = []
    for path in sorted(work.rglob("grading.json")):
        try:
            g = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        steps: dict[str, float] = {}  # a step that happens twice (the GPU lock's wait) is summed
        for p in g.get("phases", []):
            if not p.get("stage") and not p.get("detail"):
                steps[p["name"]] = round(steps.get(p["name"], 0.0) + p["seconds"], 3)
        runs = sorted(((p["seconds"], p["stage"]) for p in g.get("phases", []) if p["name"] == "run" and p.get("stage")),
                      reverse=True)
        held, waited = gpu_phases(path)  # as a batch reads them
        found.append({"grading": str(path.parent.relative_to(work)), "seconds": g.get("seconds"),
                      "gpu_wait": waited, "gpu_held": held, "steps": steps,
                      "slowest_runs": {stage: seconds for seconds, stage in runs[:8]}})
    return found


# The gradings the early tests wait for (tests/conftest.py: EARLY_MODULES, test_feedback_truth needs both):
# they start first, and the others once these are in the GPU lock's queue, so that they reach the GPU
# first. The lock is first come, first served: were solutions and starter to compile slower than
# hostile and an attack, they would wait for the lock behind them, test_feedback_truth would wait for
# them, and the service test would come after it (docs/measurements/2026-12-02-h200-speed-round6.md and
# 2026-12-02-h200-speed-round7.md).
FIRST = ("solutions", "starter")
HEAD_START_S = 20.0  # the others start after this at the latest (a first grading never queued: a free lock)
QUEUE_LOOK_S = 0.005  # how often the head start looks at the lock's queue


class GpuJobs:
    """The named gradings, started in threads (:data:`FIRST` first, the others once those are queued for
    the GPU lock); :meth:`result` waits for one. At the end ``timeline.json`` in the base folder says
    when each started and ended, and how long each of its gradings waited for and held the GPU lock
    (where the suite's time goes)."""

    def __init__(self, base: Path, names: list[str], builders: dict[str, Callable[[Path, Path], Any]] | None = None):
        self.base, self.lock = base, base / "gpu.lock"
        self.builders = BUILDERS if builders is None else builders
        self.pool = ThreadPoolExecutor(max_workers=len(self.builders) + 1, thread_name_prefix="gpu-job")
        self.futures: dict[str, Future] = {}
        self.submitting = threading.Lock()
        self.started = time.monotonic()
        self.spans: dict[str, list[float]] = {}
        wanted = [n for n in self.builders if n in names]
        first = [n for n in wanted if n in FIRST]
        for name in first:
            self._submit(name)
        rest = [n for n in wanted if n not in first]
        if first and rest:
            self.pool.submit(self._after_queued, [self.futures[n] for n in first], rest)
        else:
            for name in rest:
                self._submit(name)

    def _after_queued(self, first: list[Future], rest: list[str]) -> None:
        """Start ``rest`` once every grading of ``first`` has been seen in the GPU lock's queue or has ended
        (counted: the waiters seen there, grader/sandbox/lock.py: held_in_turn, as nothing else queues this
        early, and the gradings ended), or :data:`HEAD_START_S` has passed."""
        from grader.sandbox.lock import queue_of, queued

        queue, seen = queue_of(self.lock), set()
        deadline = time.monotonic() + HEAD_START_S
        try:
            while len(seen) + sum(f.done() for f in first) < len(first) and time.monotonic() < deadline:
                seen.update(queued(queue))
                time.sleep(QUEUE_LOOK_S)
        finally:
            for name in rest:
                self._submit(name)

    def _timed(self, name: str, work: Path):
        self.spans[name] = [time.monotonic() - self.started]
        try:
            return self.builders[name](work, self.lock)
        finally:
            self.spans[name].append(time.monotonic() - self.started)

    def _submit(self, name: str):
        with self.submitting:  # a test may ask for a grading while the head start submits it
            if name not in self.futures:
                work = self.base / name
                work.mkdir(parents=True, exist_ok=True)
                self.futures[name] = self.pool.submit(self._timed, name, work)
            return self.futures[name]

    def result(self, name: str):
        return self._submit(name).result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        timeline = {name: {"from_s": round(span[0], 2), "to_s": round(span[-1], 2),
                           "gradings": held_phases(self.base / name)} for name, span in self.spans.items()}
        (self.base / "timeline.json").write_text(json.dumps(timeline, indent=1))
