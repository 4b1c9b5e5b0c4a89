"""One line per grading for a device run's log: score, bonus, wall time, % of the baseline per stage,
and every automatic item that did not earn all its points.

    python docs/measurements/scripts/summarize_grading.py OUT_DIR NAME RC T0 T1
"""
import json
import sys
from pathlib import Path

out, name, rc = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
secs = float(sys.argv[5]) - float(sys.argv[4])
try:
    r = json.loads((out / "results.json").read_text())
except (OSError, ValueError) as exc:
    print(f"{name}: rc {rc}, no results.json ({exc})")
    sys.exit(0)
speeds, short = [], []
for t in r["tests"]:
    extra = t.get("extra_data") or {}
    v = extra.get("values") or {}
    num = t.get("number", "")
    if "fraction_of_baseline" in v:
        speeds.append(f"{num.split('.')[0]}={100 * v['fraction_of_baseline']:.1f}%")
    elif "tflops" in v:
        speeds.append(f"{num.split('.')[0]}={v['tflops']:.1f}TF({v.get('ratio', 0):.2f}x)")
    got, top = t.get("score", 0), t.get("max_score")
    if "bonus" in extra:
        got, top = extra.get("bonus_points", 0), extra.get("bonus_max", 0)
    if top and got < top - 1e-9:
        val = v.get("value", v.get("fraction_of_baseline", v.get("ratio", "")))
        val = f"{val:.4g}" if isinstance(val, float) else val
        short.append(f"{num}:{got:g}/{top:g}[{t.get('status')}{' ' + str(val) if val != '' else ''}]")
bonus = [t["extra_data"] for t in r["tests"] if "bonus" in (t.get("extra_data") or {})]
b = f" bonus {sum(x['bonus_points'] for x in bonus):g}/{sum(x['bonus_max'] for x in bonus):g}" if bonus else ""
wall = f"{secs:.1f} s" if secs > 0 else f"{r.get('execution_time', 0):.1f} s (grading)"
print(f"{name}: rc {rc}, {r.get('score')}{b}, {wall}; {' '.join(speeds)}; short: {' '.join(short) or 'none'}")
