"""Measurement only (docs/measurements/scripts/process_cpu.py says how to use it): every Python process started
with this folder on PYTHONPATH appends, at its exit, one JSON line to $PYPROC_LOG: its command line, its own CPU
(getrusage RUSAGE_SELF, user + sys), the CPU it had used when this file ran (the interpreter's start), the CPU
spent inside its outermost imports (``import`` statements and importlib.import_module, nested imports counted
once), its reaped children's CPU, its wall time, its module count and the test it was started under
(PYTEST_CURRENT_TEST). A process killed by a signal or ended by os._exit writes nothing; a process that execs
another program writes nothing either (an exec'd Python writes its own line, with the CPU from before the exec)."""
import atexit
import builtins
import importlib
import os
import resource
import sys
import time

_LOG = os.environ.get("PYPROC_LOG", "/tmp/pyproc.jsonl")
_t0 = time.monotonic()
_r = resource.getrusage(resource.RUSAGE_SELF)
_start_cpu = _r.ru_utime + _r.ru_stime
_imp = [0.0, 0]  # CPU inside outermost imports, import depth
_pt = time.process_time
_orig_import = builtins.__import__
_orig_import_module = importlib.import_module


def _timed(call):
    def timed(*a, **k):
        if _imp[1]:
            _imp[1] += 1
            try:
                return call(*a, **k)
            finally:
                _imp[1] -= 1
        _imp[1] = 1
        t = _pt()
        try:
            return call(*a, **k)
        finally:
            _imp[0] += _pt() - t
            _imp[1] = 0
    return timed


builtins.__import__ = _timed(_orig_import)
importlib.import_module = _timed(_orig_import_module)


def _done():
    try:
        import json

        r, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        rec = {"pid": os.getpid(), "ppid": os.getppid(), "argv": [sys.executable] + sys.argv[:4],
               "orig_argv": getattr(sys, "orig_argv", [])[:6], "cpu": r.ru_utime + r.ru_stime, "start": _start_cpu,
               "imp": _imp[0], "children": c.ru_utime + c.ru_stime, "wall": time.monotonic() - _t0,
               "mods": len(sys.modules), "test": os.environ.get("PYTEST_CURRENT_TEST", "")[:200]}
        fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        os.write(fd, (json.dumps(rec) + "\n").encode())  # one write per line: lines of processes never interleave
        os.close(fd)
    except Exception:
        pass


atexit.register(_done)
