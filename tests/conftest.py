"""Shared test setup: the `gpu` marker skips unless a CUDA device answers the probe; the GPU tests'
gradings are made once per session (tests/gpu_jobs.py) and shared through the fixtures below."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class _Probe:
    """The GPU probe child (``python -m grader.children probe``), run by a thread started when pytest
    starts, so that it (a CUDA context and CuPy's import: about 1-2 s) runs beside the collection; read
    once when the collected tests turn out to need it. At the end it is killed if still running."""

    proc: subprocess.Popen | None = None
    thread: threading.Thread | None = None
    answer: dict = {}

    @classmethod
    def start(cls) -> None:
        if cls.thread is None:
            cls.thread = threading.Thread(target=lambda: cls.answer.update(cls._run()), name="gpu-probe", daemon=True)
            cls.thread.start()

    @classmethod
    def _run(cls) -> dict:
        with tempfile.TemporaryDirectory() as tmp:
            spec, result = Path(tmp) / "spec.json", Path(tmp) / "result.json"
            spec.write_text("{}")
            argv = [sys.executable, "-m", "grader.children", "probe", str(spec), str(result)]
            for attempt in (1, 2):  # a start can fail for a moment on a loaded box (EAGAIN, EFAULT): once more
                try:
                    proc = cls.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                                                       stderr=subprocess.PIPE, text=True)
                    break
                except OSError as e:
                    if attempt == 2:
                        return {"ok": False, "reason": f"the probe child could not be started: {e}"}
                    time.sleep(0.5)
            try:
                err = proc.communicate(timeout=120)[1]
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                return {"ok": False, "reason": "the probe child did not answer in 120 s"}
            try:
                return json.loads(result.read_text())
            except (OSError, ValueError):
                return {"ok": False, "reason": (err or "")[-300:]}

    @classmethod
    def read(cls) -> dict:
        cls.start()
        assert cls.thread is not None
        cls.thread.join()
        return cls.answer

    @classmethod
    def close(cls) -> None:
        if cls.proc is not None and cls.proc.poll() is None:
            cls.proc.kill()
        if cls.thread is not None:
            cls.thread.join()


def probe() -> dict:
    return _Probe.read()


def pytest_configure(config):
    _Probe.start()
    _CompileReuse.start()
    # Under --dist loadfile, pytest-xdist's workers get the costliest files first (tests/file_costs.py); a single
    # process keeps the files' own order.
    from tests.file_costs import CostliestFirst

    CostliestFirst.register(config)
    # pytest-xdist's controller collects nothing: it rewrites the test modules' asserts once, for every worker
    # to read (tests/rewrite_ahead.py), before it starts them.
    from tests.rewrite_ahead import is_xdist_controller, write_ahead

    if is_xdist_controller(config):
        write_ahead(config)


def pytest_unconfigure(config):
    _Probe.close()
    _CompileReuse.close()


# ---- compile reuse (grader.compile.reuse, GRADER_COMPILE_REUSE) -------------------------------------------
# The session's gradings keep their compiles and their cubins' SASS listings in one temporary folder (every
# xdist worker's gradings share it: entries are written to a temporary name and renamed), so the same sources
# compiled with the same flags by many files (solutions/, starter/, the textbook and known-wrong submissions,
# graded by the batch, rescore, the service, the Gradescope package...) compile and are read once. Off in the
# files that test compile limits, the sandbox, hostile submissions, timing or the reuse itself: their compiles
# and listings run for real every time.
NO_REUSE_FILES = frozenset({
    "test_attacks.py", "test_hostile.py", "test_sandbox.py", "test_sandbox_recorded.py", "test_fence.py",
    "test_fence_limits.py", "test_static_deadline.py", "test_stage_limits.py", "test_student_build.py",
    "test_compile_overlap.py", "test_compile_reuse.py", "test_phase_times.py", "test_stop_signals.py",
    "test_clock.py", "test_children.py", "test_process_tree.py",
})


class _CompileReuse:
    """The session's reuse folder: made by the process pytest started (pytest-xdist's workers inherit its
    environment), removed at its end. A folder already set in the environment is used as it is; set empty
    (``GRADER_COMPILE_REUSE= pytest ...``), every compile runs for real. ``withheld``: the folder taken out
    of the environment while a NO_REUSE_FILES module runs."""

    owned: str | None = None
    withheld: str | None = None

    @classmethod
    def start(cls) -> None:
        if "GRADER_COMPILE_REUSE" in os.environ or os.environ.get("PYTEST_XDIST_WORKER"):
            return
        cls.owned = os.environ["GRADER_COMPILE_REUSE"] = tempfile.mkdtemp(prefix="grader-compile-reuse-")

    @classmethod
    def close(cls) -> None:
        if cls.owned is not None:
            shutil.rmtree(cls.owned, ignore_errors=True)
            os.environ.pop("GRADER_COMPILE_REUSE", None)
            cls.owned = None


@pytest.fixture(scope="module", autouse=True)
def _compile_reuse_where_allowed(request):
    """Reuse off for the whole of a NO_REUSE_FILES module (its module fixtures' gradings included)."""
    if request.path.name not in NO_REUSE_FILES:
        yield
        return
    kept = _CompileReuse.withheld = os.environ.pop("GRADER_COMPILE_REUSE", None)
    try:
        yield
    finally:
        _CompileReuse.withheld = None
        if kept is not None:
            os.environ["GRADER_COMPILE_REUSE"] = kept


@pytest.fixture(scope="module")
def session_compile_reuse(_compile_reuse_where_allowed) -> dict[str, str]:
    """The environment that gives one grading of a NO_REUSE_FILES module the session's compile reuse back
    (empty where the session has none): for its gradings whose claim is not about the compile (test_attacks'
    answers.yaml, report.md, link, zip and batch cases grade the solution's unmodified sources)."""
    folder = _CompileReuse.withheld or os.environ.get("GRADER_COMPILE_REUSE")
    return {"GRADER_COMPILE_REUSE": folder} if folder else {}


# The fast tier (``bash grader/bootstrap.sh test -n 0 -m fast``; README, docs/design.md "Testing"): the files of the pure parsers (nvcc, ptxas, SASS,
# Nsight Compute, the report check), the rubric, the scoring and the records (results.json, grading.json),
# which start no service, no grading and no GPU; about a minute on 2 busy cores. The full suite
# (``bash grader/bootstrap.sh test``) stays what CI runs.
FAST_FILES = frozenset({
    "test_rubric.py", "test_scoring.py", "test_results.py", "test_results_record.py", "test_grading_json.py",
    "test_intake.py", "test_stage_limits.py", "test_ptxas.py", "test_cubin.py", "test_curve.py", "test_diagnosis.py",
    "test_kinds.py", "test_leaderboard.py", "test_ncu.py", "test_ncu_items.py", "test_ncu_live_fixture.py",
    "test_ncu_proposal.py", "test_ncu_metric_names.py", "test_numerics.py", "test_occupancy_answers.py",
    "test_occupancy_api_replay.py", "test_occupancy_calculator.py", "test_occupancy_config.py",
    "test_occupancy_exercises.py", "test_profile_report.py", "test_profiling.py", "test_protocol.py",
    "test_report_check_config.py", "test_report_check_parse.py", "test_report_check_tables.py",
    "test_run_verdicts.py", "test_sanitize.py", "test_sass.py", "test_timing_peaks.py", "test_serve_store.py",
    "test_serve_bridge_merge.py", "test_no_wall_clock_asserts.py", "test_watch_interval.py", "test_job_page.py",
    "test_fast_tier.py",
})

def pytest_ignore_collect(collection_path, config):
    """``-m fast`` collects only the fast tier's files: importing every other test module (the service's,
    playwright's) would cost the inner loop more than its tests."""
    if (config.getoption("markexpr", "") == "fast" and collection_path.suffix == ".py"
            and collection_path.name.startswith("test_") and collection_path.name not in FAST_FILES):
        return True
    return None


@pytest.hookimpl(tryfirst=True)  # before the -m selection reads the markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in FAST_FILES:
            item.add_marker(pytest.mark.fast)
    if not any("gpu" in item.keywords for item in items):
        return
    info = probe()
    if info.get("ok"):
        run_alone_tests_first(items)
        return
    skip = pytest.mark.skip(reason=f"needs an NVIDIA GPU: {info.get('reason')}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def fake_libcuda(tmp_path_factory) -> Path:
    """libcuda.so.1 built from tests/fixtures/fake_libcuda.c: it logs every call it gets (the sanitizer
    child's tests, tests/test_sanitize_child.py and tests/test_racecheck_early.py)."""
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in libcuda.so.1")
    lib = tmp_path_factory.mktemp("fake-driver") / "libcuda.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(lib), str(ROOT / "tests" / "fixtures" /
                    "fake_libcuda.c")], check=True, timeout=120)
    return lib


