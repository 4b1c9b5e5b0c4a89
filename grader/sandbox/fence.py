"""What an untrusted process may see and touch: a :class:`Fence`, and the bwrap command that makes it.

Inside the fence a process sees only:

* the system's programs and libraries (``/usr``, ``/bin``, ``/lib*``; their symlinks as they are),
  and of ``/etc`` only what the dynamic linker, gcc, nvcc and Python read (``ld.so.cache``,
  ``ld.so.conf*``, ``alternatives``, ``localtime``): no ``passwd``, ``shadow`` or ``hostname``
  (nothing we run needs them; ``id`` then prints numbers);
* the CUDA toolchain: ``/usr/local/cuda*`` (under ``/usr``), ``/opt/nvidia`` (Nsight Compute),
  ``$CUDA_HOME``/``$CUDA_PATH``, the folders of ``$GRADER_NVCC``-style tool overrides, the
  ``LD_LIBRARY_PATH`` folders and NVIDIA's pip wheels (under site-packages);
* the Python interpreter and its import path (``sys.prefix``, ``sys.base_prefix``, ``sys.path``)
  except the repository, of which only ``.venv`` is shown: the grader's source, ``rubric.yaml``,
  ``solutions/`` and ``tests/`` are invisible, and so are other submissions and the output folder;
* a fresh ``/proc`` (own PID namespace; ``/proc/sys`` read-only), a minimal ``/dev``, a private
  ``/tmp`` capped at ``tmp_bytes`` (also ``$HOME``), with ``gpu`` the ``/dev/nvidia*`` devices and
  a read-only ``/sys``;
* its ``scratch`` folder (the only writable place on disk) and the ``readonly`` paths.

No network unless ``network``; no other process of the machine (PID namespace). ``--die-with-parent``
and the PID namespace end every process the step started when the step ends.
"""
from __future__ import annotations

import atexit
import glob
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from grader import IN_CHECKOUT, PACKAGE_DIR, PRIVATE_ROOT, REPO_ROOT

MIB = 1 << 20
GIB = 1 << 30
WATCH_TRUSTED_S = 0.25  # how often a step with no student host code is watched (Fence.student_host_code)
SCRATCH_TRUSTED_S = 1.0  # ... and how often its scratch folder is measured (the grader's own files)

_SYSTEM_TREES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")
_TOOL_ROOTS = ("/opt/nvidia",)
_TOOL_VARS = ("GRADER_NVCC", "GRADER_CUOBJDUMP", "GRADER_NCU", "GRADER_COMPUTE_SANITIZER")
_VENV = REPO_ROOT / ".venv"


@dataclass(frozen=True)
class Fence:
    """The confinement of one untrusted step (docs/deployment.md, "What is fenced"). Sizes in bytes."""

    scratch: Path  # the one writable folder: the step's work folder
    readonly: tuple[Path, ...] = ()  # more paths shown read-only at the same place
    gpu: bool = False  # /dev/nvidia*, /sys (read-only)
    memory_bytes: int = 4 * GIB
    processes: int = 1024  # counts threads too under pids.max/RLIMIT_NPROC (BLAS starts one per core)
    scratch_bytes: int = 1 * GIB
    file_bytes: int = 512 * MIB  # largest file the step may write (RLIMIT_FSIZE)
    tmp_bytes: int = 512 * MIB  # the private /tmp (memory-backed)
    output_bytes: int = 64 * MIB  # stdout + stderr in total before the step is stopped
    network: bool = False
    # Scheduling priority lowered by this much (0-19, os.nice): a batch's compiles yield the host's
    # CPUs to the grading that holds the GPU (grader/pipeline.py: compile_stages).
    nice: int = 0
    # Whether host code the student controls runs in the step: their program, or a compiler reading their
    # source. The watchdog (grader.sandbox.limits) then looks every 10 ms in the first second, every 50 ms
    # after: a fork bomb doubles every few milliseconds. False for the grader's own children, which run
    # only the student's GPU kernels (the stage runs, the profiler, racecheck): nothing in them can fork
    # or grow host memory at that pace, and they are looked at every WATCH_TRUSTED_S. A grading watches
    # a dozen of them side by side while it compiles, so looking less often spares the grading process's
    # CPU (docs/measurements/2026-12-01-h200-speed-round4.md).
    student_host_code: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "scratch", Path(os.path.abspath(self.scratch)))
        object.__setattr__(self, "readonly", tuple(Path(os.path.abspath(p)) for p in self.readonly))
        for name in ("memory_bytes", "processes", "scratch_bytes", "file_bytes", "tmp_bytes", "output_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Fence.{name} must be a positive integer, not {value!r}")
        if not isinstance(self.nice, int) or isinstance(self.nice, bool) or not 0 <= self.nice <= 19:
            raise ValueError(f"Fence.nice must be an integer from 0 to 19, not {self.nice!r}")


