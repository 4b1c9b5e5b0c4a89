"""What a CUDA context costs to make, alone, beside a context kept open, and beside another GPU's.

    python3 docs/measurements/scripts/context_cost.py [--reps 10] [--burst 12] [--gpus 0,1]

Each measured child is a fresh Python process that opens the driver (grader/children/driver.py),
makes GPU A's primary context, allocates and frees 64 MiB and exits: the part of every grading
child's start-up that goes through the driver. Printed as one JSON object, per scenario, the
seconds from spawning a child to its exit (median, min, max over ``--reps`` children in a row) and,
for a burst of ``--burst`` children started at once (a grading's start after it takes the GPU's
lock), the seconds until the last one ended:

- ``alone``: nothing else on the host;
- ``kept``: a keeper process holds a context on GPU A the whole time (no kernels, no work);
- ``other_busy``: GPU B runs children in a loop meanwhile, nothing kept;
- ``other_busy_kept``: the same, with a keeper on each GPU.

Without persistence mode the driver sets a GPU up when the first client opens it and tears it
down when the last one leaves; a context kept open keeps it set up. ``nvidia-smi``'s persistence
mode is printed too. Needs at least two GPUs for the ``other_busy`` scenarios (else they are
skipped). Touches no GPU setting.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHILD = ("import time; t = time.perf_counter()\n"
         "from grader.children.driver import Driver\n"
         "d = Driver(); d.start(0); p = d.alloc(64 << 20); d.free(p)\n"
         "print(round(time.perf_counter() - t, 4))\n")
KEEPER = ("import sys, time\nfrom grader.children.driver import Driver\n"
          "d = Driver(); d.start(0); print('ready', flush=True); sys.stdin.read()\n")


def _env(gpu: str) -> dict[str, str]:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": gpu, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTHONPATH": str(ROOT)}


def _child(gpu: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", CHILD], env=_env(gpu), check=True, capture_output=True)
    return time.perf_counter() - t0


def _burst(gpu: str, n: int) -> float:
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], env=_env(gpu), stdout=subprocess.DEVNULL)
             for _ in range(n)]
    for p in procs:
        p.wait()
    return time.perf_counter() - t0


class Keeper:
    def __init__(self, gpu: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", KEEPER], env=_env(gpu), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class Loop:
    """Children on GPU ``gpu``, one after another, until stopped."""

    def __init__(self, gpu: str) -> None:
        self.stop, self.count = threading.Event(), 0
        self.thread = threading.Thread(target=self._run, args=(gpu,), daemon=True)
        self.thread.start()

    def _run(self, gpu: str) -> None:
        while not self.stop.is_set():
            _child(gpu)
            self.count += 1

    def close(self) -> int:
        self.stop.set()
        self.thread.join()
        return self.count


def scenario(a: str, b: str | None, keep: bool, reps: int, burst: int) -> dict:
    keepers = [Keeper(g) for g in ([a] + ([b] if b else [])) if keep]
    loop = Loop(b) if b else None
    try:
        time.sleep(0.5)
        singles = [_child(a) for _ in range(reps)]
        bursts = [_burst(a, burst) for _ in range(3)]
    finally:
        others = loop.close() if loop else None
        for k in keepers:
            k.close()
    return {"child_s": {"median": round(statistics.median(singles), 3), "min": round(min(singles), 3),
                        "max": round(max(singles), 3)},
            f"burst_of_{burst}_s": [round(x, 3) for x in bursts],
            **({"other_gpu_children": others} if others is not None else {})}


def persistence() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,persistence_mode", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    return "; ".join(line.strip() for line in out.splitlines() if line.strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--burst", type=int, default=12)
    ap.add_argument("--gpus", default=os.environ.get("CUDA_VISIBLE_DEVICES", "0,1"))
    args = ap.parse_args()
    gpus = [g for g in args.gpus.split(",") if g]
    a, b = gpus[0], (gpus[1] if len(gpus) > 1 else None)
    result: dict = {"persistence_mode": persistence(), "gpu": a, "other_gpu": b}
    result["alone"] = scenario(a, None, False, args.reps, args.burst)
    result["kept"] = scenario(a, None, True, args.reps, args.burst)
    if b is not None:
        result["other_busy"] = scenario(a, b, False, args.reps, args.burst)
        result["other_busy_kept"] = scenario(a, b, True, args.reps, args.burst)
    result["alone_again"] = scenario(a, None, False, args.reps, args.burst)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
