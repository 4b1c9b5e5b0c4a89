"""CPU seconds per test and per test file: a pytest plugin, and a summary of what it wrote.

    PYTHONPATH=docs/measurements/scripts CPU_PER_TEST=/tmp/cpu CPU_PER_TEST_TAG=after \
        .venv/bin/python -m pytest tests -n 4 --dist loadfile -p no:cacheprovider -p cpu_per_test
    python docs/measurements/scripts/cpu_per_test.py /tmp/cpu after [N]

Each worker (or the one process) writes one line per test: the CPU its own process and its reaped children
(every grading, nvcc, service and browser the test started and waited for) used since the previous test ended,
so a module's or the session's fixtures count in the test that first asked for them, and the first test of a
worker carries the worker's collection. pytest-xdist's controller writes its own file (near-zero CPU; left out).
CPU depends on what else runs far less than wall time does, but not at all is too strong: on a shared 2-core box
the same unchanged files measured 10-25 % apart between two runs (cache and scheduler contention).
"""
from __future__ import annotations

import collections
import glob
import json
import os
import resource
import sys
import time

_state: dict = {}


def _now() -> tuple[float, float, float]:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime, time.monotonic()


def _write(nodeid: str) -> None:
    now, last = _now(), _state["last"]
    _state["out"].write(json.dumps({"nodeid": nodeid, "self": now[0] - last[0], "child": now[1] - last[1],
                                    "wall": now[2] - last[2]}) + "\n")
    _state["out"].flush()
    _state["last"] = now


def pytest_sessionstart(session):
    folder = os.environ.get("CPU_PER_TEST", "/tmp/cpu-per-test")
    os.makedirs(folder, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _state["out"] = open(os.path.join(folder, f"{os.environ.get('CPU_PER_TEST_TAG', 'run')}-{worker}.jsonl"), "a")
    _state["last"] = _now()


def pytest_runtest_logfinish(nodeid, location):
    _write(nodeid)


def pytest_sessionfinish(session):
    _write("<finish>")


def summary(folder: str, tag: str, n: int = 30) -> None:
    files = glob.glob(os.path.join(folder, f"{tag}-gw*.jsonl")) or glob.glob(os.path.join(folder, f"{tag}-main.jsonl"))
    per_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    tests = []
    for name in files:
        with open(name) as f:
            for line in f:
                r = json.loads(line)
                if r["nodeid"] in ("<start>", "<finish>"):
                    continue
                p = per_file[r["nodeid"].split("::")[0]]
                p[0] += r["self"]
                p[1] += r["child"]
                p[2] += 1
                tests.append((r["self"] + r["child"], r["wall"], r["nodeid"]))
    print(f"CPU of all tests: {sum(p[0] + p[1] for p in per_file.values()):.0f} s")
    for path, (own, child, count) in sorted(per_file.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:n]:
        print(f"{own + child:7.1f} s  (own {own:5.1f}, children {child:6.1f})  {int(count):4d} tests  {path}")
    print("tests:")
    for cpu, wall, nodeid in sorted(tests, reverse=True)[:n]:
        print(f"{cpu:7.1f} s CPU {wall:7.1f} s wall  {nodeid}")


if __name__ == "__main__":
    summary(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 30)
