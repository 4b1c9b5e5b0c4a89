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

This module uses the standard library only, so ``python3 -m grader.build.toolchain``
works before any dependency is installed (``grader/bootstrap.sh`` relies on it;
keep ``grader/__init__.py`` free of third-party imports too).
"""
from __future__ import annotations

import dataclasses
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Mapping, Sequence

# The course's GPU is an H200 (CC 9.0); cubins are built for it when no device is visible.
DEFAULT_ARCH = "sm_90a"

# Where a CUDA toolkit usually lives when nothing else says so.
SYSTEM_CUDA_ROOTS = ("/usr/local/cuda",)
NSIGHT_COMPUTE_GLOB = "/opt/nvidia/nsight-compute/*/ncu"

VERSION_TIMEOUT_S = 30.0

# What the pip route needs, and which wheel provides it (checked on CPU-only Linux, see docs/toolchain.md).
# Paths are relative to an include directory (or to the toolkit root for nvvm).
_NVCC_NEEDS_HEADERS = (
    ("cuda_runtime.h", "nvidia-cuda-runtime"),
    ("crt/host_config.h", "nvidia-cuda-crt"),
    ("nv/target", "nvidia-cuda-cccl"),  # cuda_fp16.h includes <nv/target>; lives in include/cccl
)
_NVCC_NEEDS_NVVM = ("nvvm/bin/cicc", "nvidia-nvvm")


@dataclass
class Tool:
    """Where one tool is, or why it is not there.

    ``source`` is ``"system"`` (a toolkit install, PATH, or an explicit
    ``GRADER_*`` path) or ``"pip"`` (inside an NVIDIA wheel under
    ``site-packages/nvidia``). ``how`` says which rule found it. ``problems``
    lists what is wrong with a found tool (missing headers, no host compiler,
    no nvdisasm); ``ok`` is true only when the tool is found and has none.
    """

    name: str
    path: str | None
    version: str | None = None
    source: str | None = None
    how: str = ""
    reason: str = ""
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    searched: list[str] = field(default_factory=list)
    # Extra compiler flags / environment the caller must pass when running the tool.
    include_dirs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # nvcc only: the host compiler nvcc will call (it needs one even for -cubin).
    host_compiler: str | None = None
    host_compiler_version: str | None = None

    @property
    def found(self) -> bool:
        return self.path is not None

    @property
    def ok(self) -> bool:
        return self.path is not None and not self.problems

    def include_flags(self) -> list[str]:
        return [f"-I{d}" for d in self.include_dirs]

    def summary(self) -> str:
        """One line for logs and for the TA's setup report."""
        if self.path is None:
            return f"{self.name}: not found ({self.reason})"
        line = f"{self.name}: {self.path}"
        if self.version:
            line += f" (version {self.version}, {self.source})"
        else:
            line += f" ({self.source}; version unknown)"
        if self.host_compiler:
            line += f"; host compiler {self.host_compiler}"
            if self.host_compiler_version:
                line += f" {self.host_compiler_version}"
        if self.problems:
            line += "; PROBLEMS: " + "; ".join(self.problems)
        return line

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["ok"] = self.ok
        return d


