#!/usr/bin/env bash
# One build-check-measure cycle on a GPU machine, for the device tool (results under $OUT).
# Usage: bash docs/measurements/scripts/gpu_session.sh STEP... (steps: env tune grade broken ncu sass occ pytest stability)
set -u
OUT=${OUT:-/tmp/gpu-out}
W=/tmp/gpu-work   # everything goes here; $OUT gets one tarball (the device returns few files)
mkdir -p "$W/logs" "$OUT"
export PYTHONUNBUFFERED=1 CUPY_TF32=0
PY=${PY:-python3}
log() { echo "== $(date +%T) $*"; }

step_env() {
  log env
  { nvidia-smi; $PY --version; $PY -c 'import cupy, numpy, yaml, rich; print("cupy", cupy.__version__, "numpy", numpy.__version__)';
    which nvcc ncu cuobjdump compute-sanitizer; nvcc --version | tail -2; ncu --version | tail -1; } > "$W/logs/env.txt" 2>&1
  tail -5 "$W/logs/env.txt"
}
step_tune() {
  log tune
  [ -f docs/measurements/scripts/tune_kernels.py ] && timeout 300 $PY docs/measurements/scripts/tune_kernels.py ${TUNE_ARGS:-} 2>&1 | tee "$W/logs/tune.txt" | tail -40
}
step_grade() {
  log grade solutions
  timeout 400 $PY grader/run_local.py solutions --out "$W/sol" 2>&1 | tee "$W/logs/grade_solutions.txt" | tail -30
  if [ -z "${SKIP_STARTER:-}" ]; then
    log grade starter
    timeout 300 $PY grader/run_local.py starter --out "$W/starter" --quiet 2>&1 | tail -3
  fi
}
step_broken() {
  for case in tests/submissions/*/; do
    name=$(basename "$case"); log "broken $name"
    sed 's/stage_run_s: 240/stage_run_s: 40/' rubric.yaml > /tmp/rubric_short.yaml
    timeout 300 $PY grader/run_local.py "$case" --out "$W/broken/$name" --rubric /tmp/rubric_short.yaml --quiet 2>&1 | tail -2
    $PY - "$W/broken/$name/results.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for t in r["tests"]:
    if t["extra_data"]["status"] != "passed":
        print(f'   {t["number"]:16} {t["extra_data"]["status"]:13} {t["output"].splitlines()[0][:150] if t["output"] else ""}')
PY
  done
}
step_sass() {
  log sass fixtures
  mkdir -p "$W/fx"
  for c in "$W"/sol/work/*/build/*.cubin; do cuobjdump -sass "$c" > "$W/fx/sass_$(basename "$c" .cubin).txt" 2>&1; done
  ls -la "$W/fx" | head
}
step_ncu() {
  log ncu
  timeout 500 $PY docs/measurements/scripts/ncu_capture.py "$W/fx" 2048 2>&1 | tail -40
}
step_occ() {
  log occupancy grid
  [ -f tools/occupancy_api_grid.py ] && timeout 120 $PY tools/occupancy_api_grid.py 2>&1 | tail -15
}
step_pytest() {
  log pytest gpu
  timeout ${PYTEST_TIMEOUT:-500} $PY -m pytest -q -m gpu -p no:cacheprovider ${PYTEST_ARGS:-tests} 2>&1 | tee "$W/logs/pytest_gpu.txt" | tail -15
}
step_stability() {
  log stability; timeout ${STAB_TIMEOUT:-550} $PY tools/stability.py solutions --runs ${RUNS:-5} --out "$W/stab" 2>&1 | tail -25
}
step_calib() {
  log calibrate x${CALIB:-3}
  timeout 560 $PY grader/run_local.py solutions --calibrate ${CALIB:-3} --out "$W/calib" 2>&1 | tail -30
  sed -n 1,200p "$W/calib/calibration.md" | cut -c1-220 | head -60
}
step_occcheck() {
  log occupancy check
  timeout 400 $PY docs/measurements/scripts/occupancy_gpu_check.py --out "$W/occcheck" 2>&1 | tail -120
}
for s in "$@"; do "step_$s"; done
log bundle
( cd "$W" && find . -name '*.npy' -delete; tar czf "$OUT/bundle.tgz" . )
ls -la "$OUT/bundle.tgz"
