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
    steps = {p["name"]: p["seconds"] for p in g["phases"] if not p.get("stage") and not p.get("detail")}
    assert row["steps"] == steps and "run_stages" in steps
    runs = {p["stage"]: p["seconds"] for p in g["phases"] if p["name"] == "run" and p.get("stage")}
    assert row["slowest_runs"] and set(row["slowest_runs"]) <= set(runs)
    assert list(row["slowest_runs"].values()) == sorted(row["slowest_runs"].values(), reverse=True)
    assert max(row["slowest_runs"].values()) == max(runs.values())