def _under(path: Path | str, root: Path | str) -> bool:
    """``path`` is ``root`` or inside it (lexically; strings, as pathlib's parents is slow here)."""
    p, r = str(path), str(root).rstrip("/")
    return p == r or p.startswith(r + "/") or r == ""


def _allowed(path: Path) -> bool:
    """Never the checkout (nor a folder holding it), except its .venv. An installed package lives in
    site-packages beside the interpreter's libraries: that folder stays, and the package is masked.
    Never ``/tmp`` nor a folder holding it: shown read-only, the host's /tmp (other gradings' folders)
    would replace the step's private one, where nvcc writes its temporary files."""
    if _under("/tmp", path):
        return False
    if IN_CHECKOUT and _under(path, _VENV):
        return True
    if not IN_CHECKOUT:
        return not _under(path, PRIVATE_ROOT)
    return not (_under(path, PRIVATE_ROOT) or _under(PRIVATE_ROOT, path))


@lru_cache(maxsize=1)
def _static_roots() -> tuple[Path, ...]:
    """Read-only roots beside the system trees, from this process (the interpreter, tools)."""
    found: list[str] = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                        os.path.dirname(os.path.realpath(sys.executable)), *_TOOL_ROOTS]
    # The interpreter's module folders, for numpy and CuPy, but not the folder Python put first for the
    # main module (the current folder under ``-m``, the script's folder otherwise): that is wherever a TA
    # happened to start the grader, and holds nothing a step imports.
    first = 0 if getattr(sys.flags, "safe_path", False) else 1  # -P (Python 3.11+): nothing put first
    found += [p for p in sys.path[first:] if p and os.path.isabs(p)]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            found.append(os.environ[var])
    for var in _TOOL_VARS:  # <root>/bin/<tool>: show the tool's whole tree
        if os.environ.get(var):
            found.append(os.path.dirname(os.path.dirname(os.path.realpath(os.environ[var]))))
    for conf in glob.glob("/etc/ld.so.conf.d/*.conf"):  # driver folders outside /usr (containers)
        try:
            found += [ln.strip() for ln in Path(conf).read_text().splitlines() if ln.strip().startswith("/")]
        except OSError:
            pass
    return tuple(Path(p) for p in found)


def visible_roots(env: Mapping[str, str]) -> list[Path]:
    """Every read-only root shown inside a fence (system trees excluded), deduplicated."""
    return list(_visible_roots(env.get("LD_LIBRARY_PATH", "")))


@lru_cache(maxsize=8)
def _visible_roots(ld_library_path: str) -> tuple[Path, ...]:
    paths = list(_static_roots())
    paths += [Path(p) for p in ld_library_path.split(os.pathsep) if os.path.isabs(p)]
    out: list[Path] = []
    for p in paths:
        for q in {Path(os.path.abspath(p)), Path(os.path.realpath(p))}:
            if q.exists() and _allowed(q) and not any(_under(q, Path(t)) for t in _SYSTEM_TREES):
                out.append(q)
    out = sorted(set(out), key=lambda p: (len(p.parts), str(p)))
    return tuple(p for i, p in enumerate(out) if not any(_under(p, q) for q in out[:i]))


def is_visible(path: str | os.PathLike[str], fence: Fence, env: Mapping[str, str]) -> bool:
    """Would ``path`` (resolved) be seen inside ``fence``?"""
    p = Path(os.path.realpath(path))
    roots = [Path(t) for t in _SYSTEM_TREES] + visible_roots(env) + [fence.scratch, *fence.readonly]
    return any(_under(p, Path(os.path.realpath(r))) for r in roots)


def _mounts(binds: list[tuple[str, Path]]) -> list[str]:
    """The binds, parents before children (a read-only path inside the scratch stays read-only),
    with the folders above them made 0755 first: bwrap would make them 0700, which a student user
    cannot pass (measured)."""
    dests = [str(p) for _, p in binds]
    covered = [*_SYSTEM_TREES, "/proc", "/dev", *dests]
    above: set[str] = set()
    for p in dests:
        a = os.path.dirname(p)
        while a not in ("/", "/tmp"):
            above.add(a)
            a = os.path.dirname(a)
    dirs = {a for a in above if not any(_under(a, c) for c in covered)}
    ops = [(d, ["--perms", "0755", "--dir", d]) for d in dirs]
    ops += [(p, [how, p, p]) for (how, _), p in zip(binds, dests)]
    return [arg for _, args in sorted(ops, key=lambda o: (o[0].count("/"), o[0])) for arg in args]


