"""Reuse of a guarded compile whose every input is unchanged (opt-in; off unless a folder is set).

A TA who re-grades a batch, a rescore that grades again, or a service re-grading an unchanged
submission compiles the same sources with the same flags and the same toolchain again; with
``GRADER_COMPILE_REUSE=FOLDER`` the grader keeps each finished compile there and hands back its record
and its output files instead of compiling again. ``GRADER_COMPILE_REUSE_MB`` bounds the folder
(default :data:`DEFAULT_MB`; the least recently used entries go first).

What a compile's entry is keyed on (:func:`key`): the name and bytes of every file in its build folder
(the submission's copied sources and headers: all the compile can read of the submission), the whole
command line (flags, arch, include folders, output and source names), the toolchain's identity (nvcc's
path and version, the name, size and modification time of every file beside nvcc and in its nvvm
folders, the host compiler's path, version, size and modification time), the extra include folders and
environment nvcc is given, the environment variables nvcc and the host compiler read (``NVCC_*``,
``CUDA*``, ``CPATH``, ``*_INCLUDE_PATH``, ``GCC_*``, ``PATH``, ``LD_*``, ``LANG``, ``LC_*``), the fence's
limits and the output limit. Every file the compile read outside the build folder (the toolkit's and
the system's headers, as nvcc's ``-MD`` listing names them) is hashed when the entry is written and
hashed again before it is reused: one that changed makes the entry a miss.

When a compile is stored: only by the grader's own process, after a compile that ran inside bubblewrap
(so the student's code never sees the folder: the fence shows only the scratch folder, the system and
the toolchain, and a folder the fence would show turns reuse off), that ended by itself (not timed
out, killed or stopped by a limit), that was not refused, that listed what it read, and whose build
folder holds no subfolder afterwards. An entry is written to a temporary name and renamed; it begins
with the SHA-256 of the rest, checked on every read; a corrupt or unreadable entry is a miss (and is
removed), never an error.

The same folder keeps the opcode counts of each cubin's SASS listing (``cuobjdump -sass``, read by
:mod:`grader.compile.sass`), keyed on the cubin's bytes, cuobjdump's path, version and environment, every
file beside it and beside the nvdisasm it runs (name, size, modification time), the environment variables
it reads and the listing's bounds (:func:`listing_key`). A listing is kept only when it was read whole and
the cubin's bytes were the same after the dump as before; it is reused only where the grading's steps run
inside bubblewrap and none of them is shown the folder (:func:`listing_store`).

A reused compile returns the record the real one returned (its status, message, process record with
return code, output and seconds, dependencies and phase seconds), with the time limit the real one
would have run under now; it is reused only if each of its processes took less than that limit. A
reused compile takes none of the submission's shared compile time (``Deadline``); a compile that
reached a limit is never stored, so the compiles that budget exists for always run.
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from grader.compile.tool_search import Tool
from grader.model import ProcRecord
from grader.sandbox.fence import Fence, is_visible
from grader.sandbox.guard import confines

ENV_FOLDER = "GRADER_COMPILE_REUSE"
ENV_MB = "GRADER_COMPILE_REUSE_MB"
DEFAULT_MB = 2048
FORMAT = 2  # bump when what an entry holds or how the key is made changes
_ENV_NAMES = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "COMPILER_PATH", "LIBRARY_PATH", "PATH", "LANG")
_ENV_PREFIXES = ("NVCC_", "CUDA", "GCC_", "LD_", "LC_")
_SUFFIX = ".entry"
# The fence's fields that change nothing a compile reads or writes: its folder (the build folder's bytes are
# keyed instead), its scheduling priority and how often its watchdog looks. Its limits are keyed.
_NOT_KEYED = frozenset({"scratch", "nice", "student_host_code"})


@dataclass(frozen=True)
class Store:
    """The folder of reusable compiles and its bound in bytes."""

    folder: Path
    max_bytes: int


def configured(environ: Mapping[str, str] | None = None) -> Store | None:
    """The store ``GRADER_COMPILE_REUSE`` names, or None (unset, or a folder this process cannot keep to
    itself: it must be the grader's own, readable by no one else)."""
    env = os.environ if environ is None else environ
    raw = env.get(ENV_FOLDER, "").strip()
    if not raw:
        return None
    try:
        mb = float(env.get(ENV_MB, "") or DEFAULT_MB)
    except ValueError:
        mb = DEFAULT_MB
    folder = Path(os.path.abspath(raw))
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.stat()
        if st.st_uid != os.geteuid() or not stat.S_ISDIR(st.st_mode):
            return None
        if st.st_mode & 0o077:
            os.chmod(folder, 0o700)
    except OSError:
        return None
    return Store(folder, max(0, int(mb * 1024 * 1024)))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha(path: str) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except OSError:
        return None


def _stat_line(path: str | None) -> list:
    if not path:
        return [None]
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return [real, None]
    return [real, st.st_size, st.st_mtime_ns]


def _toolchain(nvcc_path: str, host: str | None, path_var: str) -> tuple:
    """nvcc's and the host compiler's files, by name, size and modification time."""
    real = os.path.realpath(nvcc_path)
    bin_dir = os.path.dirname(real)
    lines: list = []
    for folder in (bin_dir, os.path.join(bin_dir, "..", "nvvm", "bin"), os.path.join(bin_dir, "..", "nvvm", "libdevice")):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        lines += [_stat_line(os.path.join(folder, n)) for n in names]
    host_path = shutil.which(host, path=path_var) if host and os.sep not in host else host
    lines.append(["host", _stat_line(host_path)])
    return tuple(json.dumps(x) for x in lines)


def _env_part(env: Mapping[str, str]) -> list[tuple[str, str]]:
    return sorted((k, v) for k, v in env.items() if k in _ENV_NAMES or k.startswith(_ENV_PREFIXES))


def _files(folder: Path) -> dict[str, tuple[int, int]] | None:
    """The build folder's files by name: (size, mtime_ns); None when it holds anything else."""
    out = {}
    for entry in os.scandir(folder):
        if not entry.is_file(follow_symlinks=False):
            return None
        st = entry.stat(follow_symlinks=False)
        out[entry.name] = (st.st_size, st.st_mtime_ns)
    return out


def key(nvcc: Tool, folder: Path, command: Sequence[str], env: Mapping[str, str], fence: Fence,
        output_limit: int, user: str | None) -> str | None:
    """The entry's name for this compile, or None when the build folder holds anything but plain files."""
    assert nvcc.path is not None
    files = _files(folder)
    if files is None:
        return None
    try:
        contents = {name: _sha((folder / name).read_bytes()) for name in sorted(files)}
    except OSError:
        return None
    limits = {f.name: getattr(fence, f.name) for f in dataclasses.fields(fence) if f.name not in _NOT_KEYED}
    what = {
        "format": FORMAT,
        "command": list(command),
        "files": contents,
        "nvcc": [nvcc.path, nvcc.version, nvcc.host_compiler, nvcc.host_compiler_version, sorted(nvcc.env.items()),
                 list(nvcc.include_dirs)],
        "toolchain": list(_toolchain(nvcc.path, nvcc.host_compiler, env.get("PATH", os.defpath))),
        "env": _env_part(env),
        "fence": limits,
        "output_limit": output_limit,
        "user": user,
    }
    return _sha(json.dumps(what, sort_keys=True, default=str).encode())


def before(folder: Path) -> dict[str, tuple[int, int]] | None:
    """What the build folder holds before the compile (what it writes is what differs after)."""
    return _files(folder)


@dataclass
class Hit:
    """A stored compile: its record's fields and the files it wrote."""

    record: dict
    files: dict[str, tuple[int, bytes]]  # name: (mode, bytes)


def _path(store: Store, name: str) -> Path:
    return store.folder / f"{name}{_SUFFIX}"


def load(store: Store, name: str) -> Hit | None:
    """The entry ``name`` if it is whole and every file it read outside its build folder is unchanged."""
    path = _path(store, name)
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    try:
        digest, _, body = raw.partition(b"\n")
        if _sha(body) != digest.decode("ascii"):
            raise ValueError("digest")
        data = json.loads(body)
        outside = data["outside"]
        files = {n: (int(mode), base64.b64decode(b64)) for n, (mode, b64) in data["files"].items()}
        record = data["record"]
        if not isinstance(record, dict) or not isinstance(outside, dict):
            raise ValueError("shape")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        path.unlink(missing_ok=True)  # corrupt: a miss, and the next compile writes it again
        return None
    if any(_file_sha(p) != h for p, h in outside.items()):
        return None
    try:
        os.utime(path)  # recently used: evicted last
    except OSError:
        pass
    return Hit(record, files)


def save(store: Store, name: str, record: dict, folder: Path, was: Mapping[str, tuple[int, int]],
         dependencies: Sequence[str], outputs: Sequence[str]) -> bool:
    """Write the entry: ``record``, each of the compile's ``outputs`` (names in ``folder``) that is new or
    changed since ``was``, and the hash of every dependency outside ``folder``. Nothing is written when one
    of those cannot be read. Only the compile's own outputs are kept: builds that share a folder and run side
    by side change other files in it meanwhile, and a half-written file of theirs must never be restored."""
    now = _files(folder)
    if now is None or not dependencies:
        return False
    base = os.path.realpath(folder)
    outside: dict[str, str] = {}
    for dep in dependencies:
        real = os.path.realpath(os.path.join(base, dep))
        if real == base or real.startswith(base + os.sep):
            continue  # in the build folder: its bytes are in the key
        digest = _file_sha(real)
        if digest is None:
            return False
        outside[real] = digest
    files = {}
    try:
        for n, sig in now.items():
            if n in outputs and was.get(n) != sig:
                p = folder / n
                files[n] = [stat.S_IMODE(p.stat().st_mode), base64.b64encode(p.read_bytes()).decode("ascii")]
    except OSError:
        return False
    return _write(store, name, {"record": record, "files": files, "outside": outside})


def _write(store: Store, name: str, entry: dict) -> bool:
    body = json.dumps(entry, sort_keys=True).encode()
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=store.folder)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_sha(body).encode("ascii") + b"\n" + body)
        os.replace(tmp, _path(store, name))
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        return False
    evict(store)
    return True


