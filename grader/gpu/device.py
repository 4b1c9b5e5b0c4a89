"""The GPU a grading runs on: asked of the probe child, or read from a file that a batch wrote after
probing that GPU once.

The probe is a child process (grader/children/probe.py: Python, CuPy, the driver's start) because
the grading process never starts CUDA itself. A batch grades many submissions on each GPU, so it
probes each GPU once and hands every grading on it the description (``grade --device FILE``); a
grading then starts one process fewer, outside its GPU turn, while the other grading on that GPU is
timed. A file that cannot be used (missing, too large, not the probe's shape) is not fatal: the
grading probes for itself and its notes say why.

A single grading (``python -m grader grade``, a TA's ``run_local.py``) keeps the description too
(:func:`kept_probe`): the probe child costs about a second, every time, for an answer that
changes only with the machine. The kept file's name is a digest of what the answer depends on (the
boot, the driver and its GPUs as ``/proc/driver/nvidia`` lists them, MIG's capability devices, the
visible devices, the Python and CuPy installed, the grader's code), so a reboot, a driver update, a
GPU or MIG change, another CuPy or another ``CUDA_VISIBLE_DEVICES`` probes again. Only a usable
description is kept, in a kept folder the grader alone may write (grader/sandbox/kept.py;
``GRADER_PROBE_CACHE``, ``off`` to probe every time).
"""
from __future__ import annotations

import glob
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

from grader.children.protocol import PROBE
from grader.evidence.protocol import ProbeResult, ProbeSpec
from grader.files import replace_whole
from grader.records import RecordError, from_jsonable, to_jsonable
from grader.sandbox.kept import kept_root, private_file
from grader.sandbox.launch import launch

DEVICE_FILE_MAX_BYTES = 64 * 1024  # the probe writes a few hundred bytes
PROBE_OUTPUT_LIMIT = 20_000
# What the grading reads of a usable description (grader/rubric/peaks.py, the arch flags, the report);
# the probe writes 0 for a property the runtime does not report.
_COUNTS = ("sms", "clock_khz", "l2_bytes", "total_mem")


def probe_device(timeout_s: float, work: Path | None = None,
                 extra_env: dict[str, str] | None = None) -> tuple[ProbeResult | None, str]:
    """(the probe child's description, "") or (None, why there is no usable GPU). A description
    whose "ok" is false is returned with its own reason (no device, CuPy unusable)."""
    with tempfile.TemporaryDirectory(prefix="grader-probe-") as tmp:
        child = launch(PROBE, ProbeSpec(), Path(work or tmp), timeout_s, PROBE_OUTPUT_LIMIT, extra_env=extra_env)
    if child.result is None:
        why = child.no_result if child.proc.ok else child.proc.stderr.strip()[-300:]
        return None, f"the device probe failed ({child.proc.brief()}): {why}"
    # grading.json keeps the description as the probe wrote it (Environment.device, read by many steps)
    return child.result, "" if child.result.ok else child.result.reason


def device_problem(device: ProbeResult | None) -> str:
    """Why ``device`` is not a usable description of a present GPU ("" when it is)."""
    if device is None:
        return "no description"
    if device.ok is not True:
        return '"ok" is not true (the probe found no usable GPU)'
    cc = device.cc
    if not (len(cc) == 2 and all(type(v) is int and 0 <= v < 100 for v in cc)):
        return f'"cc" must be [major, minor], found {cc!r}'
    for key in _COUNTS:
        value = getattr(device, key)
        if type(value) is not int or value < 0:
            return f'"{key}" must be a whole number, found {value!r}'
    return ""


def read_device_file(path: Path) -> tuple[ProbeResult | None, str]:
    """(the description in ``path``, "") or (None, what is wrong with the file)."""
    try:
        if path.is_symlink() or not path.is_file():
            return None, f"{path}: not a regular file"
        if path.stat().st_size > DEVICE_FILE_MAX_BYTES:
            return None, f"{path}: over {DEVICE_FILE_MAX_BYTES} bytes"
        device = from_jsonable(ProbeResult, json.loads(path.read_text()))
    except RecordError as exc:
        return None, f"{path}: not the probe's description ({exc})"
    except (OSError, ValueError, RecursionError) as exc:
        return None, f"{path}: {exc}"
    problem = device_problem(device)
    return (device, "") if not problem else (None, f"{path}: {problem}")


def describe_into(path: Path, timeout_s: float, extra_env: dict[str, str] | None = None) -> str:
    """Probe the GPU once and write its description to ``path`` for the gradings that follow (a
    batch's GPU, a service worker's); "" or why not (then no file is left: each grading probes for
    itself). An earlier description at ``path`` is removed first."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        return f"{path}: {exc}"
    device, reason = probe_device(timeout_s, extra_env=extra_env)
    problem = reason or device_problem(device)
    if problem or device is None:
        return problem
    try:
        write_device_file(path, device)
    except OSError as exc:
        return f"the description could not be written: {exc}"
    return ""


def write_device_file(path: Path, device: ProbeResult) -> None:
    """Write ``device`` to ``path`` whole or not at all (a temporary file of its own, renamed), so two
    gradings writing at once never leave half a description; the file is the grader's alone (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_whole(path, json.dumps(to_jsonable(device), indent=1) + "\n")


PROBE_CACHE_VAR = "GRADER_PROBE_CACHE"  # a folder, or "off": probe in every grading
_DRIVER = Path("/proc/driver/nvidia")
# What a GPU's description depends on, besides the files above (read by :func:`machine_key`).
_VISIBILITY = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def _read(path: str | Path, limit: int = 64 * 1024) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode(errors="replace")
    except OSError:
        return ""


def machine_key() -> str | None:
    """A digest of everything the probe's answer depends on, or None where there is no NVIDIA driver
    to read it from (then nothing is kept)."""
    driver = _read(_DRIVER / "version")
    if not driver:
        return None
    from grader import code_version

    cupy = importlib.util.find_spec("cupy")
    origin = cupy.origin if cupy is not None and cupy.origin else ""
    try:
        cupy_stamp = os.stat(origin).st_mtime_ns if origin else 0
    except OSError:
        cupy_stamp = 0
    parts = {
        "boot": _read("/proc/sys/kernel/random/boot_id").strip(),
        "driver": driver,
        "gpus": [_read(p) for p in sorted(glob.glob(str(_DRIVER / "gpus" / "*" / "information")))],
        "mig": sorted(os.listdir("/dev/nvidia-caps")) if os.path.isdir("/dev/nvidia-caps") else [],
        "env": {k: os.environ.get(k) for k in _VISIBILITY},
        "python": [sys.executable, sys.version],
        "cupy": [origin, cupy_stamp],
        "code": code_version(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def kept_probe(timeout_s: float, work: Path | None = None) -> tuple[ProbeResult | None, str, bool]:
    """(description, reason, kept): the machine's kept description when there is a usable one for
    :func:`machine_key` (kept True), else the probe child's (:func:`probe_device`), kept for the next
    grading when it found a usable GPU."""
    root = kept_root(PROBE_CACHE_VAR, "probe")
    key = machine_key() if root is not None else None
    if root is None or key is None:
        return (*probe_device(timeout_s, work), False)
    path = root / f"{key}.json"
    if private_file(path):
        device, problem = read_device_file(path)
        if device is not None and not problem:
            return device, "", True
    device, reason = probe_device(timeout_s, work)
    if device is not None and not reason and not device_problem(device):
        try:
            write_device_file(path, device)
        except OSError:
            pass  # not kept: the next grading probes again
    return device, reason, False
