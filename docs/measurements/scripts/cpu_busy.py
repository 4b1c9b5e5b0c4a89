#!/usr/bin/env python3
"""Sample the host's CPU use while a command runs (a GPU-machine experiment for #32).

    python3 docs/measurements/scripts/cpu_busy.py OUT.json -- COMMAND...

Every 0.1 s: the busy share of all CPUs (/proc/stat), the number of runnable processes
(/proc/loadavg's running count) and the grading process's own CPU share (the command's pid,
/proc/PID/stat utime+stime, which counts every thread of it); then a compact table of 0.5 s bins.
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


def main() -> int:
    out, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    hz, ncpu = os.sysconf("SC_CLK_TCK"), os.cpu_count() or 1
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd)
    rows = []
    last_total, last_idle = cpu_times()
    last_self = proc_ticks(proc.pid)
    while proc.poll() is None:
        time.sleep(0.1)
        total, idle = cpu_times()
        me = proc_ticks(proc.pid)
        with open("/proc/loadavg") as f:
            running = int(f.read().split()[3].split("/")[0])
        busy = 1 - (idle - last_idle) / max(1, total - last_total)
        rows.append({"t": round(time.monotonic() - t0, 2), "busy_cpus": round(busy * ncpu, 2), "running": running,
                     "grader_cpus": round((me - last_self) / hz / 0.1, 2)})
        last_total, last_idle, last_self = total, idle, me
    with open(out, "w") as f:
        json.dump({"cpus": ncpu, "rc": proc.returncode, "rows": rows}, f)
    print(f"cpus {ncpu}; per 0.5 s: t, busy CPUs, runnable, the grading process's CPUs")
    for k in range(0, len(rows), 5):
        part = rows[k:k + 5]
        print(f"  {part[0]['t']:5.1f} {sum(r['busy_cpus'] for r in part) / len(part):5.1f} "
              f"{max(r['running'] for r in part):3d} {sum(r['grader_cpus'] for r in part) / len(part):4.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