def listing_store(fence: Fence, user: str | None = None, environ: Mapping[str, str] | None = None) -> Store | None:
    """The store for SASS listings' counts (:mod:`grader.compile.sass`) in a grading whose steps may see at most
    what ``fence`` shows (its scratch: the grading's work folder, every step's scratch inside it): None when reuse
    is off, when those steps would not run inside bubblewrap, or when ``fence`` would show the store's folder."""
    env = os.environ if environ is None else environ
    store = configured(env)
    if store is None or not confines(fence, user) or is_visible(store.folder, fence, env):
        return None
    return store


def listing_key(tool: Tool, cubin: bytes, bounds: Sequence[int], environ: Mapping[str, str] | None = None) -> str | None:
    """The entry's name for the SASS listing of ``cubin`` by ``tool`` (cuobjdump) read within ``bounds``."""
    if tool.path is None:
        return None
    env = {**(os.environ if environ is None else environ), **tool.env}
    folders = [os.path.dirname(os.path.realpath(tool.path))]
    nvdisasm = shutil.which("nvdisasm", path=env.get("PATH", os.defpath))
    if nvdisasm:
        folders.append(os.path.dirname(os.path.realpath(nvdisasm)))
    files: list = []
    for folder in dict.fromkeys(folders):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        files += [_stat_line(os.path.join(folder, n)) for n in names]
    what = {"format": FORMAT, "listing": "sass", "cubin": _sha(cubin), "tool": [tool.path, tool.version],
            "files": files, "env": _env_part(env), "bounds": list(bounds)}
    return _sha(json.dumps(what, sort_keys=True, default=str).encode())