# --------------------------------------------------------------------------- helpers


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def _is_exe(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def pip_nvidia_roots() -> list[str]:
    """The ``site-packages/nvidia`` folders the running interpreter can import from."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    roots = []
    for loc in spec.submodule_search_locations:
        loc = os.path.abspath(loc)
        if os.path.isdir(loc) and loc not in roots:
            roots.append(loc)
    return roots


def _pip_candidates(roots: Sequence[str], exe: str, legacy_pkg: str | None) -> list[str]:
    """``nvidia/cu13/bin/<exe>`` (13.x wheels; newest cuNN first), then an older per-package layout."""
    out: list[str] = []
    for root in roots:
        cu_dirs = sorted(glob.glob(os.path.join(root, "cu[0-9]*")), key=_cu_major, reverse=True)
        out += [os.path.join(d, "bin", exe) for d in cu_dirs]
        if legacy_pkg:
            out.append(os.path.join(root, legacy_pkg, "bin", exe))
    return out


def _cu_major(path: str) -> int:
    m = re.search(r"cu(\d+)$", path)
    return int(m.group(1)) if m else -1


def _under_pip_root(path: str, roots: Sequence[str]) -> bool:
    real = os.path.realpath(path)
    for root in roots:
        r = os.path.realpath(root)
        if real.startswith(r + os.sep):
            return True
    # A wheel tree that is not importable from this interpreter still looks like one.
    return f"{os.sep}site-packages{os.sep}nvidia{os.sep}" in real


def _run_version(cmd: list[str]) -> tuple[str | None, str]:
    """Run ``cmd`` and return (stdout+stderr, error text)."""
    try:
        p = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=VERSION_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None, f"`{' '.join(cmd)}` timed out after {VERSION_TIMEOUT_S:g} s"
    except OSError as e:
        return None, f"`{' '.join(cmd)}` could not run: {e}"
    if p.returncode != 0:
        tail = (p.stdout or "").strip().splitlines()[-1:] or [""]
        return p.stdout, f"`{' '.join(cmd)}` exited with {p.returncode}: {tail[0]}"
    return p.stdout, ""


def parse_cuda_tool_version(text: str | None) -> str | None:
    """``Cuda compilation tools, release 13.0, V13.0.88`` -> ``"13.0.88"`` (nvcc, cuobjdump, ptxas)."""
    if not text:
        return None
    m = re.search(r"\bV(\d+\.\d+\.\d+)\b", text)
    if m:
        return m.group(1)
    m = re.search(r"release (\d+\.\d+)", text)
    return m.group(1) if m else None


def parse_nsight_version(text: str | None) -> str | None:
    """``Version 2025.3.1.0 (build ...)`` -> ``"2025.3.1.0"`` (ncu, compute-sanitizer)."""
    if not text:
        return None
    m = re.search(r"Version\s+(\d+(?:\.\d+)+)", text)
    return m.group(1) if m else None


def _version_key(path: str) -> tuple:
    nums = re.findall(r"\d+", path)
    return tuple(int(n) for n in nums)


def _locate(
    name: str,
    env_var: str,
    candidates: list[tuple[str, str]],
    environ: Mapping[str, str],
    pip_roots: Sequence[str],
    parse_version,
    path_exe: str | None = None,
    path_position: int = 0,
) -> Tool:
    """Walk the candidates (``(path, how)``; a PATH lookup is inserted at ``path_position``).

    The first executable that answers ``--version`` with a parsable version wins.
    A candidate that exists but does not answer (a broken wrapper script, a
    missing shared library) is skipped, and reported only when nothing better is
    found. An explicit ``env_var`` is never skipped: it is used or reported.
    """
    searched: list[str] = []

    def probe(path: str, how: str) -> Tool:
        src = "pip" if _under_pip_root(path, pip_roots) else "system"
        tool = Tool(name, os.path.abspath(path), source=src, how=how, searched=list(searched))
        out, err = _run_version([path, "--version"])
        tool.version = parse_version(out)
        if tool.version is None:
            tool.problems.append(err or f"could not read a version from `{name} --version`")
        return tool

    override = environ.get(env_var)
    if override:
        searched.append(f"{env_var}={override}")
        if _is_exe(override):
            return probe(override, env_var)
        return Tool(name, None, reason=f"{env_var}={override} is not an executable file", searched=searched)
    cands = list(candidates)
    if path_exe:
        hit = shutil.which(path_exe, path=environ.get("PATH", ""))
        cands.insert(path_position, (hit or "", "PATH"))
    first_broken: Tool | None = None
    seen: set[str] = set()
    for cand, how in cands:
        searched.append("PATH" if how == "PATH" else cand)
        if not cand or not _is_exe(cand):
            continue
        real = os.path.realpath(cand)
        if real in seen:
            continue
        seen.add(real)
        tool = probe(cand, how)
        if tool.version is not None:
            if first_broken is not None:
                tool.notes.append(f"skipped {first_broken.path}: {first_broken.problems[0]}")
            return tool
        first_broken = first_broken or tool
    if first_broken is not None:
        first_broken.searched = searched
        return first_broken
    return Tool(name, None, reason=f"looked in {', '.join(searched)}", searched=searched)


def _cuda_home(environ: Mapping[str, str]) -> str | None:
    return environ.get("CUDA_HOME") or environ.get("CUDA_PATH") or None


# --------------------------------------------------------------------------- nvcc


def _host_compiler(environ: Mapping[str, str]) -> tuple[str | None, str | None, str | None]:
    """(path, version, problem) of the compiler nvcc will call.

    nvcc calls ``gcc`` from PATH (or ``NVCC_CCBIN``) even for ``-cubin``; without it
    nvcc stops with "Failed to preprocess host compiler properties". gcc also
    needs its C++ front end (``cc1plus``, from the g++ package) for ``.cu`` files.
    """
    ccbin = environ.get("NVCC_CCBIN") or "gcc"
    path = ccbin if os.sep in ccbin else shutil.which(ccbin, path=environ.get("PATH", ""))
    if not path or not _is_exe(path):
        return None, None, (
            f"no host compiler: nvcc needs `{ccbin}` on PATH even for -cubin "
            "(install gcc and g++, e.g. `apt-get install build-essential`)"
        )
    out, _ = _run_version([path, "-dumpfullversion", "-dumpversion"])
    version = out.strip().splitlines()[0] if out and out.strip() else None
    problem = None
    if os.path.basename(path).startswith("gcc") or os.path.basename(path) in ("cc", "c++", "g++"):
        cc1, _ = _run_version([path, "-print-prog-name=cc1plus"])
        cc1 = (cc1 or "").strip()
        if not (os.path.isabs(cc1) and os.path.exists(cc1)):
            problem = f"host compiler {path} has no C++ front end (cc1plus); install g++"
    return os.path.abspath(path), version, problem


def _toolkit_root(nvcc_path: str) -> str | None:
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
    out, _ = _run_version([nvcc_path, "--dryrun", "-cubin", "-x", "cu", "-o", os.devnull, os.devnull])
    m = re.search(r"^#\$ _HERE_=(.+)$", out or "", re.M)
    if m and os.path.isfile(os.path.join(m.group(1).strip(), "nvcc.profile")):
        return os.path.dirname(os.path.realpath(m.group(1).strip()))
    return None


def _include_dirs_of(root: str) -> list[str]:
    dirs = [os.path.join(root, "include")]
    dirs += sorted(glob.glob(os.path.join(root, "targets", "*", "include")))
    return [d for d in dirs if os.path.isdir(d)]


def _check_nvcc_tree(nvcc_path: str, pip_roots: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """Find the headers nvcc needs; return (extra include dirs, problems, notes).

    A toolkit (and the 13.x wheels, which all unpack into one ``nvidia/cu13`` tree)
    has them under its own ``include`` (``include/cccl`` is added by nvcc.profile),
    so no extra ``-I`` is needed. A split per-package wheel layout gets the sibling
    wheels' include folders as extra ``-I``.
    """
    root = _toolkit_root(nvcc_path)
    if root is None:
        return [], [], [f"could not find the toolkit folder (nvcc.profile) behind {nvcc_path}; header check skipped"]
    own = _include_dirs_of(root)
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


def _locate_cuda_tool(exe: str, env_var: str, legacy_pkg: str, environ: Mapping[str, str],
                      roots: Sequence[str], system_roots: Sequence[str]) -> Tool:
    """A CUDA toolkit binary: $env_var, $CUDA_HOME/bin, PATH, the system roots, then pip wheels."""
    cands: list[tuple[str, str]] = []
    home = _cuda_home(environ)
    if home:
        cands.append((os.path.join(home, "bin", exe), "CUDA_HOME"))
    cands += [(os.path.join(r, "bin", exe), r) for r in system_roots]
    cands += [(c, "pip") for c in _pip_candidates(roots, exe, legacy_pkg)]
    return _locate(exe, env_var, cands, environ, roots, parse_cuda_tool_version,
                   path_exe=exe, path_position=1 if home else 0)


def find_nvcc(
    environ: Mapping[str, str] | None = None,
    pip_roots: Sequence[str] | None = None,
    system_roots: Sequence[str] = SYSTEM_CUDA_ROOTS,
    check_host_compiler: bool = True,
) -> Tool:
    """Find nvcc, its version, the extra include dirs it needs and its host compiler."""
    environ = _env(environ)
    roots = pip_nvidia_roots() if pip_roots is None else list(pip_roots)
    tool = _locate_cuda_tool("nvcc", "GRADER_NVCC", "cuda_nvcc", environ, roots, system_roots)
    if tool.path is None:
        tool.reason += (
            "; install the CUDA toolkit or the pip wheels listed in docs/toolchain.md "
            "(grader/bootstrap.sh does that)"
        )
        return tool
    extra, problems, notes = _check_nvcc_tree(tool.path, roots)
    tool.include_dirs = extra
    tool.problems += problems
    tool.notes += notes
    if check_host_compiler:
        cc, ccver, problem = _host_compiler(environ)
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
    environ = _env(environ)
    roots = pip_nvidia_roots() if pip_roots is None else list(pip_roots)
    tool = _locate_cuda_tool("cuobjdump", "GRADER_CUOBJDUMP", "cuda_cuobjdump", environ, roots, system_roots)
    if tool.path is None:
        tool.reason += "; pip: install nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm"
        return tool
    here = os.path.join(os.path.dirname(os.path.realpath(tool.path)), "nvdisasm")
    nvd_dir = environ.get("NVDISASM_PATH")
    nvdisasm = None
    if _is_exe(here):
        nvdisasm = here
    elif nvd_dir and (_is_exe(os.path.join(nvd_dir, "nvdisasm")) or _is_exe(nvd_dir)):
        nvdisasm = nvd_dir
    else:
        nvdisasm = shutil.which("nvdisasm", path=environ.get("PATH", ""))
    if not nvdisasm:
        tool.problems.append(
            "nvdisasm not found beside cuobjdump or on PATH: `cuobjdump --dump-sass` needs it "
            "(pip: install nvidia-cuda-nvdisasm)"
        )
    elif nvdisasm != here:
        tool.env["PATH"] = os.path.dirname(nvdisasm) + os.pathsep + environ.get("PATH", "")
    return tool


# --------------------------------------------------------------------------- ncu, compute-sanitizer


def find_ncu(
    environ: Mapping[str, str] | None = None,
    system_roots: Sequence[str] = SYSTEM_CUDA_ROOTS,
    nsight_glob: str = NSIGHT_COMPUTE_GLOB,
) -> Tool:
    """Find Nsight Compute's CLI (``ncu``)."""
    environ = _env(environ)
    cands: list[tuple[str, str]] = []
    cands += [(p, "nsight-compute") for p in sorted(glob.glob(nsight_glob), key=_version_key, reverse=True)]
    home = _cuda_home(environ)
    if home:
        cands.append((os.path.join(home, "bin", "ncu"), "CUDA_HOME"))
    for r in system_roots:
        cands.append((os.path.join(r, "bin", "ncu"), r))
        cands += [
            (p, r)
            for p in sorted(glob.glob(os.path.join(r, "nsight-compute-*", "ncu")), key=_version_key, reverse=True)
        ]
    tool = _locate("ncu", "GRADER_NCU", cands, environ, [], parse_nsight_version, path_exe="ncu", path_position=0)
    if tool.path is None:
        tool.reason += "; profiling items are not evaluated without it"
        return tool
    return tool


def find_compute_sanitizer(
    environ: Mapping[str, str] | None = None,
    system_roots: Sequence[str] = SYSTEM_CUDA_ROOTS,
) -> Tool:
    """Find compute-sanitizer (racecheck / memcheck)."""
    environ = _env(environ)
    cands: list[tuple[str, str]] = []
    home = _cuda_home(environ)
    if home:
        cands.append((os.path.join(home, "bin", "compute-sanitizer"), "CUDA_HOME"))
        cands.append((os.path.join(home, "compute-sanitizer", "compute-sanitizer"), "CUDA_HOME"))
    for r in system_roots:
        cands.append((os.path.join(r, "bin", "compute-sanitizer"), r))
        cands.append((os.path.join(r, "compute-sanitizer", "compute-sanitizer"), r))
    tool = _locate(
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


# --------------------------------------------------------------------------- CLI

_FINDERS = {
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
