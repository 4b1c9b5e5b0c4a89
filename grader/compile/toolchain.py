"""Find the CUDA tools the grader drives: nvcc, cuobjdump, ncu, compute-sanitizer.

Every ``find_*`` function returns a :class:`Tool` record and never raises for
"not found": the record then has ``path=None`` and a ``reason``. The only
subprocesses run here ask a tool for its version (and ask gcc where cc1plus is).

Search order (the first hit wins; an explicit ``GRADER_*`` variable that points
at nothing is reported as such, not silently skipped):

* nvcc: ``GRADER_NVCC``, ``$CUDA_HOME/bin``, ``PATH``, ``/usr/local/cuda/bin``,
  then NVIDIA's pip wheels (``nvidia-cuda-nvcc`` 13.x installs
  ``site-packages/nvidia/cu13/bin/nvcc``).
* cuobjdump: ``GRADER_CUOBJDUMP``, ``$CUDA_HOME/bin``, ``PATH``,
  ``/usr/local/cuda/bin``, pip (``nvidia-cuda-cuobjdump``; ``--dump-sass`` also
  needs ``nvdisasm`` from ``nvidia-cuda-nvdisasm`` next to it).
* ncu: ``GRADER_NCU``, ``PATH``, ``/opt/nvidia/nsight-compute/*/ncu`` (newest),
  ``$CUDA_HOME/bin``, ``/usr/local/cuda/bin``, ``/usr/local/cuda/nsight-compute-*``.
* compute-sanitizer: ``GRADER_COMPUTE_SANITIZER``, ``$CUDA_HOME/bin``,
  ``$CUDA_HOME/compute-sanitizer``, ``PATH``, ``/usr/local/cuda/bin``,
  ``/usr/local/cuda/compute-sanitizer``.

This module uses the standard library only, so ``python3 -m grader.compile.toolchain``
works before any dependency is installed (``grader/bootstrap.sh`` relies on it;
keep ``grader/__init__.py`` free of third-party imports too).
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence

if __package__ in (None, ""):  # run as a script (python grader/compile/toolchain.py): make `grader` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from grader.compile.nvcc_tree import check_nvcc_tree, host_compiler  # noqa: E402
from grader.compile.tool_search import (  # noqa: E402,F401  (the parsers are this module's API)
    cuda_home,
    env_or_os,
    is_exe,
    locate,
    locate_cuda_tool,
    parse_cuda_tool_version,
    parse_nsight_version,
    pip_nvidia_roots,
    version_key,
)
from grader.evidence.tools import Tool  # noqa: E402

# The course's GPU is an H200 (CC 9.0); cubins are built for it when no device is visible.
DEFAULT_ARCH = "sm_90a"

# Where a CUDA toolkit usually lives when nothing else says so.
SYSTEM_CUDA_ROOTS = ("/usr/local/cuda",)
NSIGHT_COMPUTE_GLOB = "/opt/nvidia/nsight-compute/*/ncu"


# --------------------------------------------------------------------------- nvcc


def find_nvcc(
    environ: Mapping[str, str] | None = None,
    pip_roots: Sequence[str] | None = None,
    system_roots: Sequence[str] = SYSTEM_CUDA_ROOTS,
    check_host_compiler: bool = True,
) -> Tool:
    """Find nvcc, its version, the extra include dirs it needs and its host compiler."""
    environ = env_or_os(environ)
    roots = pip_nvidia_roots() if pip_roots is None else list(pip_roots)
    tool = locate_cuda_tool("nvcc", "GRADER_NVCC", "cuda_nvcc", environ, roots, system_roots)
    if tool.path is None:
        tool.reason += (
            "; install the CUDA toolkit or the pip wheels listed in docs/toolchain.md "
            "(grader/bootstrap.sh does that)"
        )
        return tool
    extra, problems, notes = check_nvcc_tree(tool.path, roots)
    tool.include_dirs = extra
    tool.problems += problems
    tool.notes += notes
    if check_host_compiler:
        cc, ccver, problem = host_compiler(environ)
        tool.host_compiler, tool.host_compiler_version = cc, ccver
        if problem:
            tool.problems.append(problem)
    return tool


# --------------------------------------------------------------------------- cuobjdump


def find_cuobjdump(
    environ: Mapping[str, str] | None = None,
    pip_roots: Sequence[str] | None = None,
    system_roots: Sequence[str] = SYSTEM_CUDA_ROOTS,
) -> Tool:
    """Find cuobjdump; ``--dump-sass`` also needs nvdisasm (beside it, on PATH or NVDISASM_PATH)."""
    environ = env_or_os(environ)
    roots = pip_nvidia_roots() if pip_roots is None else list(pip_roots)
    tool = locate_cuda_tool("cuobjdump", "GRADER_CUOBJDUMP", "cuda_cuobjdump", environ, roots, system_roots)
    if tool.path is None:
        tool.reason += "; pip: install nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm"
        return tool
    here = os.path.join(os.path.dirname(os.path.realpath(tool.path)), "nvdisasm")
    nvd_dir = environ.get("NVDISASM_PATH")
    nvdisasm = None
    if is_exe(here):
        nvdisasm = here
    elif nvd_dir and (is_exe(os.path.join(nvd_dir, "nvdisasm")) or is_exe(nvd_dir)):
        nvdisasm = nvd_dir
    else:
        nvdisasm = shutil.which("nvdisasm", path=environ.get("PATH", ""))
    if not nvdisasm:
        tool.problems.append(
            "nvdisasm not found beside cuobjdump or on PATH: `cuobjdump --dump-sass` needs it "
            "(pip: install nvidia-cuda-nvdisasm)"
        )
    elif nvdisasm != here:
        tool.env = {**tool.env, "PATH": os.path.dirname(nvdisasm) + os.pathsep + environ.get("PATH", "")}
    return tool


# --------------------------------------------------------------------------- ncu, compute-sanitizer


def find_ncu(
    environ: Mapping[str, str] | None = None,
    system_roots: Sequence[str] = SYSTEM_CUDA_ROOTS,
    nsight_glob: str = NSIGHT_COMPUTE_GLOB,
) -> Tool:
    """Find Nsight Compute's CLI (``ncu``)."""
    environ = env_or_os(environ)
    cands: list[tuple[str, str]] = []
    cands += [(p, "nsight-compute") for p in sorted(glob.glob(nsight_glob), key=version_key, reverse=True)]
    home = cuda_home(environ)
    if home:
        cands.append((os.path.join(home, "bin", "ncu"), "CUDA_HOME"))
    for r in system_roots:
        cands.append((os.path.join(r, "bin", "ncu"), r))
        cands += [
            (p, r)
            for p in sorted(glob.glob(os.path.join(r, "nsight-compute-*", "ncu")), key=version_key, reverse=True)
        ]
    tool = locate("ncu", "GRADER_NCU", cands, environ, [], parse_nsight_version, path_exe="ncu", path_position=0)
    if tool.path is None:
        tool.reason += "; profiling items are not evaluated without it"
        return tool
    return tool


