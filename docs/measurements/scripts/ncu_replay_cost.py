#!/usr/bin/env python3
"""Where one grading's Nsight Compute time goes, kernel by kernel (a GPU experiment for #32).

    python3 docs/measurements/scripts/ncu_replay_cost.py WORK OUT [--repeat 2]

WORK is a kept grading's work folder (``python -m grader grade solutions --keep-work``). Each variant
runs the grader's ncu command (grader/profile/ncu.py: command) over the kernels handed to that
grading's profile child, with the grader's profile child, outside the sandbox. ncu's stdout is read
line by line as it comes: the time between one ``==PROF== Profiling "k"`` line and the next is what
that kernel's replays cost; the time before the first is ncu's and the child's start (hidden in a
grading, where the child waits at its gate), the time after the last is the report.

Variants: ``all`` (a grading's metrics), ``nosol`` (without the four Speed-of-Light throughputs),
``nosol+SM`` (with sm__throughput alone back), ``cc-none`` (``all`` with ``--cache-control none``),
``one`` (gpu__time_duration.sum alone). They take turns after one unrecorded run. The
throughputs' values of ``all`` and ``cc-none`` are printed side by side. Writes OUT/ncu_replay_cost.json.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

PROFILING = re.compile(r'==PROF== Profiling "([^"]+)"')
PASSES = re.compile(r"- (\d+) pass")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("work", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    from grader.compile import toolchain
    from grader.gpu.ncu_run import wanted_metrics
    from grader.profile import diagnosis as D
    from grader.profile.ncu import command, parse_raw_csv
    from grader.rubric.load import load_rubric
    from grader.sandbox.launch import child_env

    ncu_dir = args.work / "ncu"
    gated = json.loads((ncu_dir / "profile_spec.json").read_text())
    stages = json.loads((ncu_dir / "profile_result.json.launch.go").read_text())["stages"]
    exp = args.out / "ncu-replay"
    exp.mkdir(parents=True, exist_ok=True)
    spec_path = exp / "spec.json"
    spec_path.write_text(json.dumps({"n": gated["n"], "seed": gated["seed"], "stages": stages}))
    rubric = load_rubric(ROOT / "rubric.yaml")
    metrics, _absent, _chip = wanted_metrics(rubric, {"cc": [9, 0]})
    sol = (D.SM, D.MEM, D.L1, D.L2)
    nosol = [m for m in metrics if m not in sol]
    variants = {"all": (metrics, "none"), "nosol": (nosol, "none"), "nosol+SM": (nosol + [D.SM], "none"),
                "cc-none": (metrics, "none"), "one": (["gpu__time_duration.sum"], "none")}
    tool = toolchain.find_ncu()
    env = child_env(exp / "cupy-cache")

    def once(name: str) -> dict:
        chosen, clock = variants[name]
        wrap = command(str(tool.path), [s["kernel"] for s in stages], chosen, clock)
        if name == "cc-none":
            wrap = [*wrap[:1], "--cache-control", "none", *wrap[1:]]
        cmd = [*wrap, sys.executable, "-m", "grader.children", "profile", str(spec_path), str(exp / f"r-{name}.json")]
        lines: list[tuple[float, str]] = []
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        err_chunks: list[str] = []
        reader = threading.Thread(target=lambda: err_chunks.append(p.stderr.read()))  # type: ignore[union-attr]
        reader.start()
        out_lines = []
        for line in p.stdout:  # type: ignore[union-attr]  # ncu's ==PROF== lines come on stdout, before its table
            lines.append((time.monotonic() - t0, line.rstrip()))
            out_lines.append(line)
        p.wait()
        reader.join()
        lines += [(time.monotonic() - t0, s) for s in "".join(err_chunks).splitlines()]
        wall = time.monotonic() - t0
        marks = [(t, m.group(1), int(pm.group(1)) if (pm := PASSES.search(s)) else None)
                 for t, s in lines if (m := PROFILING.search(s))]
        per_kernel = []
        for k, (t, kern, npass) in enumerate(marks):
            start = marks[k - 1][0] if k else None
            per_kernel.append({"kernel": kern, "passes": npass, "done_at_s": round(t, 3),
                               "seconds": round(t - start, 3) if start is not None else None})
        table = parse_raw_csv("".join(out_lines))
        values = {k: {m: r.get(m) for m in (*sol, D.DRAM, D.FMA, D.TENSOR, "gpu__time_duration.sum")}
                  for k, r in table.items()}
        return {"variant": name, "metrics": len(chosen), "wall_s": round(wall, 2), "rc": p.returncode,
                "first_done_s": marks[0][0] if marks else None, "last_done_s": marks[-1][0] if marks else None,
                "per_kernel": per_kernel, "values": values,
                "problem": table.problem or ("\n".join(s for _t, s in lines[-5:]) if p.returncode else "")}

    once("one")
    rows = []
    for k in range(args.repeat):
        for name in variants:
            row = {**once(name), "run": k + 1}
            rows.append(row)
            span = (row["last_done_s"] or 0) - (row["first_done_s"] or 0)
            print(f"{name:9s} run {k + 1}: wall {row['wall_s']:.2f} s, first kernel done {row['first_done_s'] or 0:.2f} s, "
                  f"first->last {span:.2f} s, rc {row['rc']}; "
                  + " ".join(f"{pk['kernel'][:14]}={pk['seconds']}({pk['passes']})" for pk in row["per_kernel"]),
                  flush=True)
    by = {r["variant"]: r for r in rows if r["run"] == 1}
    for kern, vals in (by.get("all") or {}).get("values", {}).items():
        other = by.get("cc-none", {}).get("values", {}).get(kern, {})
        print(f"  {kern[:24]:24s} " + " ".join(f"{m.split('__')[0]}:{vals.get(m)}/{other.get(m)}" for m in vals))
    (args.out / "ncu_replay_cost.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
