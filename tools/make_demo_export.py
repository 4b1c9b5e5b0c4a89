#!/usr/bin/env python3
"""Write a fake Gradescope "Download Submissions" export, for batch tests and speed-up runs.

    python tools/make_demo_export.py DEST [--n 24] [--kinds solutions,starter,...] [--zip]

DEST/submission_metadata.yml in Gradescope's format (Ruby-symbol keys: ``:submitters:`` with
``:name:``, ``:sid:``, ``:email:``, and ``:created_at:``) and one DEST/submission_<id>/ per
submission. The submissions cycle through KINDS:

  solutions      solutions/gemm + solutions/occupancy (full marks on a GPU)
  starter        starter/ (compiles; scores zero, statically and on a GPU)
  compile_error  tests/submissions/compile_error + starter/occupancy
  wrong_name     tests/submissions/wrong_name + starter/occupancy
  nested         solutions/ wrapped in one extra folder (as many zips are)

Every tenth submission (ids ending in 5) is a group of two. Names, SIDs and e-mails are made up.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("solutions", "starter", "compile_error", "wrong_name", "nested")
FIRST_ID = 310000


def _fill(dest: Path, kind: str) -> None:
    sol, starter, subs = ROOT / "solutions", ROOT / "starter", ROOT / "tests" / "submissions"
    if kind == "solutions":
        shutil.copytree(sol, dest)
    elif kind == "starter":
        shutil.copytree(starter, dest)
    elif kind in ("compile_error", "wrong_name"):
        shutil.copytree(subs / kind, dest)
        shutil.copytree(starter / "occupancy", dest / "occupancy")
    elif kind == "nested":
        shutil.copytree(sol, dest / "my-gemm-ladder")
    else:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")


def _person(i: int, k: int = 0) -> str:
    n = 2 * i + k
    return (f"  - :name: Student {n:03d}\n"
            f"    :sid: '{900000 + n}'\n"
            f"    :email: student{n:03d}@example.edu\n")


def make_export(dest: Path, n: int = 24, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """Write the export into ``dest`` (created); return the submission folder names."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    folders, meta = [], []
    for i in range(n):
        folder = f"submission_{FIRST_ID + i}"
        _fill(dest / folder, kinds[i % len(kinds)])
        people = _person(i) + (_person(i, 1) if i % 10 == 5 else "")
        meta.append(f"{folder}:\n  :submitters:\n{people}"
                    f"  :created_at: 2026-11-{1 + i % 28:02d} 10:{i % 60:02d}:00.123456789 -08:00\n"
                    f"  :score: \n")
        folders.append(folder)
    (dest / "submission_metadata.yml").write_text("".join(meta), encoding="utf-8")
    return folders


def zip_export(src: Path, zip_path: Path, top: str = "assignment_0_export") -> None:
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(Path(src).rglob("*")):
            if path.is_file():
                zf.write(path, f"{top}/{path.relative_to(src).as_posix()}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dest")
    p.add_argument("--n", type=int, default=24, help="number of submissions (default: %(default)s)")
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds to cycle through")
    p.add_argument("--zip", action="store_true", help="also write DEST.zip as Gradescope delivers it")
    args = p.parse_args(argv)
    folders = make_export(Path(args.dest), args.n, tuple(k.strip() for k in args.kinds.split(",") if k.strip()))
    print(f"{len(folders)} submissions in {args.dest}")
    if args.zip:
        zip_export(Path(args.dest), Path(args.dest).with_suffix(".zip"))
        print(f"zipped: {Path(args.dest).with_suffix('.zip')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