def save_record(store: Store, name: str, record: dict) -> bool:
    """Keep ``record`` alone (no files, nothing read outside) under ``name``."""
    return _write(store, name, {"record": record, "files": {}, "outside": {}})


def evict(store: Store) -> None:
    """Remove the least recently used entries until the folder is within its bound."""
    entries = []
    for entry in os.scandir(store.folder):
        if entry.name.endswith(_SUFFIX):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            entries.append((st.st_mtime_ns, st.st_size, entry.path))
    total = sum(size for _, size, _ in entries)
    for _mtime, size, path in sorted(entries):
        if total <= store.max_bytes:
            break
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= size


def restore(hit: Hit, folder: Path, uid_gid: tuple[int, int] | None) -> bool:
    """Write the stored compile's files into ``folder`` (owned by ``uid_gid`` when given)."""
    try:
        for n, (mode, data) in hit.files.items():
            p = folder / n
            p.unlink(missing_ok=True)
            p.write_bytes(data)
            os.chmod(p, mode)
            if uid_gid is not None:
                os.chown(p, *uid_gid)
    except OSError:
        return False
    return True


def proc_to_json(proc: ProcRecord) -> dict:
    d = dataclasses.asdict(proc)
    d["limit"] = None if proc.limit is None else str(proc.limit)
    return d


def proc_from_json(d: Mapping) -> ProcRecord:
    fields = {f.name for f in dataclasses.fields(ProcRecord)}
    if d.get("limit") is not None or set(d) - fields:
        raise ValueError("a stored compile ended by a limit, or one of another shape")
    return ProcRecord(**{k: v for k, v in d.items() if k != "limit"})
