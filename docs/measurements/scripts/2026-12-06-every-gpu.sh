#!/usr/bin/env bash
# One device call per course GPU (#44, #48): the calibration record and entry of this GPU, the demo class
# re-graded from this code, the GPU suite, and a grading of solutions/. Run from the repository root on the
# device machine, with .whl and .deb carried:
#   bash docs/measurements/scripts/2026-12-06-every-gpu.sh [STEP ...]     (default: every step, in this order)
# Steps, with their estimated seconds on an H100 or H200 (setup: about 60 s, before any step):
#   calibrate   (~210 s) `python -m grader calibrate --repeats 3` over solutions/, the textbook kernels of
#               tests/submissions/textbook/course and both one-stage-shifted submissions (12 gradings of the GEMM
#               stages, about 13 s each), then the other textbook kernels (textbook/vectorized, textbook/warptiling)
#               3 times each on their stages: the verdict table (calibration.md) and this GPU's calibration entry
#   fixtures    (~80 s)  the demo class of tests/fixtures/gradings/ graded again from this code (five full
#               gradings): fixtures.tgz, to unpack over tests/fixtures/gradings/ (tar xzf fixtures.tgz -C ...)
#   gpu-tests   (~105 s) python3 -m pytest -m gpu -q -p no:cacheprovider
#   solutions   (~15 s)  one full grading of solutions/ and its summary
# A step whose estimate does not fit in what is left of BUDGET_S (default 590 s from the script's start, the
# device call's 600 s limit) is skipped and the table says so: run it in another call (e.g. `gpu-tests solutions`).
# What comes back, under $OUT (at most 8 files, flat): run.txt (the log and the table), calibration.md,
# calibration.json, the entry (<gpu-slug>.yaml), calibration-gradings.tgz (every calibration grading's grading.json
# and results.json), fixtures.tgz, gpu-tests.txt, solutions-summary.md.
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/every-gpu-out}
W=${WORK:-/tmp/every-gpu}
BUDGET_S=${BUDGET_S:-590}
SITE=${SITE:-/tmp/site}
rm -rf "$W"; mkdir -p "$W" "$OUT"
export PYTHONUNBUFFERED=1
# say, log, device_setup, grade NAME SUBMISSION [grade args...], score_of DIR (progress goes to run.txt and
# stderr; a step function's last stdout line is its table result)
# shellcheck source=docs/measurements/scripts/device_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"

# --- setup: the service's wheels and bubblewrap, from the repo root (or the folder above, for a .gpuwork copy)
device_setup
log "setup took $(( $(date +%s) - T0 )) s"

TABLE=()  # one row per step: "step | result | seconds"
row() { TABLE+=("$1 | $2 | $3"); }

