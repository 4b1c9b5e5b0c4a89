"""The one protocol of the grader's child processes (this file runs inside them: stdlib only).

Every child is started as ``python -m grader.children MODE SPEC.json RESULT.json``: it reads
its task from SPEC.json and writes what it found to RESULT.json, replacing the file whole
(write, then rename) each time it has something to keep, so a crash or a time-out still leaves
the last complete result. stdout and stderr are for people only; nothing parses them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# Mode -> the module (grader.children.<mode>) whose ``run(spec, result_path) -> int`` does it.
MODES = ("probe", "stage", "check", "profile", "sanitize", "occupancy", "warm")
USAGE = "usage: python -m grader.children {" + ",".join(MODES) + "} SPEC.json RESULT.json"


def read_spec(path: str | os.PathLike[str]) -> dict[str, Any]:
    spec = json.loads(Path(path).read_text())
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: the spec is a JSON {type(spec).__name__}, not an object")
    return spec


def write_result(path: str | os.PathLike[str], data: Any) -> None:
    """Replace RESULT.json whole: a reader never sees half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, default=float))
    os.replace(tmp, path)


def launch_grid(n: int, tile: list[int] | tuple[int, ...], blocks: list[int] | None = None) -> tuple[int, int, int]:
    """The grid of a stage's launch at size n: N / BN blocks along x, N / BM along y (``tile`` is
    [BM, BN]). ``blocks``: launch only the first that many along x and y (racecheck's corner): those
    do exactly what they do in the full grid (the same tiles of C, the whole K loop)."""
    gx, gy = n // tile[1], n // tile[0]
    if blocks:
        gx, gy = min(gx, int(blocks[0])), min(gy, int(blocks[1]))
    return gx, gy, 1


# ---- gates: a child's turn on the GPU ---------------------------------------------------------------
# A child that times or profiles something first does its untimed work (start-up, loading, correctness
# runs) side by side with the grading's other children, then waits at a gate until the grader gives it
# the GPU alone (grader/sandbox/turns.py). Two files beside RESULT.json carry it: the child creates
# ``<result>.<gate>.wait`` when it arrives; the grader writes ``<result>.<gate>.go`` (a JSON object,
# replaced whole) when it may go on. ``{"stop": true}`` in it means: end now, the rest is not needed.
# A child done with the GPU after its last gate's turn says so with ``<result>.<gate>.done``
# (:func:`release_turn`) before it writes its files and exits, so the next turn need not wait for that.
GATE_POLL_S = 0.005
GATE_MAX_WAIT_S = 900.0  # the grader's own bound on a hold (grader.sandbox.process.MAX_HOLD_S)


class GateClosed(Exception):
    """The grader went away, or never opened the gate: end without doing the gated part."""


def gate_files(result: str | os.PathLike[str], gate: str) -> tuple[Path, Path]:
    """(the wait file, the go file) of ``gate`` for the child writing ``result``."""
    result = Path(result)
    return result.with_name(f"{result.name}.{gate}.wait"), result.with_name(f"{result.name}.{gate}.go")


def release_file(result: str | os.PathLike[str], gate: str) -> Path:
    """The file a child creates when its turn at ``gate`` no longer needs the GPU."""
    result = Path(result)
    return result.with_name(f"{result.name}.{gate}.done")


def release_turn(result: str | os.PathLike[str], gate: str) -> None:
    """Say this child's turn at ``gate`` (its last) is over: it launches nothing more and has freed its
    device memory; what is left (saving files, exiting) does not touch the GPU."""
    release_file(result, gate).write_text("")


def wait_at_gate(result: str | os.PathLike[str], gate: str) -> dict[str, Any]:
    """Say this child is at ``gate`` and block until the grader opens it; return what it handed over.

    Raises :class:`GateClosed` when the go file says stop, when the parent process is gone (the
    child was re-parented), or after :data:`GATE_MAX_WAIT_S`."""
    import time

    wait_file, go_file = gate_files(result, gate)
    parent = os.getppid()
    wait_file.write_text("")
    deadline = time.monotonic() + GATE_MAX_WAIT_S
    while not go_file.exists():
        if os.getppid() != parent or time.monotonic() > deadline:
            raise GateClosed(f"the gate {gate!r} was never opened")
        time.sleep(GATE_POLL_S)
    try:
        data = json.loads(go_file.read_text())
    except (OSError, ValueError) as exc:
        raise GateClosed(f"the gate {gate!r} could not be read: {exc}") from exc
    if not isinstance(data, dict) or data.get("stop"):
        raise GateClosed(f"the grader stopped this child at the gate {gate!r}")
    return data
