"""The GPU a grading runs on: asked of the probe child, or read from a file that a batch wrote after
probing that GPU once.

The probe is a child process (grader/children/probe.py: Python, CuPy, the driver's start) because
the grading process never starts CUDA itself. A batch grades many submissions on each GPU, so it
probes each GPU once and hands every grading on it the description (``grade --device FILE``); a
grading then starts one process fewer, outside its GPU turn, while the other grading on that GPU is
timed. A file that cannot be used (missing, too large, not the probe's shape) is not fatal: the
grading probes for itself and its notes say why.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from grader.children.protocol import PROBE, ProbeSpec
from grader.records import to_jsonable
from grader.sandbox.launch import launch

DEVICE_FILE_MAX_BYTES = 64 * 1024  # the probe writes a few hundred bytes
PROBE_OUTPUT_LIMIT = 20_000
# What the grading reads of a usable description (grader/rubric/peaks.py, the arch flags, the report);
# the probe writes 0 for a property the runtime does not report.
_COUNTS = ("sms", "clock_khz", "l2_bytes", "total_mem")


def probe_device(timeout_s: float, work: Path | None = None,
                 extra_env: dict[str, str] | None = None) -> tuple[dict[str, Any] | None, str]:
    """(the probe child's description, "") or (None, why there is no usable GPU). A description
    whose "ok" is false is returned with its own reason (no device, CuPy unusable)."""
    with tempfile.TemporaryDirectory(prefix="grader-probe-") as tmp:
        child = launch(PROBE, ProbeSpec(), Path(work or tmp), timeout_s, PROBE_OUTPUT_LIMIT, extra_env=extra_env)
    if child.result is None:
        why = child.no_result if child.proc.ok else child.proc.stderr.strip()[-300:]
        return None, f"the device probe failed ({child.proc.brief()}): {why}"
    # grading.json keeps the description as the probe wrote it (Environment.device, read by many steps)
    device: dict[str, Any] = to_jsonable(child.result)
    return device, "" if child.result.ok else child.result.reason


def device_problem(data: Any) -> str:
    """Why ``data`` is not a usable description of a present GPU ("" when it is)."""
    if not isinstance(data, dict):
        return f"expected an object, found {type(data).__name__}"
    if data.get("ok") is not True:
        return '"ok" is not true (the probe found no usable GPU)'
    cc = data.get("cc")
    if not (isinstance(cc, list) and len(cc) == 2 and all(type(v) is int and 0 <= v < 100 for v in cc)):
        return f'"cc" must be [major, minor], found {cc!r}'
    for key in _COUNTS:
        if type(data.get(key)) is not int or data[key] < 0:
            return f'"{key}" must be a whole number, found {data.get(key)!r}'
    if not isinstance(data.get("name"), str):
        return '"name" must be a string'
    return ""


def read_device_file(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(the description in ``path``, "") or (None, what is wrong with the file)."""
    try:
        if path.is_symlink() or not path.is_file():
            return None, f"{path}: not a regular file"
        if path.stat().st_size > DEVICE_FILE_MAX_BYTES:
            return None, f"{path}: over {DEVICE_FILE_MAX_BYTES} bytes"
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        return None, f"{path}: {exc}"
    problem = device_problem(data)
    return (data, "") if not problem else (None, f"{path}: {problem}")


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


def write_device_file(path: Path, device: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(device, indent=1) + "\n")
    tmp.replace(path)
