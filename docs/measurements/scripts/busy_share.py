#!/usr/bin/env python3
"""The machine's busy share of all CPUs, every 2 s, until killed: one line "SECONDS PERCENT LAST_PID" per sample
(LAST_PID: /proc/sys/kernel/ns_last_pid, the pid the kernel handed out last, so that how fast pids go round
pid_max can be read off the run).

    python3 docs/measurements/scripts/busy_share.py OUT.txt &   # start it just before the run, kill it after

Busy is everything but idle and iowait in /proc/stat's first line, so it counts every process of the machine:
also those no `/usr/bin/time` of the run sees (a sandbox's processes killed at a limit and reaped by no one it
waits for, daemons), and the machine's own. Run it on an otherwise idle machine.
"""
from __future__ import annotations

import sys
import time


def _read() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return sum(fields), fields[3] + fields[4]


def main(out_path: str, every_s: float = 2.0) -> None:
    t0 = time.monotonic()
    last = _read()
    with open(out_path, "w") as out:
        while True:
            time.sleep(every_s)
            now = _read()
            total, idle = now[0] - last[0], now[1] - last[1]
            with open("/proc/sys/kernel/ns_last_pid") as f:
                last_pid = f.read().strip()
            out.write(f"{time.monotonic() - t0:.0f} {100 * (1 - idle / max(total, 1)):.0f} {last_pid}\n")
            out.flush()
            last = now


if __name__ == "__main__":
    main(sys.argv[1])
