"""The steps of tests/test_stop_signals.py's test_a_batch_kills_what_a_grading_that_died_abruptly_left, N times:
a batch of two endless compiles, its first grading killed (SIGKILL) while nvcc runs; each run says how long the
grading's compile tree took to be gone, and, where it took over 3 s or outlived 15 s, who was left.

    CI=true .venv/bin/python docs/measurements/scripts/sweep_probe.py N     (from the repository root)
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def one(k: int) -> None:
    from tests.serve_helpers import cmdlines, describe, tree_of
    from tests.test_stop_signals import STATIC, alive, compiling, endless_export, identities

    tmp = Path(tempfile.mkdtemp(prefix=f"sweep-probe{k}-"))
    exp, out = endless_export(tmp / "export", 2), tmp / "out"
    proc = subprocess.Popen([sys.executable, "-m", "grader", "batch", str(exp), "--out", str(out), *STATIC, "--quiet",
                             "--trusted-submissions", "--workers", "1"], cwd=ROOT,
                            env={**os.environ, "GRADER_SANDBOX": "weak"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        tree = compiling(proc)
        live = cmdlines()
        grading = next(pid for pid in tree if "-m grader grade " in live.get(pid, ""))
        compile_tree = identities(tree_of(grading) - {grading})
        t0 = time.monotonic()
        os.kill(grading, signal.SIGKILL)
        while alive(compile_tree) and time.monotonic() - t0 < 15:
            time.sleep(0.1)
        took, left = time.monotonic() - t0, alive(compile_tree)
        if took > 3 or left:
            print(f"run {k}: batch {proc.pid} grading {grading} tree {sorted(compile_tree)} took {took:.1f} s; "
                  f"left {describe(left)}", flush=True)
        else:
            print(f"run {k}: ok {took:.2f} s", flush=True)
    finally:
        proc.kill()
        proc.wait()
        subprocess.run(["pkill", "-9", "-f", str(tmp)], check=False)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    for k in range(int(sys.argv[1])):
        one(k)
