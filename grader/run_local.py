#!/usr/bin/env python3
"""Grade a submission on this machine: ``python grader/run_local.py SUBMISSION [--out DIR]``.

Thin wrapper over :mod:`grader.cli` so the script also works without installing
the package (it puts the repository root on ``sys.path``).
"""
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
