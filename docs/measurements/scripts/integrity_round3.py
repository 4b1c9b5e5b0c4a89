"""Issue #43 round 3's numbers from one grading's grading.json: the score, and per stage the % of the
baseline, the timed median, each warm-up's time against it, the profile-size comparison
(grader/profile/agreement.py) and the stage's bench phase; then every phase of the grading.

    python docs/measurements/scripts/integrity_round3.py OUT_DIR NAME
"""
import json
import statistics
import sys
from pathlib import Path

out, name = Path(sys.argv[1]), sys.argv[2]
try:
    d = json.loads((out / "grading.json").read_text())
except (OSError, ValueError) as exc:
    print(f"{name}: no grading.json ({exc})")
    sys.exit(0)
print(f"== {name}: score {d.get('score')} / {d.get('max_score')}, {d.get('seconds', 0):.2f} s, "
      f"device {(d.get('device') or {}).get('name')}")
for sid, o in (d.get("stages") or {}).items():
    t, b, a = o.get("timing") or {}, o.get("bench") or {}, o.get("agreement") or {}
    med = t.get("median_ms")
    warm = b.get("warmup_ms") or []
    prof = b.get("profile_ms") or []
    line = f"  {sid}: verdict {o.get('verdict')}"
    if med:
        line += (f", {100 * t['fraction_of_baseline']:.1f}% of baseline ({med:.3f} ms vs {t['baseline_median_ms']:.3f} ms,"
                 f" {t['tflops']:.1f} TFLOP/s, {t['reps']} reps)")
        line += ", warm-up/median " + ("/".join(f"{w / med:.2f}" for w in warm) or "none")
    if prof:
        line += f", at N={b.get('profile_n')}: {'/'.join(f'{p:.3f}' for p in prof)} ms (median {statistics.median(prof):.3f})"
    if a:
        line += (f", ncu {a['ncu_ms']:.3f} ms: duration ratio {a['duration_ratio']:.3f}, rate ratio "
                 f"{a['rate_ratio']:.3f}{' PROBLEM' if a.get('problem') else ''}")
    elif o.get("ncu_gap"):
        line += f", ncu gap: {o['ncu_gap'].get('message', '')[:200]}"
    print(line)
for it in d.get("items") or []:
    if it.get("score", 0) < it.get("max_score", 0) - 1e-9:
        print(f"  short: {it.get('number')} {it.get('status')} {it.get('score')}/{it.get('max_score')}: "
              f"{(it.get('message') or '')[:300]}")
for p in d.get("phases") or []:
    print(f"  phase {p['name']}{'[' + p['stage'] + ']' if p.get('stage') else ''}: {p['seconds']:.3f} s")
