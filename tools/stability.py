"""Grade a submission several times on this GPU and report the spread of every threshold value.

python3 tools/stability.py [SUBMISSION] [--runs 5] [--out DIR]

Issue B's bar: every threshold item passes in every run, and each stage's %-of-cuBLAS spread
(max - min over the runs) stays within 1.5 points. Prints a table and writes stability.json.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("submission", nargs="?", default=str(ROOT / "solutions"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default="/tmp/stability")
    ap.add_argument("--stages", default=None)
    args = ap.parse_args()
    out = Path(args.out)
    runs = []
    for i in range(args.runs):
        d = out / f"run{i + 1}"
        cmd = [sys.executable, str(ROOT / "grader" / "run_local.py"), args.submission, "--out", str(d), "--quiet"]
        if args.stages:
            cmd += ["--stages", args.stages]
        t0 = time.time()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        detail = json.loads((d / "grading.json").read_text())
        results = json.loads((d / "results.json").read_text())
        runs.append({"rc": proc.returncode, "seconds": round(time.time() - t0, 1), "score": results["score"],
                     "stages": {sid: st.get("timing") for sid, st in detail["stages"].items()},
                     "items": {t["number"]: (t["extra_data"]["status"], t.get("score"), t.get("max_score"))
                               for t in results["tests"]}})
        print(f"run {i + 1}: rc {proc.returncode}, score {results['score']}, {runs[-1]['seconds']} s", flush=True)
    stages = list(runs[0]["stages"])
    print(f"\n{'stage':16}{'% baseline per run':>44}{'spread':>8}{'TFLOP/s':>9}")
    table = {}
    for sid in stages:
        vals = [100 * r["stages"][sid]["fraction_of_baseline"] for r in runs if r["stages"].get(sid)]
        tfl = [r["stages"][sid]["tflops"] for r in runs if r["stages"].get(sid)]
        if not vals:
            print(f"{sid:16}{'not timed':>44}")
            continue
        spread = max(vals) - min(vals)
        table[sid] = {"pct_of_baseline": vals, "spread_points": spread, "tflops": tfl}
        print(f"{sid:16}{' '.join(f'{v:6.1f}' for v in vals):>44}{spread:8.2f}{sum(tfl) / len(tfl):9.2f}")
    failing = sorted({num for r in runs for num, (st, sc, mx) in r["items"].items() if st != "passed"})
    print("\nitems not passed in some run:", failing or "none")
    (out / "stability.json").write_text(json.dumps({"runs": runs, "table": table, "not_passed": failing}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
