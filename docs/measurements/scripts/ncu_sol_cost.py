#!/usr/bin/env python3
"""What the Speed-of-Light throughputs cost one grading's Nsight Compute run (a GPU experiment for #32).

    python3 docs/measurements/scripts/ncu_sol_cost.py WORK OUT [--repeat 2]

WORK is a kept grading's work folder (``python -m grader grade solutions --keep-work``): its
``ncu/profile_spec.json`` and the kernels handed over at the profile child's gate. Each variant runs
the grader's own ncu command over the same kernels, with the grader's profile child (not gated),
outside the sandbox, and prints its wall time and ncu's replay passes:

- ``all``: every metric a grading collects (grader/profile/ncu.py: metrics_needed);
- ``nosol``: all but the four Speed-of-Light throughputs (SM, memory, L1, L2);
- ``items``: only the metrics the rubric's ncu items read;
- ``one``: gpu__time_duration.sum alone (ncu's fixed cost: start, one pass per kernel, the report).

The variants take turns (A B C D A B C D) after one unrecorded run. Writes OUT/ncu_sol_cost.json.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

SOL = ("sm__throughput.avg.pct_of_peak_sustained_elapsed",
       "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
       "l1tex__throughput.avg.pct_of_peak_sustained_active",
       "lts__throughput.avg.pct_of_peak_sustained_elapsed")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    from grader.compile import toolchain
    from grader.gpu.ncu_run import wanted_metrics
    from grader.profile.ncu import command, parse_raw_csv, rubric_metrics
    from grader.rubric.load import load_rubric
    from grader.sandbox.launch import child_env

    ncu_dir = args.work / "ncu"
    gated = json.loads((ncu_dir / "profile_spec.json").read_text())
    stages = json.loads((ncu_dir / "profile_result.json.launch.go").read_text())["stages"]
    exp = args.out / "ncu-sol"
    exp.mkdir(parents=True, exist_ok=True)
    spec_path = exp / "spec.json"
    spec_path.write_text(json.dumps({"n": gated["n"], "seed": gated["seed"], "stages": stages}))
    rubric = load_rubric(ROOT / "rubric.yaml")
    metrics, _absent, _chip = wanted_metrics(rubric, {"cc": [9, 0]})
    items = set(rubric_metrics(rubric))
    variants = {
        "all": metrics,
        "nosol": [m for m in metrics if m not in SOL],
        "items": [m for m in metrics if m in items],
        "one": ["gpu__time_duration.sum"],
    }
    tool = toolchain.find_ncu()
    env = child_env(exp / "cupy-cache")

    def once(name: str) -> dict:
        wrap = command(str(tool.path), [s["kernel"] for s in stages], variants[name], "none")
        cmd = [*wrap, sys.executable, "-m", "grader.children", "profile", str(spec_path), str(exp / f"r-{name}.json")]
        t0 = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        wall = time.monotonic() - t0
        table = parse_raw_csv(p.stdout)
        return {"variant": name, "metrics": len(variants[name]), "wall_s": round(wall, 2), "rc": p.returncode,
                "kernels": len(table), "passes": sorted({r.get("profiler__replayer_passes") for r in table.values()}),
                "durations_ns": {k: r.get("gpu__time_duration.sum") for k, r in table.items()},
                "problem": table.problem or (p.stderr[-300:] if p.returncode else "")}

    once("one")
    rows = []
    for k in range(args.repeat):
        for name in variants:
            row = {**once(name), "run": k + 1}
            rows.append(row)
            print(json.dumps({x: row[x] for x in ("variant", "run", "metrics", "wall_s", "passes", "kernels", "rc")}),
                  flush=True)
    (args.out / "ncu_sol_cost.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