calibrate() {
  log "calibrate: solutions/, textbook/course and both shifted submissions, 3 repeats"
  local budget; budget=$(( $(left) - 60 )); [ "$budget" -gt 420 ] && budget=420  # 60 s: the other textbook kernels
  COLUMNS=200 timeout "$budget" python3 -m grader calibrate --repeats 3 --textbook tests/submissions/textbook/course \
    --out "$W/calibration" > "$W/calibrate.log" 2>&1
  local rc=$?
  tail -40 "$W/calibrate.log" | say
  cp "$W/calibration/calibration.md" "$W/calibration/calibration.json" "$OUT/" 2>/dev/null
  cp "$W"/calibration/calibration/*.yaml "$OUT/" 2>/dev/null
  for d in "$W"/calibration/*_[0-9]; do
    python3 docs/measurements/scripts/summarize_grading.py "$d" "cal-$(basename "$d")" 0 0 0 | say
  done
  for k in 1 2 3; do
    grade "vectorized-$k" tests/submissions/textbook/vectorized --stages blocktiling_2d,wmma
    grade "warptiling-$k" tests/submissions/textbook/warptiling --stages blocktiling_2d
  done
  (cd "$W" && find calibration vectorized-* warptiling-* \( -name grading.json -o -name results.json \) \
     -not -path "*/work/*" | tar czf "$OUT/calibration-gradings.tgz" -T -) 2>/dev/null
  local said entry
  said=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); r=d['rows']; \
print(f\"{sum(x['verdict'] == 'OK' for x in r)} of {len(r)} items OK on {d['meta']['device']}\", \
'; not OK: ' + (', '.join(f\"{x['number']}.{x['item']} {x['verdict']}\" for x in r if x['verdict'] != 'OK') or 'none'))" \
    "$W/calibration/calibration.json" 2>/dev/null)
  entry=$(cd "$W/calibration/calibration" 2>/dev/null && ls ./*.yaml 2>/dev/null | head -1)
  echo "rc $rc; ${said:-no verdict line}; entry ${entry:-none}"
}

fixtures() {
  log "fixtures: the demo class of tests/fixtures/gradings/, graded from this code"
  local F=$W/fixture-subs
  mkdir -p "$F"
  cp -r tests/submissions/textbook/course "$F/textbook"
  cp -r solutions/occupancy solutions/report.md "$F/textbook/"
  python3 -c "from pathlib import Path; from grader.instructor.shifted import write_shifted; \
from grader.rubric.load import load_rubric; write_shifted(Path('solutions'), load_rubric(Path('rubric.yaml')), Path('$F/shifted'))"
  cp -r solutions "$F/broken"  # a stage failing in each way: crash, wrong, race, partial write, missing
  cp tests/submissions/illegal_address/gemm/naive.cu tests/submissions/wrong_index/gemm/coalesced.cu \
     tests/submissions/race_missing_sync/gemm/tiled.cu tests/submissions/partial_write/gemm/blocktiling_2d.cu \
     "$F/broken/gemm/"
  rm "$F/broken/gemm/hopper.cu"
  mkdir -p "$W/fixtures"
  grade fixtures/reference solutions
  for s in textbook shifted broken; do grade "fixtures/$s" "$F/$s"; done
  grade fixtures/starter starter
  (cd "$W/fixtures" && tar czf "$OUT/fixtures.tgz" ./*/grading.json) 2>/dev/null
  local s scores=""
  for s in reference textbook shifted starter broken; do scores+="$s $(score_of "$W/fixtures/$s"); "; done
  echo "$scores"
}

gpu_tests() {
  log "GPU tests"
  local budget; budget=$(( $(left) - 10 )); [ "$budget" -lt 30 ] && budget=30
  # A module whose optional extra is missing here (tests/test_similarity.py needs copydetect) must not stop the rest.
  timeout "$budget" python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --continue-on-collection-errors \
    > "$OUT/gpu-tests.txt" 2>&1
  local rc=$?
  tail -40 "$OUT/gpu-tests.txt" | say
  echo "rc $rc; $(grep -E '[0-9]+ (passed|failed|skipped|errors?)\b' "$OUT/gpu-tests.txt" | tail -1 | tr -d '=')"
}

solutions() {
  grade solutions solutions
  cp "$W/solutions/summary.md" "$OUT/solutions-summary.md" 2>/dev/null
  echo "$(score_of "$W/solutions") automatic; $(grep -m1 -o 'thresholds[^|]*' "$W/solutions/summary.md" 2>/dev/null)"
}

# Seconds each step took on the H100 (2026-12-06: calibrate 204, gpu-tests 99, solutions 13); fixtures estimated.
declare -A EST=([calibrate]=210 [fixtures]=80 [gpu-tests]=105 [solutions]=15)
steps=${*:-calibrate fixtures gpu-tests solutions}
for step in $steps; do
  if [ -z "${EST[$step]:-}" ]; then row "$step" "unknown step (calibrate, fixtures, gpu-tests, solutions)" 0; continue; fi
  if [ "$(left)" -lt "${EST[$step]}" ]; then
    row "$step" "skipped: needs ~${EST[$step]} s, $(left) s left; run it in another call" 0
    log "$step skipped ($(left) s left, needs ~${EST[$step]} s)"
    continue
  fi
  s0=$(date +%s)
  case $step in
  calibrate) result=$(calibrate | tail -1) ;;
  fixtures) result=$(fixtures | tail -1) ;;
  gpu-tests) result=$(gpu_tests | tail -1) ;;
  solutions) result=$(solutions | tail -1) ;;
  esac
  row "$step" "$result" $(( $(date +%s) - s0 ))
done

{ echo; echo "step | result | seconds"; echo "---|---|---"; printf '%s\n' "${TABLE[@]}"
  echo "total $(( $(date +%s) - T0 )) s, setup included"; } | tee -a "$OUT/run.txt"
ls -la "$OUT"