def find_compute_sanitizer(
    environ: Mapping[str, str] | None = None,
    system_roots: Sequence[str] = SYSTEM_CUDA_ROOTS,
) -> Tool:
    """Find compute-sanitizer (racecheck / memcheck)."""
    environ = env_or_os(environ)
    cands: list[tuple[str, str]] = []
    home = cuda_home(environ)
    if home:
        cands.append((os.path.join(home, "bin", "compute-sanitizer"), "CUDA_HOME"))
        cands.append((os.path.join(home, "compute-sanitizer", "compute-sanitizer"), "CUDA_HOME"))
    for r in system_roots:
        cands.append((os.path.join(r, "bin", "compute-sanitizer"), r))
        cands.append((os.path.join(r, "compute-sanitizer", "compute-sanitizer"), r))
    tool = locate(
        "compute-sanitizer",
        "GRADER_COMPUTE_SANITIZER",
        cands,
        environ,
        [],
        parse_nsight_version,
        path_exe="compute-sanitizer",
        path_position=2 if home else 0,
    )
    if tool.path is None:
        tool.reason += "; sanitizer items are not evaluated without it"
        return tool
    return tool


# --------------------------------------------------------------------------- arch flags

_ARCH_RE = re.compile(r"^sm_(\d+)([af]?)$")


def nvcc_arch_flags(cc: tuple[int, int] | None, configured: str | None = None) -> list[str]:
    """nvcc flags that pick the target GPU.

    With a device, its compute capability decides: ``(9, 0)`` -> ``sm_90a`` (the
    arch-specific variant, so wgmma/setmaxnreg code compiles; plain wmma works on
    either), anything else -> ``sm_XY``. Without a device, ``configured`` (for
    example ``"sm_90a"`` from the rubric) decides, else :data:`DEFAULT_ARCH`.
    A malformed ``configured`` raises ``ValueError`` (it is the grader's config,
    not a student's mistake).
    """
    if cc is not None:
        major, minor = int(cc[0]), int(cc[1])
        if major < 1 or not 0 <= minor <= 9:
            raise ValueError(f"compute capability {cc!r} is not a (major, minor) pair")
        arch = f"sm_{major}{minor}"
        if (major, minor) == (9, 0):
            arch += "a"
        return [f"-arch={arch}"]
    arch = (configured or DEFAULT_ARCH).strip()
    if not _ARCH_RE.match(arch):
        raise ValueError(f"arch {configured!r} is not of the form sm_XY, sm_XYa or sm_XYf (e.g. sm_90a)")
    return [f"-arch={arch}"]


