"""Print the wall-clock numbers the tests do not assert (docs/design.md, "Testing": no test asserts a
wall-clock time; speed is measured and recorded, not passed or failed on a shared machine).

    python docs/measurements/scripts/timing_claims.py [sandbox] [limits] [--runs N]

sandbox: seconds per fenced run of ``true`` (bwrap's cost per step; tests/test_fence.py checks that
  the runs succeed). limits: how long after its time limit a spinning child, a forked spinner and a
  child that closed its pipes are stopped (tests/test_sandbox.py checks that they are, and how).
Run it on an idle machine and record the numbers in docs/measurements/ with the machine's load.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from grader.sandbox.guard import Fence, run  # noqa: E402

SPIN = "while True: pass"
FORK_SPIN = "import os\nif os.fork() == 0:\n    import time\n    time.sleep(600)\nwhile True: pass"
CLOSED = "import os, time\nos.close(1); os.close(2)\ntime.sleep(600)"


def sandbox_cost(runs: int) -> None:
    true = shutil.which("true") or "/bin/true"
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "scratch"
        scratch.mkdir()
        run([true], timeout_s=30, fence=Fence(scratch=scratch))  # warm the page cache
        walls = []
        for _ in range(runs):
            t0 = time.monotonic()
            rec = run([true], timeout_s=30, fence=Fence(scratch=scratch))
            walls.append(time.monotonic() - t0)
            if rec.returncode != 0:
                print(f"sandbox: a fenced run failed: {rec.brief()}", file=sys.stderr)
                return
    print(f"sandbox: fenced `true`, {runs} runs: median {statistics.median(walls):.3f} s, "
          f"max {max(walls):.3f} s")


def limit_overshoot(runs: int) -> None:
    for name, code in (("spinner", SPIN), ("forked spinner", FORK_SPIN), ("closed pipes", CLOSED)):
        over = []
        for _ in range(runs):
            t0 = time.monotonic()
            rec = run([sys.executable, "-c", code], timeout_s=1.0)
            over.append(time.monotonic() - t0 - 1.0)
            if not rec.timed_out:
                print(f"limits: {name}: not stopped by its limit: {rec.brief()}", file=sys.stderr)
        print(f"limits: {name}, 1 s limit, {runs} runs: stopped {statistics.median(over):.3f} s after it "
              f"(median), {max(over):.3f} s at most")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", nargs="*", help="sandbox, limits (default: both)")
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    benches = {"sandbox": sandbox_cost, "limits": limit_overshoot}
    for what in args.what or list(benches):
        if what not in benches:
            p.error(f"{what!r} is not one of {', '.join(benches)}")
        benches[what](args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
