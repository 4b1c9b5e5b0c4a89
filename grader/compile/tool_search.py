"""Where a CUDA tool is and which version it is: the search shared by every ``find_*`` in
:mod:`grader.compile.toolchain`.

A candidate is probed with ``--version``; the first that answers wins. Standard library only
(``python3 -S -m grader.compile.toolchain`` runs before anything is installed).
"""
from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from grader.evidence.tools import Tool

VERSION_TIMEOUT_S = 30.0


def env_or_os(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def is_exe(path: str) -> bool:
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


def pip_candidates(roots: Sequence[str], exe: str, legacy_pkg: str | None) -> list[str]:
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


def run_version(cmd: list[str]) -> tuple[str | None, str]:
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


def version_key(path: str) -> tuple:
    nums = re.findall(r"\d+", path)
    return tuple(int(n) for n in nums)


def locate(
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
        out, err = run_version([path, "--version"])
        tool.version = parse_version(out)
        if tool.version is None:
            tool.problems.append(err or f"could not read a version from `{name} --version`")
        return tool

    override = environ.get(env_var)
    if override:
        searched.append(f"{env_var}={override}")
        if is_exe(override):
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
        if not cand or not is_exe(cand):
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


def cuda_home(environ: Mapping[str, str]) -> str | None:
    return environ.get("CUDA_HOME") or environ.get("CUDA_PATH") or None


def locate_cuda_tool(exe: str, env_var: str, legacy_pkg: str, environ: Mapping[str, str],
                      roots: Sequence[str], system_roots: Sequence[str]) -> Tool:
    """A CUDA toolkit binary: $env_var, $CUDA_HOME/bin, PATH, the system roots, then pip wheels."""
    cands: list[tuple[str, str]] = []
    home = cuda_home(environ)
    if home:
        cands.append((os.path.join(home, "bin", exe), "CUDA_HOME"))
    cands += [(os.path.join(r, "bin", exe), r) for r in system_roots]
    cands += [(c, "pip") for c in pip_candidates(roots, exe, legacy_pkg)]
    return locate(exe, env_var, cands, environ, roots, parse_cuda_tool_version,
                   path_exe=exe, path_position=1 if home else 0)