ARCH_FAMILIES = {"sm_90a": "Hopper", "sm_90": "Hopper", "sm_89": "Ada", "sm_80": "Ampere", "sm_86": "Ampere",
                 "sm_75": "Turing"}


def target_arch(flags: list[str]) -> str:
    """The ``sm_...`` that :func:`nvcc_arch_flags`' flags compile for ("" when they name none)."""
    for flag in flags:
        if flag.startswith("-arch=sm_"):
            return flag.split("=", 1)[1]
    return ""


def unsupported_reason(required: str, flags: list[str]) -> str:
    """Why a stage that needs ``required`` (e.g. ``sm_90a``) cannot be graded with ``flags``; "" when it can."""
    target = target_arch(flags)
    if not required or target == required:
        return ""
    family = ARCH_FAMILIES.get(required)
    needs = f"{required}, a {family} GPU" if family else required
    return (f"not evaluated on this GPU (needs {needs}): this machine compiles for {target or 'another target'}, "
            "so the stage scores 0 here; it is graded on such a GPU")


_FEATURE_RE = re.compile(r"Feature '([^']+)' requires \.target sm_(\d+)[af]? or higher")


def newer_arch_needed(output: str, flags: list[str]) -> str:
    """Why a compile for ``flags`` failed only because the card is older than the code (ptxas: "Feature
    'cp.async' requires .target sm_80 or higher" on a student's T4, sm_75), in the words of
    :func:`unsupported_reason`; "" when any error is of another kind (then it is the student's to fix)."""
    m = _ARCH_RE.match(target_arch(flags))
    errors = [line for line in output.splitlines() if re.search(r"\berror\b", line)]
    found = [_FEATURE_RE.search(line) for line in errors]
    if m is None or not errors or any(f is None for f in found):
        return ""
    need = max(int(f.group(2)) for f in found if f is not None)
    if need <= int(m.group(1)):
        return ""
    features = ", ".join(dict.fromkeys(f.group(1) for f in found if f is not None))
    return (f"not evaluated on this GPU (needs sm_{need} or newer for {features}): this machine compiles for "
            f"{target_arch(flags)}, so the stage scores 0 here; it is graded on the course's GPU")


# --------------------------------------------------------------------------- CLI

_FINDERS: dict[str, Callable[[], Tool]] = {
    "nvcc": find_nvcc,
    "cuobjdump": find_cuobjdump,
    "ncu": find_ncu,
    "compute-sanitizer": find_compute_sanitizer,
}


def find_all() -> dict[str, Tool]:
    return {name: f() for name, f in _FINDERS.items()}


# Problems that installing a wheel fixes carry this marker (see the messages above).
_PIP_FIXABLE = "(pip: install"


def pip_extras_needed(nvcc: Tool | None = None, cuobjdump: Tool | None = None) -> list[str]:
    """The pyproject extras (``nvcc``, ``sass``) whose NVIDIA wheels would supply a missing tool.

    A missing host compiler is not something a wheel fixes, so it does not ask for ``nvcc``.
    """
    nvcc = find_nvcc() if nvcc is None else nvcc
    cuobjdump = find_cuobjdump() if cuobjdump is None else cuobjdump
    extras = []
    for extra, tool in (("nvcc", nvcc), ("sass", cuobjdump)):
        if tool.path is None or tool.version is None or any(_PIP_FIXABLE in p for p in tool.problems):
            extras.append(extra)
    return extras


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Report the CUDA tools the grader can use.")
    ap.add_argument("--json", action="store_true", help="print the records as JSON")
    ap.add_argument(
        "--need",
        default="",
        help="comma-separated tools that must be usable (exit 1 otherwise), e.g. nvcc,cuobjdump",
    )
    ap.add_argument("--quiet", action="store_true", help="print nothing; only the exit code")
    ap.add_argument(
        "--pip-extras",
        action="store_true",
        help="print the pyproject extras (nvcc, sass) whose wheels would supply missing tools, space-separated",
    )
    args = ap.parse_args(argv)
    if args.pip_extras:
        print(" ".join(pip_extras_needed()))
        return 0
    need = [n.strip() for n in args.need.split(",") if n.strip()]
    unknown = [n for n in need if n not in _FINDERS]
    if unknown:
        ap.error(f"unknown tool(s): {', '.join(unknown)}")
    names = need or list(_FINDERS)
    tools = {n: _FINDERS[n]() for n in names}
    if not args.quiet:
        if args.json:
            print(json.dumps({n: t.to_json() for n, t in tools.items()}, indent=2))
        else:
            for t in tools.values():
                print(t.summary())
    return 0 if all(tools[n].ok for n in need) else 1


if __name__ == "__main__":
    sys.exit(main())
