#!/usr/bin/env python3
"""Where a grading process's time goes outside the grading itself (a GPU-machine experiment for #32).

    T0=$(date +%s.%N) python3 docs/measurements/scripts/process_marks.py grade solutions --out DIR --quiet

Runs ``python -m grader`` with the same arguments and prints, on stderr, the seconds since ``T0`` (the
shell's clock before it started Python) at: Python up, grader.cli and grader.pipeline imported, the
grading's start and end (pipeline.grade), the outputs written, the work folder's removal started and
ended, and the interpreter's exit handlers, on one line: ``MARKS python 0.043, ..., exit handlers 13.259``.
"""
from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
T0 = float(os.environ["T0"])
marks = [("python", time.time() - T0)]

import grader.cli as cli  # noqa: E402

marks.append(("grader.cli imported", time.time() - T0))
import grader.outputs.write as write  # noqa: E402
import grader.pipeline as pipeline  # noqa: E402

marks.append(("grader.pipeline imported", time.time() - T0))


def _marked(name: str, fn):
    def wrapper(*args, **kwargs):
        marks.append((f"{name} starts", time.time() - T0))
        try:
            return fn(*args, **kwargs)
        finally:
            marks.append((f"{name} ends", time.time() - T0))
    return wrapper


pipeline.grade = _marked("grading", pipeline.grade)
write.write_outputs = _marked("outputs", write.write_outputs)
cli.remove_work = _marked("remove_work", cli.remove_work)
atexit.register(lambda: print("MARKS " + ", ".join(f"{n} {t:.3f}" for n, t in marks + [("exit handlers", time.time() - T0)]),
                              file=sys.stderr))
sys.exit(cli.main(sys.argv[1:]))
