#!/usr/bin/env bash
# Device calls of speed round 9 (#32; docs/measurements/2026-12-02-h200-speed-round9.md). From the repo
# root on the device machine, with .whl and .deb carried:
#   bash docs/measurements/scripts/2026-12-02-speed-round9.sh STEP [N] ...
# Its own step, ncu-overhead: docs/measurements/scripts/ncu_overhead.py on the work folder that round 6's
# `grades` step keeps (/tmp/r6/solutions-1/work), so `grades` must come before it. Every other step is
# round 8's script's (and through it round 7's and round 6's: grades N, gpu-tests, cpu, ...), run one at a
# time in the order given, with this round's output folder.
set -u
export OUT=${OUT:-/tmp/r9-out}
mkdir -p "$OUT"
here=$(dirname "$0")
if [ ! -d /tmp/site/dacite ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD
while [ $# -gt 0 ]; do
  step=$1; shift
  case $step in
  ncu-overhead)
    echo "== $(date +%T) ncu: each kernel's passes by profiled program, and its readings beside other GPU work" | tee -a "$OUT/run.txt"
    timeout 400 python3 "$here/ncu_overhead.py" /tmp/r6/solutions-1/work "$OUT" 2>&1 | tail -60 | tee -a "$OUT/run.txt" ;;
  *)
    args=("$step")
    case ${1:-} in [0-9]*) args+=("$1"); shift ;; esac
    bash "$here/2026-12-02-speed-round8.sh" "${args[@]}" ;;
  esac
done
