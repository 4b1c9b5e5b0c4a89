"""Measurement only (docs/measurements/scripts/tool_calls.py says how to use it): every Python process started with
this folder on PYTHONPATH appends one JSON line to $TOOL_CALLS_LOG for each CUDA tool process it reaps (nvcc, ptxas,
cuobjdump, nvdisasm, cicc, fatbinary; fenced ones through bwrap included): the tool, its command line with the build
folder and temporary folders written as placeholders, a key (SHA-256 of that command line and of the name and bytes
of every source file in the build folder and every file the command line names), the CPU the reaped process and the
children it waited for used (``os.wait4``'s rusage: bwrap's, nvcc's own children included), its wall time, its
return code, whether it ran in bubblewrap and the test it ran under (PYTEST_CURRENT_TEST). A call killed at a limit
is logged too; its sandbox's orphans are not in its CPU."""
import os
import re
import subprocess
import time

_LOG = os.environ.get("TOOL_CALLS_LOG", "/tmp/tool_calls.jsonl")
_TOOLS = {"nvcc", "ptxas", "cuobjdump", "nvdisasm", "cicc", "fatbinary"}
_SOURCES = (".cu", ".cuh", ".h", ".hpp", ".hh", ".cpp", ".cc", ".c", ".inc", ".inl", ".ptx")
_TMP = re.compile(r"/tmp/[^\s:=,]*")
_orig_init = subprocess.Popen.__init__
_orig_try_wait = subprocess.Popen._try_wait


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _describe(argv, cwd):
    args = [str(a) for a in argv]
    at = next((i for i, a in enumerate(args) if os.path.basename(a) in _TOOLS), None)
    if at is None:
        return None
    folder = cwd
    if "--chdir" in args[:at]:
        folder = args[args.index("--chdir") + 1]
    folder = os.path.abspath(str(folder)) if folder else os.getcwd()
    files = {}
    try:
        for e in os.scandir(folder):
            if e.is_file(follow_symlinks=False) and e.name.endswith(_SOURCES):
                with open(e.path, "rb") as f:
                    files[e.name] = _sha(f.read())
    except OSError:
        pass
    norm = []
    for a in args[at:]:
        path = a if os.path.isabs(a) else os.path.join(folder, a)
        if os.path.isfile(path) and not a.startswith("-"):
            try:
                with open(path, "rb") as f:
                    files["arg:" + os.path.basename(a)] = _sha(f.read())
            except OSError:
                pass
        norm.append(_TMP.sub("<tmp>", a.replace(folder, "<build>")))
    tool = os.path.basename(args[at])
    key = _sha(repr((norm, sorted(files.items()))).encode())
    _keep(key, args[at:], folder)
    return {"tool": tool, "cmd": norm, "fenced": os.path.basename(args[0]) == "bwrap",
            "key": key, "files": len(files)}


def _keep(key, args, folder):
    """The first call of each key leaves its build folder's files and the files its command names (each under
    4 MiB) and its command in $TOOL_CALLS_STORE/KEY, for tool_calls.py to run again alone and time."""
    store = os.environ.get("TOOL_CALLS_STORE")
    if not store or os.path.isdir(os.path.join(store, key)):
        return
    import json
    import shutil

    tmp = os.path.join(store, f".{key}.{os.getpid()}.{time.monotonic_ns()}")
    os.makedirs(os.path.join(tmp, "build"))
    named = {}
    for e in os.scandir(folder):
        if e.is_file(follow_symlinks=False) and e.stat().st_size < 4 << 20:
            shutil.copy2(e.path, os.path.join(tmp, "build", e.name))
    for i, a in enumerate(args[1:], 1):
        path = a if os.path.isabs(a) else os.path.join(folder, a)
        if os.path.isfile(path) and not a.startswith("-") and os.path.dirname(os.path.abspath(path)) != folder:
            dest = os.path.join(tmp, f"arg{i}-{os.path.basename(a)}")
            shutil.copy2(path, dest)
            named[i] = dest.replace(tmp, "<store>")
    with open(os.path.join(tmp, "cmd.json"), "w") as f:
        json.dump({"args": args, "folder": folder, "named": named}, f)
    try:
        os.rename(tmp, os.path.join(store, key))
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)


def _init(self, args, *a, **k):
    self._tc = None
    try:
        argv = [args] if isinstance(args, (str, bytes)) else list(args)
        self._tc = _describe(argv, k.get("cwd"))
        self._tc_t0 = time.monotonic()
    except Exception:
        self._tc = None
    _orig_init(self, args, *a, **k)


def _try_wait(self, wait_flags):
    if getattr(self, "_tc", None) is None:
        return _orig_try_wait(self, wait_flags)
    try:
        pid, sts, ru = os.wait4(self.pid, wait_flags)
    except ChildProcessError:
        pid, sts = self.pid, 0
        ru = None
    if pid == self.pid and ru is not None:
        try:
            import json

            rec = dict(self._tc, cpu=ru.ru_utime + ru.ru_stime, wall=time.monotonic() - self._tc_t0,
                       status=sts, test=os.environ.get("PYTEST_CURRENT_TEST", "")[:200],
                       worker=os.environ.get("PYTEST_XDIST_WORKER", ""), pid=os.getpid())
            fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            os.write(fd, (json.dumps(rec) + "\n").encode())
            os.close(fd)
        except Exception:
            pass
        self._tc = None
    return (pid, sts)


subprocess.Popen.__init__ = _init
subprocess.Popen._try_wait = _try_wait