# The sandbox tests (tests/test_fence.py, tests/test_fence_limits.py) share these two.
@pytest.fixture
def bwrap_required():
    """Skip, saying why, where bwrap cannot make a sandbox."""
    from tests.fence_helpers import need_bwrap

    need_bwrap()


@pytest.fixture
def scratch(tmp_path):
    """The step's one writable folder."""
    d = tmp_path / "scratch"
    d.mkdir()
    return d


# ---- the GPU suite's shared gradings (tests/gpu_jobs.py) -------------------------------------------------
# fixture name -> the grading it returns. The first GPU test that asks for one starts every grading the
# session's collected tests need, side by side (their GPU steps take turns on one lock file).
GPU_JOB_FIXTURES = {"solutions_graded": "solutions", "starter_graded": "starter", "hostile_graded": "hostile",
                    "shifted_profiled": "shifted", "attacks_graded": "attacks", "textbook_graded": "textbook"}


# Modules whose GPU tests first make something slow of their own on the CPU (test_feedback_truth: static
# gradings of starter/ and solutions/, 6.4 s on an H200): run early, that overlaps the gradings' GPU turns.
EARLY_MODULES = ("test_feedback_truth.py",)


def run_alone_tests_first(items: list) -> None:
    """On a GPU, the GPU tests that take the suite's GPU lock themselves (``gpu_alone``) run first, then
    those of :data:`EARLY_MODULES`, then those whose own gradings queue on the suite's lock
    (``suite_gpu_lock``). The first of them starts the shared gradings, so the gradings' compiles and
    lock waits overlap these tests instead of coming before them (docs/measurements/2026-12-01-h200-speed-round5.md).
    The early modules' CPU work
    comes before the lock-sharing tests, which wait for their turn behind the shared gradings anyway.
    Stable: the order is otherwise kept."""
    def rank(item) -> int:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "gpu_alone" in fixtures:
            return 0
        if "gpu" in item.keywords and item.path.name in EARLY_MODULES:
            return 1
        return 2 if "suite_gpu_lock" in fixtures else 3

    items.sort(key=rank)


