"""What nvcc needs around it: its host compiler, its toolkit folder and the headers there.

Used by :func:`grader.compile.toolchain.find_nvcc` (to report a broken install) and by
:mod:`grader.compile.includes` (which folders a student's ``#include`` may reach). Standard
library only, like the rest of the tool search.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
from collections.abc import Mapping, Sequence

from grader.compile.tool_search import is_exe, run_version

# What the pip route needs, and which wheel provides it (checked on CPU-only Linux, see docs/toolchain.md).
# Paths are relative to an include directory (or to the toolkit root for nvvm).
_NVCC_NEEDS_HEADERS = (
    ("cuda_runtime.h", "nvidia-cuda-runtime"),
    ("crt/host_config.h", "nvidia-cuda-crt"),
    ("nv/target", "nvidia-cuda-cccl"),  # cuda_fp16.h includes <nv/target>; lives in include/cccl
)
_NVCC_NEEDS_NVVM = ("nvvm/bin/cicc", "nvidia-nvvm")


def host_compiler(environ: Mapping[str, str]) -> tuple[str | None, str | None, str | None]:
    """(path, version, problem) of the compiler nvcc will call.

    nvcc calls ``gcc`` from PATH (or ``NVCC_CCBIN``) even for ``-cubin``; without it
    nvcc stops with "Failed to preprocess host compiler properties". gcc also
    needs its C++ front end (``cc1plus``, from the g++ package) for ``.cu`` files.
    """
    ccbin = environ.get("NVCC_CCBIN") or "gcc"
    path = ccbin if os.sep in ccbin else shutil.which(ccbin, path=environ.get("PATH", ""))
    if not path or not is_exe(path):
        return None, None, (
            f"no host compiler: nvcc needs `{ccbin}` on PATH even for -cubin "
            "(install gcc and g++, e.g. `apt-get install build-essential`)"
        )
    out, _ = run_version([path, "-dumpfullversion", "-dumpversion"])
    version = out.strip().splitlines()[0] if out and out.strip() else None
    problem = None
    if os.path.basename(path).startswith("gcc") or os.path.basename(path) in ("cc", "c++", "g++"):
        cc1, _ = run_version([path, "-print-prog-name=cc1plus"])
        cc1 = (cc1 or "").strip()
        if not (os.path.isabs(cc1) and os.path.exists(cc1)):
            problem = f"host compiler {path} has no C++ front end (cc1plus); install g++"
    return os.path.abspath(path), version, problem


def toolkit_root(nvcc_path: str) -> str | None:
    """The folder above the real nvcc's ``bin`` (where nvcc.profile's TOP points).

    ``nvcc`` may be a symlink or a small wrapper script (``exec /usr/local/cuda-13.0/bin/nvcc "$@"``);
    both are followed. Returns None when no ``nvcc.profile`` can be found.
    """
    real = os.path.realpath(nvcc_path)
    if os.path.isfile(os.path.join(os.path.dirname(real), "nvcc.profile")):
        return os.path.dirname(os.path.dirname(real))
    try:
        if os.path.getsize(real) < 64 * 1024:
            with open(real, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            if text.startswith("#!"):
                for cand in re.findall(r"(/[^\s'\"$;&|]*/nvcc)\b", text):
                    cand = os.path.realpath(cand)
                    if cand != real and os.path.isfile(os.path.join(os.path.dirname(cand), "nvcc.profile")):
                        return os.path.dirname(os.path.dirname(cand))
    except OSError:
        pass
    out, _ = run_version([nvcc_path, "--dryrun", "-cubin", "-x", "cu", "-o", os.devnull, os.devnull])
    m = re.search(r"^#\$ _HERE_=(.+)$", out or "", re.M)
    if m and os.path.isfile(os.path.join(m.group(1).strip(), "nvcc.profile")):
        return os.path.dirname(os.path.realpath(m.group(1).strip()))
    return None


def include_dirs_of(root: str) -> list[str]:
    dirs = [os.path.join(root, "include")]
    dirs += sorted(glob.glob(os.path.join(root, "targets", "*", "include")))
    return [d for d in dirs if os.path.isdir(d)]


def check_nvcc_tree(nvcc_path: str, pip_roots: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """Find the headers nvcc needs; return (extra include dirs, problems, notes).

    A toolkit (and the 13.x wheels, which all unpack into one ``nvidia/cu13`` tree)
    has them under its own ``include`` (``include/cccl`` is added by nvcc.profile),
    so no extra ``-I`` is needed. A split per-package wheel layout gets the sibling
    wheels' include folders as extra ``-I``.
    """
    root = toolkit_root(nvcc_path)
    if root is None:
        return [], [], [f"could not find the toolkit folder (nvcc.profile) behind {nvcc_path}; header check skipped"]
    own = include_dirs_of(root)
    own_search = own + [os.path.join(d, "cccl") for d in own]
    siblings: list[str] = []
    parent = os.path.dirname(root)
    # Only the older one-wheel-per-component layout (nvidia/cuda_nvcc/bin/nvcc) borrows sibling
    # wheels' headers; a merged cuNN tree must be complete, or versions would mix.
    legacy = not re.fullmatch(r"cu\d+", os.path.basename(root))
    if legacy and (os.path.basename(parent) == "nvidia" or parent in [os.path.realpath(r) for r in pip_roots]):
        siblings = sorted(d for d in glob.glob(os.path.join(parent, "*", "include")) if os.path.isdir(d))
        siblings = [d for d in siblings if d not in own]
    extra: list[str] = []
    problems: list[str] = []
    for rel, wheel in _NVCC_NEEDS_HEADERS:
        if any(os.path.exists(os.path.join(d, rel)) for d in own_search):
            continue
        hit = next((d for d in siblings if os.path.exists(os.path.join(d, rel))), None)
        if hit is None:
            hit = next((os.path.join(d, "cccl") for d in siblings if os.path.exists(os.path.join(d, "cccl", rel))), None)
        if hit:
            if hit not in extra:
                extra.append(hit)
        else:
            problems.append(f"missing header <{rel}> next to nvcc (pip: install {wheel})")
    rel, wheel = _NVCC_NEEDS_NVVM
    if not os.path.exists(os.path.join(root, rel)):
        problems.append(f"missing {rel} next to nvcc (pip: install {wheel})")
    return extra, problems, [f"toolkit folder {root}"]