def bwrap_args(bwrap: str, fence: Fence, *, cwd: Path, env: Mapping[str, str], as_root: bool,
               switch: tuple[int, int] | None, setpriv: str | None, status_fd: int) -> list[str]:
    """The bwrap command line (everything before the step's own command)."""
    a = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
         "--unshare-cgroup-try", "--hostname", "sandbox"]
    if not fence.network:
        a.append("--unshare-net")
    if as_root:
        # As root bwrap makes the namespaces itself and, unless told, leaves the step every
        # capability (measured: CapEff was full and /proc/sys writable). To become the student
        # user, setpriv needs SETUID/SETGID, and bwrap's chdir into the user's (maybe 0700) scratch
        # DAC_READ_SEARCH; all are gone with setpriv's setuid, before the step's command runs.
        a += ["--cap-drop", "ALL"]
        if switch is not None:
            a += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_DAC_READ_SEARCH"]
    else:
        a += ["--unshare-user", "--disable-userns"]
    for tree in _SYSTEM_TREES:
        if os.path.islink(tree):
            a += ["--symlink", os.readlink(tree), tree]
        elif os.path.isdir(tree):
            a += ["--ro-bind", tree, tree]
    a += ["--perms", "0755", "--dir", "/etc"]
    for name in _ETC:
        a += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    a += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev",
          "--perms", "1777", "--size", str(fence.tmp_bytes), "--tmpfs", "/tmp"]
    if fence.gpu:
        for dev in sorted(glob.glob("/dev/nvidia*")):
            a += ["--dev-bind", dev, dev]
        a += ["--ro-bind", "/sys", "/sys"]
    binds = [("--ro-bind", p) for p in visible_roots(env)]
    binds += [("--ro-bind", p) for p in fence.readonly] + [("--bind", fence.scratch)]
    # The root itself is bwrap's tmpfs: read-only, or a step running as (capability-less) root
    # could fill memory through /x, /etc/x (measured); its /tmp is the capped tmpfs above.
    a += _mounts(binds)
    if not IN_CHECKOUT and any(_under(PRIVATE_ROOT, p) for _, p in binds):
        # Installed: site-packages is shown for numpy and CuPy; an empty tmpfs hides the grader in it.
        a += ["--tmpfs", str(PRIVATE_ROOT), "--remount-ro", str(PRIVATE_ROOT)]
    a += ["--remount-ro", "/"]
    a += ["--chdir", str(cwd), "--json-status-fd", str(status_fd), "--"]
    if switch is not None and setpriv is not None:
        a += [setpriv, f"--reuid={switch[0]}", f"--regid={switch[1]}", "--clear-groups", "--inh-caps=-all", "--"]
    return a


def runtime_folder(dest: str | os.PathLike[str], files: Sequence[str] | None = None) -> Path:
    """Copy the package files child processes need (``grader.children.RUNTIME_FILES``, paths
    relative to the ``grader`` package) into ``dest/grader/``; return ``dest``.

    Bind ``dest`` read-only (``Fence.readonly``) and put it first on the child's PYTHONPATH: the
    child then imports ``grader.children...`` from there without seeing the grader's source.
    """
    if files is None:
        from grader import children

        files = children.RUNTIME_FILES
    root = Path(dest)
    pkg = root / "grader"
    pkg.mkdir(parents=True, exist_ok=True)
    for rel in files:
        rel_path = Path(rel)
        src = PACKAGE_DIR / rel_path
        if rel_path.is_absolute() or ".." in rel_path.parts or not src.is_file():
            raise ValueError(f"runtime file {rel!r} is not a file of the grader package")
        target = pkg / rel_path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
        target.chmod(0o644)
    for d in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        d.chmod(0o755)  # readable by the student user the step may run as
    return root


@lru_cache(maxsize=1)
def shared_runtime() -> Path:
    """One runtime folder (:func:`runtime_folder` of ``RUNTIME_FILES``) for this grading process,
    made on first use in a temporary folder and removed at exit. Children read it read-only; it is
    the grader's (0644/0755), so a student user cannot change it between steps."""
    root = Path(tempfile.mkdtemp(prefix="grader-runtime-"))
    atexit.register(shutil.rmtree, root, True)
    return runtime_folder(root)

