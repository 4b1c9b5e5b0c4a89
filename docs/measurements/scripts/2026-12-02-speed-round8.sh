#!/usr/bin/env bash
# Device calls of speed round 8 (#32; docs/measurements/2026-12-02-h200-speed-round8.md). From the repo
# root on the device machine, with .whl and .deb carried:
#   bash docs/measurements/scripts/2026-12-02-speed-round8.sh STEP...
# Its own step, sanitize-default: compute-sanitizer memcheck, racecheck and synccheck on one launch of the
# Hopper reference as the grader compiles it (no -D), over the whole grid (the grader's racecheck launches a
# 2 x 2 corner), at the sizes in $SANITIZE_RUNS (tool:N, default racecheck:2048 synccheck:2048 memcheck:4096).
# Every other step is round 7's script's (2026-12-02-speed-round7.sh: ncu-l2, and round 6's grades N,
# gpu-tests, hopper-runs N, ...), run with this round's output folder.
set -u
export OUT=${OUT:-/tmp/r8-out}
mkdir -p "$OUT"
here=$(dirname "$0")
if [ ! -d /tmp/site/dacite ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD
rest=()
for step in "$@"; do
  case $step in
  sanitize-default)
    echo "== $(date +%T) compute-sanitizer on one launch of the Hopper reference (the whole grid)" | tee -a "$OUT/run.txt"
    mkdir -p /tmp/tune_hopper
    nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -O3 solutions/gemm/hopper.cu -o /tmp/tune_hopper/ref.cubin
    for run in ${SANITIZE_RUNS:-racecheck:2048 synccheck:2048 memcheck:4096}; do
      tool=${run%:*} size=${run#*:}
      t0=$(date +%s)
      timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 python3 docs/measurements/scripts/tune_hopper.py \
        --one /tmp/tune_hopper/ref.cubin --launch "$size" > "/tmp/r8-san-$tool-$size.log" 2>&1
      rc=$?
      echo "  $tool N=$size rc=$rc in $(( $(date +%s) - t0 )) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' "/tmp/r8-san-$tool-$size.log" | tr '\n' ' ' | cut -c1-300)" | tee -a "$OUT/run.txt"
    done ;;
  *) rest+=("$step") ;;
  esac
done
if [ ${#rest[@]} -gt 0 ]; then
  bash "$here/2026-12-02-speed-round7.sh" "${rest[@]}"
fi
