"""Build the student kit: ``python -m grader kit build [--out student-kit.zip]``.

The kit is what a student needs and nothing of the course's answers: the handout (``assignment/``),
``starter/``, the grader package with ``rubric.yaml``, ``pyproject.toml`` and ``setup.py`` (so
``pip install .`` and ``python -m grader check`` work in it), and a short README at its root
(``README-students.md`` beside this module). Never ``solutions/`` or ``tests/``: the Gradescope
build's own guard (grader/deploy/gradescope/build.py: ``refuse_leaks``) refuses a member under them
and any member whose bytes equal a file of ``solutions/``. The zip is reproducible (sorted
members, fixed timestamps, the same writer as the autograder zip); its members sit in one top-level
folder, ``FOLDER``, so that unzipping it makes one folder and spills nothing beside it.
"""
from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

from grader import REPO_ROOT
from grader.deploy.gradescope.build import BuildError, package_files, refuse_leaks, write_zip

INCLUDE = ("assignment", "starter", "grader", "rubric.yaml", "pyproject.toml", "setup.py")
README = Path(__file__).resolve().parent / "README-students.md"
FOLDER = "gemm-ladder-kit"


def build_kit(out: Path, root: Path = REPO_ROOT) -> list[str]:
    """Write the kit to ``out``; return its member names (inside ``FOLDER``). BuildError when something would leak."""
    members = {name: src.read_bytes() for name, src in package_files(root, INCLUDE).items()}
    members["README.md"] = README.read_bytes()
    refuse_leaks(members, root)
    write_zip(Path(out), members, FOLDER)
    return sorted(members)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="kit_cmd", required=True)
    b = sub.add_parser("build", help="write the student kit zip (never solutions/ or tests/)")
    b.add_argument("--out", default="student-kit.zip", help="zip to write (default: %(default)s)")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    try:
        names = build_kit(Path(args.out))
    except (BuildError, OSError, zipfile.BadZipFile) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    size = Path(args.out).stat().st_size
    print(f"wrote {args.out}: {len(names)} files, {size / 1024:.0f} KiB (no solutions/, no tests/)")
    return 0
