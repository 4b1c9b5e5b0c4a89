#!/usr/bin/env bash
# The batch's speed-up from several GPUs over one, and how busy each GPU was.
#
#   bash tools/batch_speedup.sh [N] [GPUS] [-- batch options...]     (defaults: 24, $CUDA_VISIBLE_DEVICES or 0,1)
#
# Generates an export of N submissions (tools/make_demo_export.py: solutions, starter, compile
# errors, wrong names, nested folders, in turn), grades it on the first GPU of GPUS, then on all of
# them (full grading: correctness, timing, sanitizers, ncu, occupancy; two gradings per GPU sharing
# its lock, grader/deploy/batch/), and prints one JSON object: each run's wall time, workers and
# per-GPU busy share (the time gradings held the GPU's lock over the batch's wall time), the
# speed-up, and whether the runs' grades.csv agree (status and every non-timing item; totals within
# 1 point, as speed items near a threshold may flip).
#
# Before the first batch one grading of solutions/ on the first GPU warms the machine (CuPy's kernel
# cache, made once per machine: about 10 s on an H200; grader/gpu/warm.py), so neither batch pays
# a one-time cost the other does not; WARM=0 skips it. Its seconds are in the JSON (warm_up_s).
# The run on all GPUs starts the longest gradings first, by the times of the one-GPU run
# (--times-from); LONGEST_FIRST=0 switches that off. The JSON says which.
# Everything goes under $OUT (default /tmp/batch-speedup): export/, gpus-1/, gpus-K/ (with their
# logs), speedup.json. RUNS=one or RUNS=all runs only one of the two batches (default: both), for
# splitting the measurement over two commands that share a WORK folder (WORK=DIR; default $OUT):
# the JSON is printed once both batches are there. GRADER_PYTHON picks the interpreter (default
# python3). Example, two GPUs, a per-submission limit:
#   OUT=/tmp/bs bash tools/batch_speedup.sh 24 0,1 -- --timeout 300
set -euo pipefail
cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.."
n=24
gpus="${CUDA_VISIBLE_DEVICES:-0,1}"
[[ $# -gt 0 && "$1" != -- ]] && { n="$1"; shift; }
[[ $# -gt 0 && "$1" != -- ]] && { gpus="$1"; shift; }
[[ "${1:-}" == -- ]] && shift
py="${GRADER_PYTHON:-python3}"
out="${WORK:-${OUT:-/tmp/batch-speedup}}"
runs="${RUNS:-one all}"
first="${gpus%%,*}"
count=$(tr ',' '\n' <<<"$gpus" | grep -c .)

listed="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
if [[ "${listed:-0}" -lt "$count" || "$count" -lt 2 ]]; then
    echo "batch_speedup: asked for GPUs $gpus ($count); nvidia-smi -L lists ${listed:-0}; at least 2 needed" >&2
    exit 2
fi
mkdir -p "$out"
if [[ " $runs " == *" one "* || ! -d "$out/export" ]]; then
    rm -rf -- "$out/export" "$out/gpus-1" "$out/gpus-$count"
    "$py" tools/make_demo_export.py "$out/export" --n "$n" >&2
fi
if [[ " $runs " == *" one "* && "${WARM:-1}" == 1 ]]; then
    t0=$(date +%s.%N)
    rm -rf -- "$out/warm-up"
    CUDA_VISIBLE_DEVICES="$first" "$py" -m grader grade solutions --out "$out/warm-up" --quiet >"$out/warm-up.log" 2>&1 \
        || echo "batch_speedup: the warm-up grading failed (see $out/warm-up.log)" >&2
    "$py" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$t0" "$(date +%s.%N)" \
        > "$out/warm-up.seconds"
fi
if [[ " $runs " == *" one "* ]]; then
    CUDA_VISIBLE_DEVICES="$first" "$py" -m grader batch --out "$out/gpus-1" "$@" -- "$out/export" \
        2>&1 | tee "$out/gpus-1.log" >&2
fi
if [[ " $runs " == *" all "* ]]; then
    order=()
    [[ "${LONGEST_FIRST:-1}" == 1 && -d "$out/gpus-1" ]] && order=(--times-from "$out/gpus-1")
    rm -rf -- "$out/gpus-$count"
    CUDA_VISIBLE_DEVICES="$gpus" "$py" -m grader batch --out "$out/gpus-$count" "${order[@]}" "$@" \
        -- "$out/export" 2>&1 | tee "$out/gpus-$count.log" >&2
fi
if [[ ! -f "$out/gpus-1/batch.json" || ! -f "$out/gpus-$count/batch.json" ]]; then
    echo "batch_speedup: one of the two batches is still to run (RUNS=one, RUNS=all)" >&2
    exit 0
fi

"$py" - "$out" "$count" <<'EOF'
import csv, json, sys
from pathlib import Path

out, count = Path(sys.argv[1]), sys.argv[2]
runs = {}
for name in ("gpus-1", f"gpus-{count}"):
    info = json.loads((out / name / "batch.json").read_text())
    with open(out / name / "grades.csv", newline="") as f:
        rows = {r["folder"]: r for r in csv.DictReader(f)}
    runs[name] = (info, rows)
(one, rows1), (many, rows2) = runs["gpus-1"], runs[f"gpus-{count}"]
timing = ("speed", "beats_fp32", "sweep", "fastest")
diffs = []
for folder, r1 in rows1.items():
    r2 = rows2.get(folder, {})
    if r1["status"] != r2.get("status"):
        diffs.append(f"{folder}: status {r1['status']} vs {r2.get('status')}")
        continue
    for col, v1 in r1.items():
        if col.startswith("leaderboard: ") or any(t in col for t in timing) or col in ("total", "created_at", "note"):
            continue
        if v1 != r2.get(col):
            diffs.append(f"{folder}: {col} {v1} vs {r2.get(col)}")
    if r1["total"] and r2.get("total") and abs(float(r1["total"]) - float(r2["total"])) > 1:
        diffs.append(f"{folder}: total {r1['total']} vs {r2['total']}")


def run(info: dict) -> dict:
    held = {g: round(sum(r.get("gpu_held_s", 0) for r in info["records"] if r.get("gpu") == g), 1)
            for g in info["gpus"]}
    return {"gpus": info["gpus"], "workers": info["workers"], "wall_s": info["wall_s"],
            "gpu_busy": info.get("gpu_busy"), "gpu_held_s": held, "longest_first": info.get("longest_first"),
            "failed": info["failed"], "graded": info["graded_now"]}


warm = out / "warm-up.seconds"
report = {"submissions": one["submissions"], "one_gpu": run(one), "all_gpus": run(many),
          "warm_up_s": float(warm.read_text()) if warm.is_file() else None,
          "speedup": round(one["wall_s"] / many["wall_s"], 3) if many["wall_s"] else None,
          "grades_agree": not diffs, "differences": diffs[:40]}
(out / "speedup.json").write_text(json.dumps(report, indent=1) + "\n")
print(json.dumps(report, indent=1))
EOF
