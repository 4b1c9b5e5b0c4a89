"""A batch probes each GPU once and hands every grading on it the description; a grading checks the
file it is given and probes for itself when it cannot use it (grader/deploy/batch/pool.py,
grader/gpu/device.py, grader/pipeline.py).

The probes are the real probe child over tests/fake_cupy (a stand-in H100-like GPU) or a replaced
probe_device; the gradings are a fake child that records what it was given, and one real static
grading given an unusable file.
"""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from grader import pipeline
from grader.deploy import batch
from grader.deploy.batch.pool import device_file, probe_gpus
from grader.evidence.protocol import ProbeResult
from grader.gpu import device as device_module
from grader.gpu.device import read_device_file, write_device_file
from grader.rubric.load import load_rubric
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
        assert described.cc == [9, 0] and described.sms == 132


def test_a_failed_probe_leaves_no_description_and_says_why(tmp_path, monkeypatch):
    stale = device_file(tmp_path / "locks", "0")
    write_device_file(stale, ProbeResult(ok=True, cc=[8, 0], sms=1, clock_khz=1, l2_bytes=1, total_mem=1,
                                         name="an earlier batch's"))
    monkeypatch.setattr(device_module, "probe_device", lambda *_a, **_k: (ProbeResult(ok=False, reason="no CUDA device"),
                                                                         "no CUDA device"))
    assert probe_gpus(["0"], tmp_path / "locks", 60) == {"0": "no CUDA device"}
    assert not stale.exists()  # never an earlier batch's description


@pytest.mark.parametrize("data, problem", [
    ([], "expected a JSON object"),
    ({"ok": False, "reason": "no CUDA device"}, '"ok" is not true'),
    ({"ok": True, "cc": [9], "sms": 132}, '"cc" must be [major, minor]'),
    ({"ok": True, "cc": [9, 0], "sms": "132", "clock_khz": 1, "l2_bytes": 1, "total_mem": 1, "name": "x"},
     '"sms"'),
    ({"ok": True, "cc": [9, 0], "sms": 132, "clock_khz": 1, "l2_bytes": 1, "total_mem": 1, "name": 5},
     '"name"'),
])
def test_a_description_that_is_not_the_probes_shape_is_named(data, problem, tmp_path):
    path = tmp_path / "device.json"
    path.write_text(json.dumps(data))
    device, said = read_device_file(path)
    assert device is None and said.startswith(f"{path}: ") and problem in said


def test_an_unreadable_description_file_is_named(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(" " * 70_000)
    for path, said in ((tmp_path / "none.json", "not a regular file"), (big, "over 65536 bytes")):
        data, problem = read_device_file(path)
        assert data is None and said in problem and str(path) in problem
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert read_device_file(bad)[0] is None


def test_the_gradings_get_their_gpus_lock_and_description(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(FAKE_CUPY))  # the batch's probes (the children below do not probe)
    s = batch.grade_export(_small_export(tmp_path / "exp", tuple(f"submission_{i}" for i in range(6))),
                           tmp_path / "out", quiet=True, gpus=["0", "1"], make_cmd=_recording(tmp_path))
    assert s.graded == 6
    out = tmp_path / "out"
    for i in range(6):
        gpu, args = _given(out, f"submission_{i}")
        assert gpu in ("0", "1")
        assert args[args.index("--gpu-lock") + 1] == str(out / "locks" / f"gpu-{gpu}.lock")
        assert args[args.index("--device") + 1] == str(device_file(out / "locks", gpu))
    info = json.loads((out / "batch.json").read_text())
    assert info["devices_probed"] == ["0", "1"] and info["device_probe_s"] > 0


def test_a_gpu_whose_probe_failed_gets_gradings_that_probe_for_themselves(tmp_path, monkeypatch):
    monkeypatch.setattr(device_module, "probe_device", lambda *_a, **_k: (None, "the device probe failed: boom"))
    s = batch.grade_export(_small_export(tmp_path / "exp", ("submission_1", "submission_2")), tmp_path / "out",
                           quiet=True, gpus=["0"], make_cmd=_recording(tmp_path))
    assert s.graded == 2
    _, args = _given(tmp_path / "out", "submission_1")
    assert "--gpu-lock" in args and "--device" not in args
    info = json.loads((tmp_path / "out" / "batch.json").read_text())
    assert info["devices_probed"] == []
    assert any("GPU 0: the batch's probe failed (the device probe failed: boom)" in n for n in info["notes"])


def _recording(tmp_path: Path):
    """A batch child command: the recording child, given the grader's own command line as arguments."""
    script = tmp_path / "child.py"
    script.write_text(RECORDING_CHILD)
    return lambda sub, o, opts: [sys.executable, str(script), str(sub.path), str(o), *batch.child_command(sub, o, opts)]


def _given(out: Path, folder: str) -> tuple[str, list[str]]:
    extra = json.loads((out / "submissions" / folder / "results.json").read_text())["extra_data"]
    return extra["gpu"], extra["args"]


def test_a_grading_given_an_unusable_description_probes_and_says_so(tmp_path):
    rubric = load_rubric(ROOT / "rubric.yaml")
    bad = tmp_path / "device.json"
    bad.write_text('{"ok": true, "cc": "nine"}')
    g = pipeline.grade(ROOT / "solutions", rubric, tmp_path / "out", stages=["naive"], device_file=bad)
    assert any(f"{bad}: " in n and "\"cc\"" in n and "probed again" in n for n in g.notes), g.notes
    assert [p.name for p in g.phases][:1] == ["probe"]