class _AloneHold:
    """The suite's GPU lock, held from the first ``gpu_alone`` test to the first test after them (they
    run one after another, first): taken once, so the gradings' turns cannot come between them (flock
    is not first come, first served: one of them waited 89 s for its turn on an H200)."""

    hold: contextlib.ExitStack | None = None

    @classmethod
    def take(cls, lock: Path) -> None:
        from grader.sandbox.lock import held

        if cls.hold is None:
            hold = contextlib.ExitStack()
            hold.enter_context(held(lock))
            cls.hold = hold

    @classmethod
    def give_back(cls) -> None:
        if cls.hold is not None:
            cls.hold.close()
            cls.hold = None


@pytest.fixture
def gpu_alone(gpu_jobs):
    """The suite's GPU lock held for the test: a GPU test of its own (not one of the shared gradings)
    never shares the GPU with a grading's timed parts, whichever runs first."""
    _AloneHold.take(gpu_jobs.lock)
    yield


@pytest.fixture
def suite_gpu_lock(gpu_jobs) -> Path:
    """The suite's GPU lock file, for a test whose own gradings take it for their GPU steps only (the
    service's, through its lock: tests/test_serve_gpu.py), so their CPU work overlaps the shared gradings'."""
    return gpu_jobs.lock


def pytest_runtest_setup(item):
    if "gpu_alone" not in getattr(item, "fixturenames", ()):
        _AloneHold.give_back()


