"""What watching fenced steps costs the grading process: N steps at once, each a sleeping Python
under the sandbox's fence, timed with each way the watchdog finds a step's processes.

    python docs/measurements/scripts/watch_cost.py [N] [SECONDS]      (defaults: 16 steps of 3 s)

Prints one JSON line per tree reader: the grading process's own CPU seconds (user + system) over
the run, the wall time, whether this kernel has /proc/PID/task/TID/children, and how many processes
/proc listed at the start. "children_files" is skipped where the kernel lacks them.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from grader.sandbox import guard as sandbox  # noqa: E402
from grader.sandbox import limits  # noqa: E402
from grader.sandbox.fence import Fence  # noqa: E402


def measure(n: int, seconds: float, reader: str) -> dict:
    limits._HAS_CHILDREN_FILES = reader == "children_files"
    with tempfile.TemporaryDirectory(prefix="watch-cost-") as tmp:
        folders = [Path(tmp) / str(i) for i in range(n)]
        for f in folders:
            f.mkdir()

        def one(folder: Path) -> None:
            sandbox.run([sys.executable, "-c", f"import time; time.sleep({seconds})"], timeout_s=seconds + 60,
                        fence=Fence(scratch=folder), output_limit=1000)

        before = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.monotonic()
        threads = [threading.Thread(target=one, args=(f,)) for f in folders]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"reader": reader, "steps": n, "step_s": seconds, "wall_s": round(time.monotonic() - t0, 2),
            "grader_cpu_s": round(cpu, 2)}


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    has_files = limits._HAS_CHILDREN_FILES
    processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
    print(json.dumps({"children_files": has_files, "processes": processes, "cpus": os.cpu_count(),
                      "sandbox": sandbox.mode().describe()}))
    for reader in (["children_files"] if has_files else []) + ["process_table"]:
        print(json.dumps(measure(n, seconds, reader)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
