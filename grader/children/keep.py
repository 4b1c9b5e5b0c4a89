"""``keep``: hold one CUDA context open on the visible GPU, idle, until stdin closes.

The grader's own child (grader/gpu/keeper.py starts it; it runs no student code). It loads only
the driver (grader/children/driver.py: no CuPy, no NumPy), makes the GPU's primary context, writes
``{"ok": true}`` and prints ``ready``; then it reads stdin until the pipe closes, which happens when
the grader closes it or ends. When the driver fails, RESULT.json says why and the child exits 1.
"""
from __future__ import annotations

import sys
from pathlib import Path

from grader.children.driver import Driver, DriverError
from grader.children.protocol import KeepResult, KeepSpec, write_result

READY = "ready"


def run(spec: KeepSpec, result: Path) -> int:
    del spec  # nothing to be told: the GPU is the one CUDA_VISIBLE_DEVICES shows
    try:
        Driver().start(0)
    except DriverError as exc:
        write_result(result, KeepResult(ok=False, reason=str(exc)))
        return 1
    write_result(result, KeepResult(ok=True))
    print(READY, flush=True)
    while sys.stdin.buffer.read(4096):  # nothing is ever sent: b"" once the pipe is closed
        pass
    return 0
