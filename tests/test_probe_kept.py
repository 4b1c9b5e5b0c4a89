"""The machine's kept GPU description (grader/gpu/device.py: kept_probe): a single grading probes once
per machine state, and probes again whenever what the answer depends on changed or the file cannot be
trusted. The probe child itself needs a GPU, so it is replaced by a counter here (the GPU is the one
part CI cannot have)."""
from __future__ import annotations

import json
import os

import pytest

from grader.evidence.protocol import ProbeResult
from grader.evidence.sandbox import Confinement
from grader.gpu import device
from grader.records import to_jsonable
from grader.sandbox import guard as sandbox

H200 = ProbeResult(ok=True, reason="", index=0, count=1, name="NVIDIA H200", cc=[9, 0], sms=132,
                   clock_khz=1980000, l2_bytes=62914560, total_mem=150000000000, runtime_version=13000,
                   driver_version=13000, cupy_version="14.2.0")


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A driver folder of our own (version, one GPU's information), a kept folder, and a probe that
    counts its calls."""
    if sandbox.mode().confinement is not Confinement.BWRAP:
        pytest.skip(f"a kept folder is used only with the bwrap fence or a student user: {sandbox.mode()}")
    driver = tmp_path / "driver"
    (driver / "gpus" / "0000:19:00.0").mkdir(parents=True)
    (driver / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04\n")
    (driver / "gpus" / "0000:19:00.0" / "information").write_text("Model: NVIDIA H200\nGPU UUID: GPU-1\n")
    monkeypatch.setattr(device, "_DRIVER", driver)
    root = tmp_path / "kept"
    monkeypatch.setenv(device.PROBE_CACHE_VAR, str(root))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    calls: list[int] = []
    answer: dict = {"device": H200, "reason": ""}

    def probe(timeout_s, work=None, extra_env=None):
        calls.append(1)
        return answer["device"], answer["reason"]

    monkeypatch.setattr(device, "probe_device", probe)
    return driver, root, calls, answer


def test_the_description_is_probed_once_then_read_back(machine):
    _driver, root, calls, _answer = machine
    first = device.kept_probe(60)
    second = device.kept_probe(60)
    assert first == (H200, "", False) and second == (H200, "", True)
    assert len(calls) == 1
    kept = list(root.glob("*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text()) == to_jsonable(H200)
    assert oct(kept[0].stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("change", ["driver", "board", "visible", "code"])
def test_what_the_answer_depends_on_changing_probes_again(machine, monkeypatch, change):
    driver, _root, calls, _answer = machine
    device.kept_probe(60)
    if change == "driver":
        (driver / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  590.10\n")
    elif change == "board":
        (driver / "gpus" / "0000:19:00.0" / "information").write_text("Model: NVIDIA H200\nGPU UUID: GPU-2\n")
    elif change == "visible":
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    else:
        import grader

        monkeypatch.setattr(grader, "code_version", lambda: "another grader")
    assert device.kept_probe(60)[2] is False
    assert device.kept_probe(60)[2] is True
    assert len(calls) == 2


def test_a_kept_file_that_cannot_be_trusted_or_read_is_probed_again(machine):
    _driver, root, calls, _answer = machine
    device.kept_probe(60)
    (path,) = root.glob("*.json")
    path.chmod(0o666)  # someone else could have written it
    assert device.kept_probe(60)[2] is False
    path.write_text('{"ok": true, "cc": "nine"}')  # not the probe's shape
    assert device.kept_probe(60) == (H200, "", False)
    path.unlink()
    os.symlink("/etc/hostname", path)  # a link is never followed
    assert device.kept_probe(60)[2] is False
    assert len(calls) == 4


def test_nothing_is_kept_without_a_driver_when_switched_off_or_for_an_unusable_gpu(machine, monkeypatch):
    driver, root, calls, answer = machine
    answer["device"], answer["reason"] = ProbeResult(ok=False, reason="no CUDA device"), "no CUDA device"
    assert device.kept_probe(60) == (ProbeResult(ok=False, reason="no CUDA device"), "no CUDA device", False)
    assert not list(root.glob("*.json"))  # an unusable answer is asked again next time
    answer["device"], answer["reason"] = H200, ""
    monkeypatch.setenv(device.PROBE_CACHE_VAR, "off")
    device.kept_probe(60), device.kept_probe(60)
    monkeypatch.setenv(device.PROBE_CACHE_VAR, str(root))
    (driver / "version").unlink()  # no NVIDIA driver to read the machine from
    device.kept_probe(60), device.kept_probe(60)
    assert len(calls) == 5 and not list(root.glob("*.json"))
