#!/bin/bash
# Issue #43 round 3 (GPU half), one device call, run from the repository root of this branch's tree:
#   1. grade tests/submissions/predict_precompute with this branch's grader;
#   2. grade solutions/ with main's grader (../ : the tree the call was sent from) and with this branch's;
#      then tests/submissions/n_branch_timed_path with this branch's;
#   3. the GPU tests touched: tests/test_hostile.py's GPU verdicts of those two cases.
# Logs go under $OUT; docs/measurements/2026-12-06-integrity-round3.md records the numbers.
set -u
BR=$PWD
log() { echo "[$(date -u +%H:%M:%S)] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
summ() { python3 docs/measurements/scripts/integrity_round3.py "$1" "$2" | tee -a "$OUT/summary.txt"; }
grade() {  # grade ROOT SUB OUTNAME [extra...]
  local root=$1 sub=$2 name=$3; shift 3
  log "grade $name ($root)"
  local t0=$(date +%s.%N)
  (cd "$root" && PYTHONPATH=/tmp/site:$root timeout 150 python3 -m grader grade "$sub" --out "$OUT/$name" --quiet "$@") > "$OUT/$name.log" 2>&1
  local rc=$? t1=$(date +%s.%N)
  echo "$name: rc $rc, wall $(python3 -c "print(round($t1 - $t0, 2))") s" | tee -a "$OUT/summary.txt"
  rm -rf "$OUT/$name/work" 2>/dev/null
  summ "$OUT/$name" "$name"
}
# STEPS (default all): a comma-separated subset of predict,main,branch,nbranch,pytest (the second call ran
# predict,branch,pytest: the device time left did not cover the rest again).
STEPS=",${STEPS:-predict,main,branch,nbranch,pytest},"
want() { [[ "$STEPS" == *",$1,"* ]]; }
want predict && grade "$BR" tests/submissions/predict_precompute predict_precompute --stages coalesced
want main && grade "$BR/.." solutions solutions-main
want branch && grade "$BR" solutions solutions-branch
want nbranch && grade "$BR" tests/submissions/n_branch_timed_path n_branch_timed_path --stages tiled
want pytest || exit 0
log "pytest hostile GPU verdicts"
PYTHONPATH=/tmp/site:$BR timeout 150 python3 -m pytest tests/test_hostile.py -q -p no:cacheprovider -k "gpu_verdicts and (predict_precompute or n_branch_timed_path)" \
  > "$OUT/pytest_hostile.log" 2>&1
echo "pytest hostile: rc $?" | tee -a "$OUT/summary.txt"
tail -5 "$OUT/pytest_hostile.log" | tee -a "$OUT/summary.txt"
log done
