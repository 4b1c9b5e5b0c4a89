#!/usr/bin/env bash
# The batch's speed-up from two GPUs over one, on a machine with at least two GPUs.
#
#   bash tools/batch_speedup.sh [N] [WORKDIR]        (defaults: 24, /tmp/batch-speedup)
#
# Generates an export of N submissions (tools/make_demo_export.py: solutions, starter,
# compile errors, wrong names, nested folders), grades it with CUDA_VISIBLE_DEVICES=0 (one worker)
# and with CUDA_VISIBLE_DEVICES=0,1 (two workers), then prints both wall times, the speed-up, and
# whether the two grades.csv agree (status and every non-timing item; totals within 1 point, as
# speed items near a threshold may flip). Full grading: correctness, timing, ncu, occupancy.
# GRADER_PYTHON picks the interpreter (default python3); extra batch options go after `--`:
#   bash tools/batch_speedup.sh 24 /tmp/bs -- --timeout 900
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
n="${1:-24}"
work="${2:-/tmp/batch-speedup}"
shift $(($# >= 2 ? 2 : $#))
[[ "${1:-}" == -- ]] && shift
py="${GRADER_PYTHON:-python3}"

gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
if [[ "${gpus:-0}" -lt 2 ]]; then
    echo "batch_speedup: needs at least 2 GPUs (nvidia-smi -L lists ${gpus:-0})" >&2
    exit 2
fi
rm -rf -- "$work"
"$py" tools/make_demo_export.py "$work/export" --n "$n"
CUDA_VISIBLE_DEVICES=0 "$py" -m grader batch --out "$work/one-gpu" "$@" -- "$work/export"
CUDA_VISIBLE_DEVICES=0,1 "$py" -m grader batch --out "$work/two-gpus" "$@" -- "$work/export"

"$py" - "$work" <<'EOF'
import csv, json, sys
from pathlib import Path

work = Path(sys.argv[1])
runs = {}
for name in ("one-gpu", "two-gpus"):
    info = json.loads((work / name / "batch.json").read_text())
    with open(work / name / "grades.csv", newline="") as f:
        rows = {r["folder"]: r for r in csv.DictReader(f)}
    runs[name] = (info, rows)
(one, rows1), (two, rows2) = runs["one-gpu"], runs["two-gpus"]
print(f"submissions: {one['submissions']}; GPUs: {one['gpus']} vs {two['gpus']}")
print(f"one GPU:  {one['wall_s']:.1f} s ({one['workers']} worker)")
print(f"two GPUs: {two['wall_s']:.1f} s ({two['workers']} workers)")
print(f"speed-up: {one['wall_s'] / two['wall_s']:.2f}x")
timing = ("speed", "beats_fp32", "sweep", "fastest")
diffs = []
for folder, r1 in rows1.items():
    r2 = rows2.get(folder, {})
    if r1["status"] != r2.get("status"):
        diffs.append(f"{folder}: status {r1['status']} vs {r2.get('status')}")
        continue
    for col, v1 in r1.items():
        if col.startswith("leaderboard: ") or any(t in col for t in timing) or col in ("total",):
            continue
        if col not in ("created_at", "note") and v1 != r2.get(col):
            diffs.append(f"{folder}: {col} {v1} vs {r2.get(col)}")
    if r1["total"] and r2.get("total") and abs(float(r1["total"]) - float(r2["total"])) > 1:
        diffs.append(f"{folder}: total {r1['total']} vs {r2['total']}")
print("grades agree" if not diffs else "grades differ:\n  " + "\n  ".join(diffs))
failed = one["failed"] + two["failed"]
print("failed gradings: " + (", ".join(failed) if failed else "none"))
EOF
