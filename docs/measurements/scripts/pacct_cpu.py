"""Where a whole run's CPU goes, from the kernel's process accounting: every process that exited, whoever
started it and however it ended (killed sandboxes and processes no one reaped included, which
``/usr/bin/time`` of the run never sees).

Record (as root; the kernel's BSD process accounting, package ``acct`` for ``accton``)::

    touch /tmp/run.pacct && accton /tmp/run.pacct
    PYTHONPATH=docs/measurements/scripts PACCT_TESTS=/tmp/run.tests \\
        CI=true bash grader/bootstrap.sh test -p pacct_cpu     # -p: the test spans below (optional)
    accton off

Read::

    python3 docs/measurements/scripts/pacct_cpu.py /tmp/run.pacct                 # CPU per command name
    python3 docs/measurements/scripts/pacct_cpu.py /tmp/run.pacct /tmp/run.tests  # ... and per test, per file

As a pytest plugin (``-p pacct_cpu``) this module writes one JSON line per test start and end per
pytest-xdist worker to ``$PACCT_TESTS``: the worker's pid, the test, the time and the worker's own CPU.
A process's CPU is given to the test its worker ran when the process exited (its start time in the
record has whole seconds only); the workers' own CPU to each test from its start and end. Module and
session fixtures' processes count for the test that first asked for them.

The record format is ``struct acct_v3`` (linux/acct.h): times in ``comp_t`` (3-bit base-8 exponent,
13-bit mantissa) of 1/100 s.
"""
from __future__ import annotations

import bisect
import collections
import json
import os
import struct
import sys
import time

_FORMAT = "<BBHIIIIIIf8H16s"  # flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime, 8 comp_t, comm
_SIZE = struct.calcsize(_FORMAT)
_TOOLCHAIN = {"cc1plus", "cicc", "ptxas", "nvdisasm", "cuobjdump", "nvcc", "cudafe++", "gcc", "g++", "ld", "cc1"}


def _comp(v: int) -> float:
    return ((v & 0x1FFF) << (3 * ((v >> 13) & 7))) / 100.0


def read(path: str) -> list[dict]:
    """Every record of an acct v3 file: pid, ppid, start (s since the epoch), seconds alive, CPU (user + sys)."""
    data = open(path, "rb").read()
    out = []
    for i in range(0, len(data) - _SIZE + 1, _SIZE):
        f = struct.unpack_from(_FORMAT, data, i)
        if f[1] != 3:
            continue
        out.append({"pid": f[6], "ppid": f[7], "start": f[8], "alive": f[9] / 100.0, "user": _comp(f[10]),
                    "sys": _comp(f[11]), "cpu": _comp(f[10]) + _comp(f[11]),
                    "comm": f[18].rstrip(b"\0").decode(errors="replace")})
    return out


def by_command(recs: list[dict]) -> None:
    cpu, n = collections.Counter(), collections.Counter()
    for r in recs:
        cpu[r["comm"]] += r["cpu"]
        n[r["comm"]] += 1
    print(f"{len(recs)} processes, {sum(cpu.values()):.1f} CPU-s "
          f"(user {sum(r['user'] for r in recs):.1f}, sys {sum(r['sys'] for r in recs):.1f})")
    for comm, v in cpu.most_common(25):
        print(f"{v:8.1f} {n[comm]:6d}  {comm}")


def by_test(recs: list[dict], tests_path: str, top: int = 40) -> None:
    lines = [json.loads(line) for line in open(tests_path)]
    starts = collections.Counter(e["pid"] for e in lines if e.get("ev") == "start")
    controller = max(starts, key=starts.__getitem__)  # it reports every test too
    workers = {p for p in starts if p != controller}
    spans: dict[int, list[tuple[float, float, str, float]]] = collections.defaultdict(list)
    opened: dict[tuple[int, str], tuple[float, float]] = {}
    for e in lines:
        if e["pid"] not in workers or e.get("ev") not in ("start", "end"):
            continue
        key = (e["pid"], e["id"])
        if e["ev"] == "start":
            opened[key] = (e["t"], e["cpu"])
        elif key in opened:
            t0, c0 = opened.pop(key)
            spans[e["pid"]].append((t0, e["t"], e["id"], e["cpu"] - c0))
    for s in spans.values():
        s.sort()
    last: dict[int, dict] = {}
    for r in recs:
        last[r["pid"]] = r

    def worker_of(r: dict) -> int | None:
        for _ in range(64):
            if r["pid"] in workers:
                return r["pid"]
            parent = last.get(r["ppid"])
            if parent is None:
                return None
            r = parent
        return None

    per_test: collections.Counter = collections.Counter()
    kinds: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    outside = 0.0
    for r in recs:
        if r["pid"] in workers:
            continue
        w = worker_of(r)
        if w is None:
            outside += r["cpu"]
            continue
        end = r["start"] + r["alive"]
        i = bisect.bisect_right(spans[w], (end + 0.5, float("inf"))) - 1
        test = spans[w][i][2] if i >= 0 else "(before the first test)"
        per_test[test] += r["cpu"]
        kind = "toolchain" if r["comm"] in _TOOLCHAIN else "python" if r["comm"].startswith("python") else "other"
        kinds[test][kind] += r["cpu"]
    for s in spans.values():
        for _t0, _t1, test, cpu in s:
            per_test[test] += cpu
            kinds[test]["worker"] += cpu
    print(f"\nper test (children by exit time, the worker's own by span): {sum(per_test.values()):.1f} CPU-s; "
          f"{outside:.1f} CPU-s outside the workers' trees")
    per_file: collections.Counter = collections.Counter()
    for test, v in per_test.items():
        per_file[test.split("::")[0]] += v
    for f, v in per_file.most_common(top // 2):
        print(f"{v:7.1f}  {f}")
    print()
    for test, v in per_test.most_common(top):
        parts = " ".join(f"{k}={x:.1f}" for k, x in kinds[test].most_common())
        print(f"{v:7.1f}  {test[:110]}  {parts}")


# ---- the pytest plugin: each test's start and end on each worker -------------------------------------------
_out = None


def _write(event: dict) -> None:
    global _out
    if _out is None:
        _out = open(os.environ.get("PACCT_TESTS", "pacct-tests.jsonl"), "a", buffering=1)
    _out.write(json.dumps(event) + "\n")


def pytest_runtest_logstart(nodeid, location):  # noqa: ARG001 - pytest's hook signature
    _write({"pid": os.getpid(), "id": nodeid, "ev": "start", "t": time.time(), "cpu": time.process_time()})


def pytest_runtest_logfinish(nodeid, location):  # noqa: ARG001
    _write({"pid": os.getpid(), "id": nodeid, "ev": "end", "t": time.time(), "cpu": time.process_time()})


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    records = read(sys.argv[1])
    by_command(records)
    if len(sys.argv) == 3:
        by_test(records, sys.argv[2])
