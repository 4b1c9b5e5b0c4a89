"""Where a grading's time goes (grader/clock.py), what graded it (rubric hash, code version), and the
GPU lock that lets a batch prepare one submission while another is timed (grader/pipeline.py)."""
from __future__ import annotations

import json
import multiprocessing as mp
import subprocess
import sys
import time
from pathlib import Path

import pytest

import grader
from grader.clock import Clock, Phase, breakdown
from grader.compile import toolchain
from grader.grading import Grading, load_grading
from grader.rubric.load import load_rubric

ROOT = Path(__file__).resolve().parent.parent


def test_steps_and_details_are_timed_and_listed_under_their_step():
    clock = Clock()
    with clock.step("compile_stages"):
        with clock.detail("compile", "naive"):
            time.sleep(0.02)
        clock.add("run.bench", 1.5, "naive")
    with clock.step("outputs"):
        pass
    names = [(p.name, p.stage, p.detail) for p in clock.phases]
    assert names == [("compile", "naive", True), ("run.bench", "naive", True), ("compile_stages", "", False),
                     ("outputs", "", False)]
    assert clock.phases[0].seconds >= 0.02 and clock.phases[2].seconds >= clock.phases[0].seconds
    rows = breakdown(clock.phases, total_s=2.0)
    assert [r[0] for r in rows] == ["compile_stages", "  compile [naive]", "  run.bench [naive]", "outputs"]
    assert rows[0][2].endswith("%") and rows[1][2] == ""


def test_a_step_that_raises_is_still_timed():
    clock = Clock()
    with pytest.raises(RuntimeError), clock.step("profile"):
        raise RuntimeError("a bug")
    assert clock.phases == [Phase("profile", clock.phases[0].seconds)]


def test_negative_times_from_a_child_are_not_recorded_as_negative():
    clock = Clock()
    clock.add("run.start", -0.2, "naive")  # the child's own clock overlapped the parent's measure
    assert clock.phases[0].seconds == 0.0


def test_the_rubric_hash_is_of_the_files_bytes(tmp_path):
    text = (ROOT / "rubric.yaml").read_text(encoding="utf-8")
    (tmp_path / "rubric.yaml").write_text(text, encoding="utf-8")
    a = load_rubric(tmp_path / "rubric.yaml").sha256
    (tmp_path / "rubric.yaml").write_text(text + "\n# an instructor's comment\n", encoding="utf-8")
    b = load_rubric(tmp_path / "rubric.yaml").sha256
    assert len(a) == 64 and a != b


def test_the_code_version_names_the_release_and_changes_with_the_code():
    v = grader.code_version()
    release, digest = v.split("+")
    assert release and len(digest) == 12
    # A fresh interpreter over the same files computes the same version.
    again = subprocess.run([sys.executable, "-c", "import grader; print(grader.code_version())"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert again == v


@pytest.mark.skipif(toolchain.find_nvcc().path is None, reason="no nvcc on this machine")
def test_a_grading_records_its_phases_rubric_and_version(tmp_path):
    from grader.outputs.write import write_outputs
    from grader.pipeline import grade

    rubric = load_rubric(ROOT / "rubric.yaml")
    g = grade(ROOT / "solutions", rubric, tmp_path, stages=["naive", "tiled"], use_gpu=False)
    write_outputs(g, tmp_path)
    data = json.loads((tmp_path / "grading.json").read_text())
    assert data["rubric_sha256"] == rubric.sha256 and data["grader_version"] == grader.code_version()
    assert data["gpu_graded"] is False
    steps = [p["name"] for p in data["phases"] if not p["detail"]]
    assert steps[:3] == ["probe", "intake", "compile_stages"] and steps[-1] == "outputs"
    assert {(p["name"], p["stage"]) for p in data["phases"] if p["detail"]} >= {("compile", "naive"),
                                                                                ("compile", "tiled")}
    # The steps account for the grading's time (the outputs come after it).
    summed = sum(p["seconds"] for p in data["phases"] if not p["detail"] and p["name"] != "outputs")
    assert summed == pytest.approx(data["seconds"], abs=0.5)
    back = load_grading(tmp_path / "grading.json")
    assert back.phases == g.phases and back.rubric_sha256 == rubric.sha256
    table = subprocess.run([sys.executable, "tools/phase_times.py", str(tmp_path / "grading.json")], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout
    assert "| compile_stages |" in table and "compile [naive]" in table and "**total**" in table
    # What the grading cost the CPUs: every process, and of that the grading process itself.
    assert 0 < data["cpu_seconds_grader"] <= data["cpu_seconds"]
    assert back.cpu_self_s == data["cpu_seconds_grader"]
    assert f"| CPU seconds, the grading process | {data['cpu_seconds_grader']:.1f} |" in table


def test_a_grading_json_without_the_new_keys_still_loads():
    from tests.test_grading_json import synthetic_grading

    data = synthetic_grading().to_json()
    for key in ("phases", "rubric_sha256", "grader_version"):
        data.pop(key)
    back = Grading.from_json(data)
    assert back.phases == [] and back.rubric_sha256 == ""


def _hold(lock: str, seconds: float, log: str) -> None:
    from grader.pipeline import gpu_turn

    clock = Clock()
    with gpu_turn(Path(lock), clock, needed=True):
        start = time.time()
        time.sleep(seconds)
        end = time.time()
    with open(log, "a") as fh:
        fh.write(f"{start} {end}\n")


def test_two_gradings_sharing_a_gpu_lock_never_hold_it_at_once(tmp_path):
    lock, log = tmp_path / "gpu0.lock", tmp_path / "held.txt"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_hold, args=(str(lock), 0.4, str(log))) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    spans = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    assert len(spans) == 3
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end - 0.01  # the next holder starts only after the previous one let go


def test_no_lock_or_no_gpu_means_no_wait():
    from grader.pipeline import gpu_turn

    clock = Clock()
    with gpu_turn(None, clock, needed=True), gpu_turn(Path("/nonexistent/dir/x.lock"), clock, needed=False):
        pass
    assert clock.phases == []


def test_summary_says_where_the_time_went():
    from grader.clock import Phase
    from grader.outputs.summary import summary_markdown
    from tests.test_grading_json import synthetic_grading

    g = synthetic_grading()
    g.phases = [Phase("probe", 0.2), Phase("compile", 1.4, "naive", True), Phase("compile_stages", 3.1),
                Phase("run_stages", 15.4), Phase("profile", 7.9)]
    line = [x for x in summary_markdown(g).splitlines() if x.startswith("Grading time:")]
    assert line == ["Grading time: 321.5 s (compile_stages 3.1 s, run_stages 15.4 s, profile 7.9 s; "
                    "every phase: grading.json)"]
    g.phases = []
    assert "Grading time:" not in summary_markdown(g)
