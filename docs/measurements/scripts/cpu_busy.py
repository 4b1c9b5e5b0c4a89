#!/usr/bin/env python3
"""Sample the host's CPU use while a command runs (a GPU-machine experiment for #32).

    python3 docs/measurements/scripts/cpu_busy.py OUT.json -- COMMAND...

Every 0.1 s: the busy share of all CPUs (/proc/stat), the number of runnable processes
(/proc/loadavg's running count) and the grading process's own CPU share (the command's pid,
/proc/PID/stat utime+stime, which counts every thread of it); then a compact table of 0.5 s bins,
and the CPU seconds of every process seen, summed by what it is (its command line), in all and per
second of the run (the busiest kinds). A child's kind names the program too: the tool in front of it
(``ncu``, ``compute-sanitizer``, ``bwrap``) or the Python that runs it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def cpu_times() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields), idle


def proc_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rpartition(")")[2].split()
        return int(parts[11]) + int(parts[12])
    except OSError:
        return 0


def classify(pid: int) -> str:
    """What a process is, from its command line: the grading process, a child's mode, a tool, a compiler."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "?"
    if not argv:
        return "?"
    name = os.path.basename(argv[0])
    if "grader.children" in argv:
        mode = argv[argv.index("grader.children") + 1] if argv.index("grader.children") + 1 < len(argv) else "?"
        return f"child {mode}" + ("" if name.startswith("python") else f" ({name})")
    if "grader" in argv and "grade" in argv:
        return "grading process"
    if name in ("cicc", "ptxas", "nvcc", "cudafe++", "gcc", "cc1plus", "cc1", "fatbinary", "nvlink"):
        return "compile: " + name
    return name


def all_ticks() -> dict[int, tuple[str, int]]:
    """pid -> (what it is, utime + stime so far) for every live process."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            pid = int(name)
            ticks = proc_ticks(pid)
            if ticks:
                out[pid] = (classify(pid), ticks)
    return out


def main() -> int:
    out, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    hz, ncpu = os.sysconf("SC_CLK_TCK"), os.cpu_count() or 1
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd)
    rows = []
    last_total, last_idle = cpu_times()
    last_self = proc_ticks(proc.pid)
    before = {pid: ticks for pid, (_what, ticks) in all_ticks().items()}  # what ran before the command
    seen: dict[int, tuple[str, int]] = {}  # every process seen since: what it is, its ticks used since
    per_second: dict[int, dict[str, int]] = {}  # whole second of the run -> kind -> ticks used in it
    while proc.poll() is None:
        time.sleep(0.1)
        second = int(time.monotonic() - t0)
        for pid, (what, ticks) in all_ticks().items():
            known, had = seen.get(pid, ("?", before.get(pid, 0)))
            kind = known if known != "?" else what
            used = ticks - before.get(pid, 0)
            bucket = per_second.setdefault(second, {})
            bucket[kind] = bucket.get(kind, 0) + used - (had if pid in seen else 0)
            seen[pid] = (kind, used)
        total, idle = cpu_times()
        me = proc_ticks(proc.pid)
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
        busy = 1 - (idle - last_idle) / max(1, total - last_total)
        rows.append({"t": round(time.monotonic() - t0, 2), "busy_cpus": round(busy * ncpu, 2), "running": running,
                     "grader_cpus": round((me - last_self) / hz / 0.1, 2)})
        last_total, last_idle, last_self = total, idle, me
    by_kind: dict[str, float] = {}
    for what, ticks in seen.values():
        by_kind[what] = by_kind.get(what, 0.0) + ticks / hz
    by_second = {sec: {k: round(v / hz, 2) for k, v in kinds.items() if v} for sec, kinds in sorted(per_second.items())}
    with open(out, "w") as f:
        json.dump({"cpus": ncpu, "rc": proc.returncode, "rows": rows, "cpu_s_by_kind": by_kind,
                   "cpu_s_by_second": by_second}, f)
    print(f"cpus {ncpu}; per 0.5 s: t, busy CPUs, runnable, the grading process's CPUs")
    for k in range(0, len(rows), 5):
        part = rows[k:k + 5]
        print(f"  {part[0]['t']:5.1f} {sum(r['busy_cpus'] for r in part) / len(part):5.1f} "
              f"{max(r['running'] for r in part):3d} {sum(r['grader_cpus'] for r in part) / len(part):4.2f}")
    print("CPU seconds by process kind (sampled every 0.1 s; a process shorter than that may be missed):")
    ranked = [what for what, _s in sorted(by_kind.items(), key=lambda kv: -kv[1])]
    for what in ranked[:14]:
        print(f"  {by_kind[what]:6.2f}  {what}")
    top = ranked[:9]
    print("CPU seconds per second of the run, the busiest kinds: " + "; ".join(f"{k + 1}={w}" for k, w in enumerate(top)))
    for sec, kinds in by_second.items():
        print(f"  {sec:3d}s " + " ".join(f"{kinds.get(w, 0):5.2f}" for w in top)
              + f"  rest {sum(v for k, v in kinds.items() if k not in top):5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
