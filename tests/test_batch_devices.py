"""A batch probes each GPU once and hands every grading on it the description; the first grading on
each GPU takes the GPU's free lock before compiling (grader/deploy/batch/pool.py, grader/pipeline.py).

The probes are the real probe child over tests/fake_cupy (a stand-in H100-like GPU); the gradings are
a fake child that records what it was given, and pipeline.grade's lock order is checked with its
steps replaced by ones that look at the lock.
"""
from __future__ import annotations

import fcntl
import json
import sys
import textwrap
from pathlib import Path

import pytest

from grader import pipeline
from grader.deploy import batch
from grader.deploy.batch.pool import device_file, probe_gpus
from grader.grading import Environment
from grader.run.device import device_problem, read_device_file, write_device_file
from grader.spec.peaks import Peaks
from grader.spec.rubric import load_rubric
from tests.test_batch import _small_export
from tests.test_children import FAKE_CUPY

ROOT = Path(__file__).resolve().parent.parent
RECORDING_CHILD = textwrap.dedent("""\
    import json, os, sys
    sub, out, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    res = {"score": 0.0, "execution_time": 0, "output": "", "tests": [],
           "extra_data": {"args": args, "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f)
    """)


def test_each_gpu_is_probed_once_and_its_description_written(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY))
    got = probe_gpus(["0", "1"], tmp_path / "locks", 60)
    assert got == {"0": "", "1": ""}
    for gpu in ("0", "1"):
        described, problem = read_device_file(device_file(tmp_path / "locks", gpu))
        assert problem == "" and described is not None
        assert described["cc"] == [9, 0] and described["sms"] == 132


def test_a_failed_probe_leaves_no_description_and_says_why(tmp_path, monkeypatch):
    stale = device_file(tmp_path / "locks", "0")
    write_device_file(stale, {"ok": True, "cc": [8, 0], "sms": 1, "clock_khz": 1, "l2_bytes": 1, "total_mem": 1,
                              "name": "an earlier batch's"})
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "nothing"))
    monkeypatch.setitem(sys.modules, "cupy", None)  # not here either
    got = probe_gpus(["0"], tmp_path / "locks", 60)
    if got["0"] == "":
        pytest.skip("a real CuPy and GPU answered the probe")
    assert "CuPy" in got["0"] or "no CUDA device" in got["0"] or "probe failed" in got["0"], got
    assert not stale.exists()  # never an earlier batch's description


@pytest.mark.parametrize("data, problem", [
    ([], "expected an object"),
    ({"ok": False, "reason": "no CUDA device"}, '"ok" is not true'),
    ({"ok": True, "cc": [9], "sms": 132}, '"cc" must be [major, minor]'),
    ({"ok": True, "cc": [9, 0], "sms": "132", "clock_khz": 1, "l2_bytes": 1, "total_mem": 1, "name": "x"},
     '"sms" must be a whole number'),
    ({"ok": True, "cc": [9, 0], "sms": 132, "clock_khz": 1, "l2_bytes": 1, "total_mem": 1, "name": 5},
     '"name" must be a string'),
])
def test_a_description_that_is_not_the_probes_shape_is_named(data, problem):
    assert device_problem(data).startswith(problem)


def test_an_unreadable_description_file_is_named(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(" " * 70_000)
    for path, said in ((tmp_path / "none.json", "not a regular file"), (big, "over 65536 bytes")):
        data, problem = read_device_file(path)
        assert data is None and said in problem and str(path) in problem
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert read_device_file(bad)[0] is None


def test_the_gradings_get_their_gpus_description_and_the_first_on_each_gpu_takes_its_lock_early(tmp_path,
                                                                                                     monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY))  # the batch's probes (the children below do not probe)
    script = tmp_path / "child.py"
    script.write_text(RECORDING_CHILD)
    exp = _small_export(tmp_path / "exp", tuple(f"submission_{i}" for i in range(6)))
    out = tmp_path / "out"
    s = batch.grade_export(exp, out, quiet=True, gpus=["0", "1"],
                           make_cmd=lambda sub, o, opts: [sys.executable, str(script), str(sub.path), str(o),
                                                          *batch.child_command(sub, o, opts)])
    assert s.graded == 6
    early = {"0": 0, "1": 0}
    for i in range(6):
        folder = out / "submissions" / f"submission_{i}"
        extra = json.loads((folder / "results.json").read_text())["extra_data"]
        gpu, args = extra["gpu"], extra["args"]
        assert args[args.index("--gpu-lock") + 1] == str(out / "locks" / f"gpu-{gpu}.lock")
        assert args[args.index("--device") + 1] == str(device_file(out / "locks", gpu))
        early[gpu] += "--gpu-lock-early" in args
    assert early == {"0": 1, "1": 1}  # one per GPU: its first
    info = json.loads((out / "batch.json").read_text())
    assert info["devices_probed"] == ["0", "1"] and info["device_probe_s"] > 0


# --------------------------------------------------------------------------- pipeline.grade's lock order


def _lock_is_held(lock: Path) -> bool:
    with open(lock, "a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False


@pytest.mark.parametrize("early", [False, True])
def test_an_early_turn_holds_the_lock_from_the_childrens_start_through_the_gpu_steps(tmp_path, monkeypatch, early):
    rubric = load_rubric(ROOT / "rubric.yaml")
    lock = tmp_path / "gpu.lock"
    seen: list[tuple[str, bool]] = []

    def step(name):
        def run(job):
            seen.append((name, _lock_is_held(lock)))
            return job
        run.__name__ = name
        return run

    monkeypatch.setattr(pipeline, "start_gpu_children", lambda job: seen.append(("children", _lock_is_held(lock))))
    monkeypatch.setattr(pipeline, "CPU_STEPS", (step("compile_stages"),))
    monkeypatch.setattr(pipeline, "GPU_STEPS", (step("run_stages"),))
    monkeypatch.setattr(pipeline, "AFTER_GPU_STEPS", (step("score_stages"),))
    env = Environment({"ok": True, "cc": [9, 0]}, "", None, None, [], Peaks(None, None, "none"))
    g = pipeline.grade(ROOT / "solutions", rubric, tmp_path / "out", env=env, gpu_lock=lock, gpu_lock_early=early)
    if early:  # children start under the lock, the compiles run under it
        assert seen == [("children", True), ("compile_stages", True), ("run_stages", True), ("score_stages", False)]
    else:  # the children start after the lock, in run_stages (not here), the compiles outside it
        assert seen == [("compile_stages", False), ("run_stages", True), ("score_stages", False)]
    held = [p for p in g.phases if p.name == "gpu_held"]
    assert len(held) == 1


def test_a_grading_given_an_unusable_description_probes_and_says_so(tmp_path):
    rubric = load_rubric(ROOT / "rubric.yaml")
    bad = tmp_path / "device.json"
    bad.write_text('{"ok": true, "cc": "nine"}')
    g = pipeline.grade(ROOT / "solutions", rubric, tmp_path / "out", stages=["naive"], device_file=bad)
    assert any(f"{bad}: \"cc\" must be [major, minor]" in n and "probed again" in n for n in g.notes), g.notes
    assert [p.name for p in g.phases][:1] == ["probe"]
