#!/usr/bin/env bash
# One GPU session for the sandbox and the restructured package (see docs/measurements/).
# On the device machine, from the repository root, with `.dev-carry` carried (the bubblewrap .deb and
# the gradescope-utils wheel, since that machine reaches no package registry):
#   bash tools/gpu_trust.sh setup grade weak hostile
# Results: $OUT/trust.txt (the table) and $OUT/bundle.tgz (results.json, summary.md, logs).
set -u
OUT=${OUT:-/tmp/gpu-out}
W=/tmp/gpu-trust
mkdir -p "$W/logs" "$OUT"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
log() { echo "== $(date +%T) $*" | tee -a "$OUT/trust.txt"; }

step_setup() {
  log setup
  if ! command -v bwrap >/dev/null; then
    mkdir -p /tmp/bw && dpkg -x .dev-carry/bubblewrap_*.deb /tmp/bw
    ln -sf /tmp/bw/usr/bin/bwrap /usr/local/bin/bwrap
  fi
  $PY -m pip install -q --no-index --no-deps --target /tmp/site .dev-carry/*.whl 2>&1 | tail -1
  { nvidia-smi -L; bwrap --version; $PY -V; nvcc --version | tail -1;
    $PY -c 'from grader.run import sandbox; print("sandbox mode:", sandbox.mode())'; } 2>&1 | tee -a "$OUT/trust.txt"
}
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}

# grade NAME SUBMISSION [env...]: one timed grading, one line in trust.txt
grade_once() {
  local name=$1 sub=$2; shift 2
  local t0=$(date +%s.%N)
  env "$@" timeout 400 $PY grader/run_local.py "$sub" --out "$W/$name" --quiet --keep-work > "$W/logs/$name.txt" 2>&1
  local rc=$? t1=$(date +%s.%N)
  $PY - "$W/$name" "$rc" "$t0" "$t1" "$name" <<'PY' | tee -a "$OUT/trust.txt"
import json, sys
from pathlib import Path
out, rc, name = Path(sys.argv[1]), sys.argv[2], sys.argv[5]
secs = float(sys.argv[4]) - float(sys.argv[3])
r = json.loads((out / "results.json").read_text())
g = json.loads((out / "grading.json").read_text()) if (out / "grading.json").exists() else {}
pct = []
for t in r["tests"]:
    v = (t.get("extra_data") or {}).get("values") or {}
    if "fraction_of_baseline" in v and t["number"].endswith(".speed"):
        pct.append(f'{t["number"].split(".")[0]}={100 * v["fraction_of_baseline"]:.1f}%')
    elif "tflops" in v:
        pct.append(f'{t["number"].split(".")[0]}={v["tflops"]:.0f}TFLOP/s')
auto = sum(t["max_score"] for t in r["tests"] if "graded by hand" not in (t.get("output") or ""))
lost = [t["number"] for t in r["tests"] if t["score"] < t["max_score"] and "graded by hand" not in (t.get("output") or "")]
print(f"{name:10} rc={rc} {secs:6.1f} s  score {r['score']:g} of {auto:g} automatic  lost: {' '.join(lost) or '-'}  " + " ".join(pct))
PY
}
step_grade() {
  log "grade solutions x${GRADES:-3} and the starter (sandboxed)"
  for k in $(seq 1 "${GRADES:-3}"); do grade_once "sol$k" solutions; done
  grade_once starter starter
}
step_weak() {
  log "grade solutions with the weak fence (sandbox cost)"
  for k in $(seq 1 "${WEAK:-2}"); do grade_once "weak$k" solutions GRADER_SANDBOX=weak; done
}
step_hostile() {
  log "hostile suite (gpu cases)"
  timeout ${PYTEST_TIMEOUT:-500} $PY -m pytest -q -m gpu -p no:cacheprovider --basetemp="$W/pt" \
    ${PYTEST_ARGS:-tests/test_hostile.py tests/test_attacks.py} 2>&1 | tee "$W/logs/hostile.txt" | tail -25
  tail -3 "$W/logs/hostile.txt" >> "$OUT/trust.txt"
}
step_gputests() {
  log "all gpu tests"
  timeout ${PYTEST_TIMEOUT:-500} $PY -m pytest -q -m gpu -p no:cacheprovider --basetemp="$W/pt2" tests 2>&1 \
    | tee "$W/logs/gputests.txt" | tail -25
  tail -3 "$W/logs/gputests.txt" >> "$OUT/trust.txt"
}
for s in "$@"; do "step_$s"; done
log bundle
( cd "$W" && find . -name '*.npy' -delete; tar czf "$OUT/bundle.tgz" --exclude='*.cubin' --exclude='*/work/*' . )
ls -la "$OUT"
