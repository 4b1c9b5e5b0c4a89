"""``python -m grader.children MODE SPEC.json RESULT.json``: the one entry point of every child.

See :mod:`grader.children.protocol`. Only the mode's own module is imported, so the probe
does not load NumPy and a broken CuPy costs only the children that need it.
"""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from grader.children.protocol import MODES, START_GATE, START_GATE_ENV, USAGE, GateClosed, read_spec, wait_at_gate

CUPY_MODES = ("stage", "check", "profile", "occupancy", "warm")  # imported before the start gate: no CUDA yet


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] not in MODES:
        print(USAGE, file=sys.stderr)
        return 2
    mode, spec_path, result_path = argv[1:]
    module = importlib.import_module(f"grader.children.{mode}")
    if os.environ.get(START_GATE_ENV) == "1":
        if mode in CUPY_MODES:
            try:
                import cupy  # noqa: F401  # importing it starts no CUDA; a broken one is the mode's to report
            except Exception:  # noqa: BLE001
                pass
        try:
            wait_at_gate(result_path, START_GATE)
        except GateClosed:
            return 0  # stopped before it began: nothing to report, and nobody reads a result
    return int(module.run(read_spec(spec_path, mode), Path(result_path)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
