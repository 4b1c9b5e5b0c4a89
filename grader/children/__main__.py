"""``python -m grader.children MODE SPEC.json RESULT.json``: the one entry point of every child.

See :mod:`grader.children.protocol`. Only the mode's own module is imported, so the probe
does not load NumPy and a broken CuPy costs only the children that need it.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

from grader.children.protocol import MODES, USAGE, read_spec


def main(argv: list[str]) -> int:
    if len(argv) != 4 or argv[1] not in MODES:
        print(USAGE, file=sys.stderr)
        return 2
    mode, spec_path, result_path = argv[1:]
    module = importlib.import_module(f"grader.children.{mode}")
    return int(module.run(read_spec(spec_path, mode), Path(result_path)))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
