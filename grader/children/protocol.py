"""The one protocol of the grader's child processes (this file runs inside them: no grader module
but the runtime files).

Every child is started as ``python -m grader.children MODE SPEC.json RESULT.json``: it reads
its task from SPEC.json and writes what it found to RESULT.json, replacing the file whole
(write, then rename) each time it has something to keep, so a crash or a time-out still leaves
the last complete result. stdout and stderr are for people only; nothing parses them.

Both files hold typed records (:class:`Mode`: each mode's spec and result record), written with
grader.records.to_jsonable and read back with grader.records.from_jsonable; the JSON keys are the
records' field names, which stored files and tools read.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from grader.evidence.protocol import (
    CheckResult,
    CheckSpec,
    LaunchResult,
    OccupancyResult,
    OccupancySpec,
    ProbeResult,
    ProbeSpec,
    ProfileSpec,
    SanitizeSpec,
    StageResult,
    StageSpec,
    WarmResult,
    WarmSpec,
)
from grader.records import from_jsonable, to_jsonable

MAX_SPEC_BYTES = 16 << 20  # a spec is a few KB: the grader writes it, but a child reads nothing unbounded


# ---- the modes --------------------------------------------------------------------------------------
S = TypeVar("S", covariant=True)
R = TypeVar("R", covariant=True)


@dataclass(frozen=True)
class Mode(Generic[S, R]):
    """A child mode: its name (grader.children.<name> runs it), its spec record and its result record."""

    name: str
    spec: type[S]
    result: type[R]


PROBE = Mode("probe", ProbeSpec, ProbeResult)
STAGE = Mode("stage", StageSpec, StageResult)
CHECK = Mode("check", CheckSpec, CheckResult)
PROFILE = Mode("profile", ProfileSpec, LaunchResult)
SANITIZE = Mode("sanitize", SanitizeSpec, LaunchResult)
OCCUPANCY = Mode("occupancy", OccupancySpec, OccupancyResult)
WARM = Mode("warm", WarmSpec, WarmResult)
BY_NAME: Mapping[str, Mode[object, object]] = {m.name: m for m in (PROBE, STAGE, CHECK, PROFILE, SANITIZE, OCCUPANCY, WARM)}
# Mode -> the module (grader.children.<mode>) whose ``run(spec, result_path) -> int`` does it.
MODES = tuple(BY_NAME)
USAGE = "usage: python -m grader.children {" + ",".join(MODES) + "} SPEC.json RESULT.json"


def read_json(path: str | os.PathLike[str], limit: int) -> object:
    """The JSON in ``path``, read only when it is a regular file of at most ``limit`` bytes (ValueError else)."""
    path = Path(path)
    if path.is_symlink() or not path.is_file():
        raise ValueError(f"{path.name} is not a regular file")
    if path.stat().st_size > limit:
        raise ValueError(f"{path.name} is over {limit} bytes")
    return json.loads(path.read_text())


def read_spec(path: str | os.PathLike[str], mode: str) -> object:
    """SPEC.json as the mode's spec record (the grader wrote it; a wrong one is the grader's bug: it raises)."""
    return from_jsonable(BY_NAME[mode].spec, read_json(path, MAX_SPEC_BYTES))


def write_result(path: str | os.PathLike[str], data: object) -> None:
    """Replace RESULT.json whole with the record ``data``: a reader never sees half a file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(to_jsonable(data), default=float))
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


def wait_at_gate(result: str | os.PathLike[str], gate: str) -> dict[str, object]:
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
