#!/usr/bin/env bash
# One device call per step group for the re-housed package (docs/measurements/2026-12-01-h200-house-and-speed.md):
# timed full grades of solutions/ with their phase tables, the starter and the demo submissions (scores to
# compare with the record before the re-housing), the GPU suite (its wall time; the hostile suite is in it),
# the Gradescope path through the service, and the batch with and without the kept CUDA contexts.
# On the device machine, from the repo root, with .whl and .deb carried:
#   bash docs/measurements/scripts/2026-12-01-house-and-speed.sh [solutions] [demo] [gpu-tests] [serve-load] [keeper]
set -u
OUT=${OUT:-/tmp/house-out}
W=/tmp/house
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
  python3 -m grader.sandbox.guard; } 2>&1 | tee -a "$OUT/run.txt"

# grade NAME SUBMISSION [grade args...]: one timed grading, one summary line, its phase line
grade() {
  local name=$1 sub=$2; shift 2
  local t0=$(date +%s.%N)
  timeout 300 python3 -m grader grade "$sub" --out "$W/$name" --quiet "$@" > "$W/$name.log" 2>&1
  local rc=$? t1=$(date +%s.%N)
  python3 docs/measurements/scripts/summarize_grading.py "$W/$name" "$name" "$rc" "$t0" "$t1" | tee -a "$OUT/run.txt"
  python3 - "$W/$name/grading.json" "$name" <<'PY' | tee -a "$OUT/run.txt"
import json, sys
try:
    g = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    print(f"  {sys.argv[2]} phases: none ({exc})"); raise SystemExit
steps = [p for p in g.get("phases", []) if not p.get("detail") and not p.get("stage")]
print(f"  {sys.argv[2]} phases: " + ", ".join(f"{p['name']} {p['seconds']:.2f}" for p in steps))
PY
}

steps=${*:-solutions demo}
for step in $steps; do
  case $step in
  solutions)
    log "solutions/: one warm-up grade, then five timed full grades"
    grade solutions-warm solutions
    for k in 1 2 3 4 5; do grade "solutions-$k" solutions; done ;;
  demo)
    grade starter starter
    for s in wrong_index race_missing_sync compile_error zero_output illegal_address partial_write; do
      [ -d "tests/submissions/$s" ] && grade "demo-$s" "tests/submissions/$s"
    done ;;
  gpu-tests)
    log "GPU tests"
    t0=$(date +%s)
    timeout 540 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --durations=15 2>&1 | tail -45 | tee -a "$OUT/run.txt"
    log "GPU tests took $(( $(date +%s) - t0 )) s" ;;
  serve-load)
    log "the Gradescope path through the service, 16 submissions at once on one H200: one grading per GPU, then two"
    timeout 280 python3 tools/serve_gradescope_load.py --gpus 0 --gradings-per-gpu 1 --n 16 --out "$OUT/serve_load_1.json" \
      2>&1 | tail -6 | tee -a "$OUT/run.txt"
    timeout 280 python3 tools/serve_gradescope_load.py --gpus 0 --gradings-per-gpu 2 --n 16 --baseline "$OUT/serve_load_1.json" \
      --out "$OUT/serve_load_2.json" 2>&1 | tail -6 | tee -a "$OUT/run.txt" ;;
  keeper)
    log "the batch of 6 on one GPU, with and then without the kept CUDA context"
    python3 tools/make_demo_export.py --n 6 "$W/export" > /dev/null
    for mode in kept none; do
      extra=(); [ "$mode" = none ] && extra=(--no-kept-contexts)
      t0=$(date +%s.%N)
      CUDA_VISIBLE_DEVICES=0 timeout 400 python3 -m grader batch "$W/export" --out "$W/batch-$mode" --quiet --force \
        "${extra[@]}" > "$W/batch-$mode.log" 2>&1
      rc=$?; t1=$(date +%s.%N)
      log "batch $mode: rc $rc, $(python3 -c "print(round($t1 - $t0, 1))") s; $(tail -2 "$W/batch-$mode.log" | tr '\n' ' ')"
    done ;;
  esac
done
log "packing"
(cd "$W" && find . -name grading.json -o -name results.json -o -name "*.log" -o -name grades.csv \
   | grep -v /work/ | tar czf "$OUT/gradings.tgz" -T -) 2>/dev/null || true
ls -la "$OUT"