def pytest_sessionfinish(session, exitstatus):
    _AloneHold.give_back()


@pytest.fixture(scope="session")
def gpu_jobs(request, tmp_path_factory):
    from tests.gpu_jobs import GpuJobs

    wanted = {GPU_JOB_FIXTURES[f] for item in request.session.items
              for f in getattr(item, "fixturenames", ()) if f in GPU_JOB_FIXTURES}
    jobs = GpuJobs(tmp_path_factory.mktemp("gpu-jobs"), sorted(wanted))
    yield jobs
    jobs.close()


@pytest.fixture(scope="session")
def solutions_graded(gpu_jobs):
    """solutions/, fully graded (tests/gpu_jobs.py: Graded)."""
    return gpu_jobs.result("solutions")


@pytest.fixture(scope="session")
def textbook_graded(gpu_jobs):
    """tests/submissions/textbook/course's GEMM stages, graded (tests/gpu_jobs.py: Graded)."""
    return gpu_jobs.result("textbook")


@pytest.fixture(scope="session")
def starter_graded(gpu_jobs):
    """starter/, fully graded, its work folder kept."""
    return gpu_jobs.result("starter")


@pytest.fixture(scope="session")
def hostile_graded(gpu_jobs):
    """Every GPU case of tests/submissions/EXPECTED.yaml in one grading (tests/gpu_jobs.py: composite)."""
    return gpu_jobs.result("hostile")


@pytest.fixture(scope="session")
def shifted_profiled(gpu_jobs):
    """(outcomes, ncu run or the reason there is none) of the one-stage-shifted submission."""
    return gpu_jobs.result("shifted")


@pytest.fixture(scope="session")
def attacks_graded(gpu_jobs):
    """{case: (attack_helpers.Graded, results.json unchanged afterwards)} for the GPU attack cases."""
    return gpu_jobs.result("attacks")


# ---- the static gradings several files read (solutions/, starter/) -------------------------------------
STATIC_SUBMISSIONS = {"solutions": ROOT / "solutions", "starter": ROOT / "starter"}


def _static_root(tmp_path_factory) -> Path:
    """Where this session's shared static gradings go: under pytest-xdist, the session's folder that every
    worker's own temporary folder is in (so the first worker to ask grades, the others wait and read)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    return base / "static-gradings"


@pytest.fixture(scope="session")
def static_graded(tmp_path_factory):
    """``static_graded(name)``: the folder of ``python -m grader grade SUBMISSION --no-gpu --quiet`` for
    ``solutions`` or ``starter``, made once per session (a flock keeps the workers from grading it twice)
    and read by every test that checks a static grading's results, summary or rendering (test_cli_static,
    test_feedback_truth). Read-only: a test that changes a grading copies it first."""
    from grader.sandbox.lock import held

    root = _static_root(tmp_path_factory)

    def get(name: str) -> Path:
        out = root / name
        with held(root / f"{name}.lock"):
            if not (out / "results.json").is_file():
                tmp = root / f"{name}.partial"
                if tmp.exists():
                    shutil.rmtree(tmp)
                proc = subprocess.run([sys.executable, "-m", "grader", "grade", str(STATIC_SUBMISSIONS[name]),
                                       "--no-gpu", "--quiet", "--out", str(tmp)], cwd=ROOT, capture_output=True,
                                      text=True, timeout=1200)
                assert proc.returncode == 0, f"the static grading of {name} failed:\n{proc.stderr[-3000:]}"
                tmp.rename(out)
        return out

    return get
