#!/usr/bin/env bash
# One device call for the fair-criteria calibration (docs/measurements/2026-12-01-h200-fair-criteria.md):
# the three populations through `python -m grader calibrate`, the textbook refinements, more gradings of
# solutions/, and a demo class; every grading's grading.json/results.json comes back in one tarball.
# On the device machine, from the repo root, with .whl and .deb carried:
#   bash docs/measurements/scripts/2026-12-01-fair-criteria.sh [calibrate] [variants] [solutions] [demo] \
#        [fixtures] [again] [external] [serve-load] [gpu-tests]   (default: the first four, run F1)
set -u
OUT=${OUT:-/tmp/fair-out}
W=/tmp/fair
mkdir -p "$W" "$OUT"
export PYTHONUNBUFFERED=1
log() { echo "== $(date +%T) $*" | tee -a "$OUT/run.txt"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
if ! command -v bwrap >/dev/null; then
  mkdir -p /tmp/bw && dpkg -x .deb/bubblewrap_*.deb /tmp/bw && ln -sf /tmp/bw/usr/bin/bwrap /usr/local/bin/bwrap
fi
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; bwrap --version
  python3 -V; nvcc --version | tail -1; python3 -c 'import cupy; print("cupy", cupy.__version__)'
  python3 -m grader.sandbox.guard; git log --oneline -1 2>/dev/null; } 2>&1 | tee -a "$OUT/run.txt"

# grade NAME SUBMISSION [grade args...]: one timed grading, one summary line
grade() {
  local name=$1 sub=$2; shift 2
  local t0=$(date +%s.%N)
  timeout 300 python3 -m grader grade "$sub" --out "$W/$name" --quiet "$@" > "$W/$name.log" 2>&1
  local rc=$? t1=$(date +%s.%N)
  python3 docs/measurements/scripts/summarize_grading.py "$W/$name" "$name" "$rc" "$t0" "$t1" | tee -a "$OUT/run.txt"
}

steps=${*:-calibrate variants solutions demo}
for step in $steps; do
  case $step in
  calibrate)
    log "calibrate: reference, textbook/course and both shifted submissions, 3 repeats"
    timeout 480 python3 -m grader calibrate --repeats 3 --textbook tests/submissions/textbook/course \
      --out "$W/calibration" --quiet 2>&1 | tail -40 | tee -a "$OUT/run.txt"
    cp "$W/calibration/calibration.md" "$W/calibration/calibration.json" "$OUT/" 2>/dev/null
    for d in "$W"/calibration/*_[0-9]; do
      python3 docs/measurements/scripts/summarize_grading.py "$d" "cal-$(basename "$d")" 0 0 0 | tee -a "$OUT/run.txt"
    done ;;
  variants)
    for k in 1 2 3; do
      grade "vectorized-$k" tests/submissions/textbook/vectorized --stages blocktiling_2d,wmma
      grade "warptiling-$k" tests/submissions/textbook/warptiling --stages blocktiling_2d
    done ;;
  solutions)
    for k in 4 5; do grade "solutions-$k" solutions; done ;;
  demo)
    grade demo-starter starter
    for s in wrong_index race_missing_sync compile_error zero_output; do
      grade "demo-$s" "tests/submissions/$s"
    done ;;
  fixtures)
    # The demo class of tests/fixtures/gradings/: full gradings of five complete submissions.
    F=/tmp/fixture-subs; rm -rf "$F"; mkdir -p "$F"
    cp -r tests/submissions/textbook/course "$F/textbook"
    cp -r solutions/occupancy solutions/report.md "$F/textbook/"
    python3 -c "from pathlib import Path; from grader.instructor.shifted import write_shifted; \
from grader.rubric.load import load_rubric; write_shifted(Path('solutions'), load_rubric(Path('rubric.yaml')), Path('$F/shifted'))"
    cp -r solutions "$F/broken"  # a stage failing in each way: crash, wrong, race, partial write, missing
    cp tests/submissions/illegal_address/gemm/naive.cu tests/submissions/wrong_index/gemm/coalesced.cu \
       tests/submissions/race_missing_sync/gemm/tiled.cu tests/submissions/partial_write/gemm/blocktiling_2d.cu \
       "$F/broken/gemm/"
    rm "$F/broken/gemm/hopper.cu"
    grade fixture-reference solutions
    for s in textbook shifted broken; do grade "fixture-$s" "$F/$s"; done
    grade fixture-starter starter ;;
  again)
    for k in 1 2 3; do grade "solutions-again-$k" solutions; done ;;
  external)
    [ -f .external/grade_external.sh ] && OUT="$OUT" timeout 300 bash .external/grade_external.sh 2>&1 | tail -40 | tee -a "$OUT/run.txt" ;;
  serve-load)
    log "the Gradescope path through the service, 4 submissions at once on one H200"
    timeout 300 python3 tools/serve_gradescope_load.py --gpus 0 --n 4 --out "$OUT/serve_load.json" 2>&1 | tail -15 \
      | tee -a "$OUT/run.txt" ;;
  gpu-tests)
    log "GPU tests"
    t0=$(date +%s)
    timeout 540 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE 2>&1 | tail -40 | tee -a "$OUT/run.txt"
    log "GPU tests took $(( $(date +%s) - t0 )) s" ;;
  esac
done
log "packing"
(cd "$W" && find . -name grading.json -o -name results.json -o -name intake.json -o -name "*.log" \
   -o -name calibration.md -o -name calibration.json -o -name SHIFTED.md | grep -v /work/ | tar czf "$OUT/gradings.tgz" -T -) \
   2>/dev/null || true
ls -la "$OUT"
