"""The GPU suite's timeline of its shared gradings (tests/gpu_jobs.py: held_phases), read from a real
grading.json (tests/fixtures/gradings: an H200 grading of the textbook submission)."""
import json
import shutil

from tests.gpu_jobs import ROOT, held_phases


def test_each_grading_says_its_steps_its_lock_and_its_slowest_stage_runs(tmp_path):
    src = ROOT / "tests" / "fixtures" / "gradings" / "textbook" / "grading.json"
    (tmp_path / "case" / "out").mkdir(parents=True)
    shutil.copyfile(src, tmp_path / "case" / "out" / "grading.json")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "grading.json").write_text("{not json")  # skipped, not fatal
    [row] = held_phases(tmp_path)
    g = json.loads(src.read_text())
    assert row["grading"] == "case/out" and row["seconds"] == g["seconds"]
    steps: dict[str, float] = {}
    for p in g["phases"]:
        if not p.get("stage") and not p.get("detail"):
            steps[p["name"]] = steps.get(p["name"], 0.0) + p["seconds"]
    assert row["steps"] == {k: round(v, 3) for k, v in steps.items()} and "run_stages" in steps
    runs = {p["stage"]: p["seconds"] for p in g["phases"] if p["name"] == "run" and p.get("stage")}
    assert row["slowest_runs"] and set(row["slowest_runs"]) <= set(runs)
    assert list(row["slowest_runs"].values()) == sorted(row["slowest_runs"].values(), reverse=True)
    assert max(row["slowest_runs"].values()) == max(runs.values())


def test_a_phase_that_happens_twice_is_summed(tmp_path):
    """A grading takes the GPU lock twice (its GPU steps, then the occupancy section's runs): both waits count."""
    phases = [{"name": "gpu_wait", "seconds": 64.0, "stage": "", "detail": False, "ended": 1.0},
              {"name": "gpu_held", "seconds": 0.5, "stage": "", "detail": True, "ended": 2.0},
              {"name": "gpu_wait", "seconds": 0.25, "stage": "", "detail": False, "ended": 3.0},
              {"name": "gpu_held", "seconds": 2.0, "stage": "", "detail": True, "ended": 4.0}]
    (tmp_path / "grading.json").write_text(json.dumps({"seconds": 70.0, "phases": phases}))
    [row] = held_phases(tmp_path)
    assert (row["gpu_wait"], row["gpu_held"], row["steps"]) == (64.25, 2.5, {"gpu_wait": 64.25})


def test_the_gpu_suite_runs_lone_tests_then_early_modules_then_lock_sharing_tests(tmp_path):
    """tests/conftest.py: run_alone_tests_first, the order the GPU suite's wall time depends on
    (docs/measurements/2026-12-02-h200-speed-round6.md). The sort is stable within each rank."""
    from tests.conftest import EARLY_MODULES, run_alone_tests_first

    class Item:
        def __init__(self, name: str, module: str, fixtures: tuple[str, ...] = (), gpu: bool = True):
            self.name, self.path, self.fixturenames = name, tmp_path / module, fixtures
            self.keywords = {"gpu": True} if gpu else {}

    items = [Item("cpu", "test_a.py", gpu=False), Item("service", "test_serve_gpu.py", ("suite_gpu_lock",)),
             Item("shared", "test_gpu_grading.py", ("solutions_graded",)),
             Item("early", EARLY_MODULES[0], ("solutions_graded",)), Item("early_cpu", EARLY_MODULES[0], gpu=False),
             Item("alone1", "test_fence.py", ("gpu_alone",)), Item("alone2", "test_gpu_sanitize.py", ("gpu_alone",))]
    run_alone_tests_first(items)
    assert [i.name for i in items] == ["alone1", "alone2", "early", "service", "cpu", "shared", "early_cpu"]


def test_the_gradings_the_early_tests_need_reach_the_gpu_lock_before_the_others(tmp_path):
    """tests/gpu_jobs.py: FIRST. While the lone tests hold the suite's lock (held, as tests/conftest.py's
    _AloneHold does), the FIRST gradings queue for it before the others start; so they take it first
    however fast the others' CPU steps are. Real lock files and threads; the builders stand in for
    ``python -m grader grade --gpu-lock``."""
    import threading
    import time

    from grader.sandbox.lock import held, held_in_turn
    from tests.gpu_jobs import FIRST, GpuJobs

    events: list[tuple[float, str, str]] = []
    mark = threading.Lock()

    def note(name: str, what: str) -> None:
        with mark:
            events.append((time.monotonic(), name, what))

    def builder(name: str, cpu_s: float):
        def build(_work, lock):
            note(name, "start")
            time.sleep(cpu_s)  # its CPU steps: the others' are made faster than the first ones'
            with held_in_turn(lock):
                note(name, "gpu")
                time.sleep(0.05)
            return name
        return build

    builders = {"solutions": builder("solutions", 0.3), "starter": builder("starter", 0.4),
                "hostile": builder("hostile", 0.0), "attacks": builder("attacks", 0.0)}
    assert set(FIRST) <= set(builders)
    lock = tmp_path / "gpu.lock"
    with held(lock):  # the lone tests' hold
        jobs = GpuJobs(tmp_path, ["attacks", "hostile", "solutions", "starter"], builders=builders)
        time.sleep(1.5)
        started = {name for _t, name, what in events if what == "start"}
        assert started == set(builders), events  # the others started while the lock was still held
    assert [jobs.result(n) for n in builders] == list(builders)
    jobs.close()
    gpu_order = [name for _t, name, what in sorted(events) if what == "gpu"]
    assert set(gpu_order[:2]) == set(FIRST) and set(gpu_order[2:]) == {"hostile", "attacks"}, events
    first_start = {name: t for t, name, what in events if what == "start"}
    assert min(first_start["hostile"], first_start["attacks"]) >= first_start["starter"] + 0.4, events
