"""Did any child compile CuPy's kernels itself? ``python tests/cupy_cache_report.py OUT [CACHE_ROOT]``

OUT is a grading's output folder, graded with ``--keep-work``. Every child's CuPy cache
(``OUT/work/**/cupy-cache``) starts as a copy of the trusted warm cache (grader/gpu/warm.py); a
file it has beyond that copy is a kernel the child compiled itself, which the warm child should
have compiled. The warm cache's files are read from ``OUT/work/cupy-warm`` (a cache made for the
grading) or from the manifests under CACHE_ROOT (default: ``$GRADER_CUPY_CACHE``, else
``~/.cache/gemm-grader/cupy``). Graded with ``CUPY_CACHE_SAVE_CUDA_SOURCE=1``, CuPy keeps each
kernel's source beside it and the report names the kernels. Exit status 1 when a child compiled any.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

_KERNEL = re.compile(r"__global__\s+void\s+(\w+)")


def warm_files(out: Path, root: Path) -> set[str]:
    per_grading = out / "work" / "cupy-warm" / "cupy-cache"
    if per_grading.is_dir():
        return {p.name for p in per_grading.iterdir()}
    names: set[str] = set()
    for manifest in root.glob("*/manifest.json"):
        names |= set(json.loads(manifest.read_text()).get("files", {}))
    return names


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = Path(argv[0])
    default_root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gemm-grader" / "cupy"
    root = Path(argv[1]) if len(argv) > 1 else Path(os.environ.get("GRADER_CUPY_CACHE") or default_root)
    warm = warm_files(out, root)
    print(f"warm cache: {len(warm)} files")
    compiled = 0
    for cache in sorted((out / "work").rglob("cupy-cache")):
        if "cupy-warm" in cache.parts:
            continue
        own = sorted(p.name for p in cache.iterdir() if p.name not in warm and not p.name.endswith(".cu"))
        compiled += len(own)
        names = []
        for name in own:
            source = cache / (name + ".cu")
            found = _KERNEL.findall(source.read_text(errors="replace")) if source.is_file() else []
            names.append(found[0] if found else name)
        where = cache.parent.relative_to(out / "work")
        print(f"{str(where):32} {len(own)} compiled by the child" + (f": {', '.join(names)}" if names else ""))
    print(f"children compiled {compiled} CuPy kernel(s) beyond the warm cache")
    return 1 if compiled else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
