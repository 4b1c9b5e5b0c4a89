#!/usr/bin/env python3
"""The CPU of a command's whole process tree, the processes killed at a limit included.

    python3 docs/measurements/scripts/tree_cpu.py -- COMMAND...

`/usr/bin/time` and pytest's per-test plugin (cpu_per_test.py) count a process's CPU only once a parent in the
tree reaps it; a compile killed at its limit (its cc1plus, under bubblewrap's own init, killed with the
fence's whole tree) is reaped by no one the command waits for, so its CPU shows in neither. Here every 0.1 s
the descendants of the command (by /proc's parent links, at the moment of the sample) are read
(/proc/PID/stat utime + stime) and each process's last reading is kept; at the end: the command's wall, its
reaped CPU (getrusage of the children) and the tree's CPU as sampled (every process seen, at most the last
0.1 s of each missing), in all and by program name, the largest first.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, str, int, float] | None:
    """(ppid, name, starttime, CPU seconds) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    head, _, tail = raw.rpartition(b")")
    name = head.partition(b"(")[2].decode(errors="replace")
    fields = tail.split()
    return int(fields[1]), name, int(fields[19]), (int(fields[11]) + int(fields[12])) / TICK


def main(argv: list[str]) -> int:
    cmd = argv[argv.index("--") + 1:] if "--" in argv else argv
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd)
    seen: dict[tuple[int, int], tuple[str, float]] = {}
    while proc.poll() is None:
        table = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                st = _stat(pid)
                if st is not None:
                    table[int(pid)] = st
        for pid, (ppid, name, start, cpu) in table.items():
            p, depth = (proc.pid if pid == proc.pid else ppid), 0
            while p not in (0, 1, proc.pid) and p in table and depth < 64:
                p, depth = table[p][0], depth + 1
            if p == proc.pid:
                seen[(pid, start)] = (name, cpu)
        time.sleep(0.1)
    wall = time.monotonic() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    by_name: dict[str, float] = {}
    for name, cpu in seen.values():
        by_name[name] = by_name.get(name, 0.0) + cpu
    total = sum(by_name.values())
    print(f"tree_cpu: wall {wall:.1f} s, reaped CPU {ru.ru_utime + ru.ru_stime:.1f} s "
          f"({ru.ru_utime:.1f} user + {ru.ru_stime:.1f} sys), sampled tree CPU {total:.1f} s "
          f"({len(seen)} processes, the command's own included)", file=sys.stderr)
    for name, cpu in sorted(by_name.items(), key=lambda kv: -kv[1])[:8]:
        print(f"tree_cpu:   {name}: {cpu:.1f} s", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
