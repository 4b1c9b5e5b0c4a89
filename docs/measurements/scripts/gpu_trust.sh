#!/usr/bin/env bash
# One GPU session for the sandbox and the restructured package (see docs/measurements/).
# On the device machine, from the repository root, with `.dev-carry` carried (the bubblewrap .deb and
# the gradescope-utils wheel, since that machine reaches no package registry):
#   bash docs/measurements/scripts/gpu_trust.sh setup grade weak hostile
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
  # The grading service's wheels (FastAPI, uvicorn, huey, httpx and what they need), for the service runs.
  if [ -d .dev-carry/serve ]; then
    $PY -m pip install -q --no-index --no-deps --target /tmp/site .dev-carry/serve/*.whl 2>&1 | tail -1
  fi
  { nvidia-smi -L; bwrap --version; $PY -V; nvcc --version | tail -1;
    $PY -c 'from grader.sandbox import guard as sandbox; print("sandbox mode:", sandbox.mode())'; } 2>&1 | tee -a "$OUT/trust.txt"
}
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}

# grade NAME SUBMISSION [env...]: one timed grading, one line in trust.txt
grade_once() {
  local name=$1 sub=$2; shift 2
  local t0=$(date +%s.%N)
  env "$@" timeout 400 $PY grader/run_local.py "$sub" --out "$W/$name" --quiet --keep-work ${GRADE_ARGS:-} \
    > "$W/logs/$name.txt" 2>&1
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
# Hand-graded tests carry no score or max_score (grader/outputs/results.py): they are outside the automatic total.
auto = sum(t.get("max_score", 0) for t in r["tests"])
lost = [t["number"] for t in r["tests"] if "max_score" in t and t["score"] < t["max_score"]]
# Bonus items have max_score 0; their own points are in extra_data (grader/outputs/results.py).
bonus = [t["extra_data"] for t in r["tests"] if "bonus" in (t.get("extra_data") or {})]
lost += [t["number"] for t in r["tests"] if "bonus" in t["extra_data"]
         and t["extra_data"]["bonus_points"] < t["extra_data"]["bonus_max"]]
got_bonus = f" bonus {sum(b['bonus_points'] for b in bonus):g}/{sum(b['bonus_max'] for b in bonus):g}" if bonus else ""
import subprocess
if (out / "grading.json").exists():
    table = subprocess.run([sys.executable, "tools/phase_times.py", str(out / "grading.json")],
                           capture_output=True, text=True).stdout
    import os
    Path(os.environ.get("OUT", "/tmp/gpu-out"), f"phases-{name}.md").write_text(table)
print(f"{name:10} rc={rc} {secs:6.1f} s  score {r['score']:g} of {auto:g} automatic{got_bonus}  "
      f"lost: {' '.join(lost) or '-'}  " + " ".join(pct))
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
  timeout ${PYTEST_TIMEOUT:-500} $PY -m pytest -q -m gpu -p no:cacheprovider --durations=15 --basetemp="$W/pt2" tests 2>&1 \
    | tee "$W/logs/gputests.txt" | tail -25
  grep -E "^[0-9.]+s (call|setup)|passed|failed" "$W/logs/gputests.txt" | tail -20 >> "$OUT/trust.txt"
}
step_facts() {
  log "tool facts: ncu's chips and metric lists, CuPy start-up"
  mkdir -p "$OUT/ncu-metrics"
  ncu --version | tail -1 > "$OUT/ncu-metrics/VERSION.txt"
  ncu --list-chips > "$OUT/ncu-metrics/chips.txt" 2>&1
  for chip in $(tr ', ' '\n\n' < "$OUT/ncu-metrics/chips.txt" | grep -E '^[a-z]+[0-9]+[a-z]*$'); do
    timeout 60 ncu --query-metrics --chip "$chip" > "$OUT/ncu-metrics/$chip.txt" 2>&1
  done
  ls -la "$OUT/ncu-metrics" | tee -a "$OUT/trust.txt"
  { for k in 1 2; do /usr/bin/time -f "import cupy: %e s" $PY -c 'import cupy'; done
    /usr/bin/time -f "import cupy + context + 1 kernel: %e s" $PY -c 'import cupy; cupy.zeros(4).sum().item()'
    /usr/bin/time -f "import numpy: %e s" $PY -c 'import numpy'
    /usr/bin/time -f "python -m grader.children probe-like start: %e s" $PY -c 'import grader.children.protocol'
  } 2>&1 | tee -a "$OUT/trust.txt"
}
# speed (issue 15): SPEED_GRADES (5) timed full grades of solutions/ and one of the starter, one phase
# table with a column each ($OUT/phases-speed.md). The first grade starts from an empty per-machine
# CuPy cache and makes the warm cache (grader/gpu/warm.py; its "cupy_cache.warm" phase), the others
# reuse it. Then: did any child compile a CuPy kernel itself (tests/cupy_cache_report.py; if so, a
# diagnostic grade that keeps CuPy's sources names them), and the speed GPU tests. BEFORE=old/grading.json
# adds an older grading as the first column.
step_speed() {
  log "speed: ${SPEED_GRADES:-5} timed grades of solutions (the first makes the warm CuPy cache) and the starter"
  export GRADER_CUPY_CACHE="$W/cupy-machine-cache"
  rm -rf "$GRADER_CUPY_CACHE"
  local files=() k
  for k in $(seq 1 "${SPEED_GRADES:-5}"); do grade_once "speed$k" solutions; files+=("$W/speed$k/grading.json"); done
  grade_once speed-starter starter
  $PY tools/phase_times.py ${BEFORE:-} "${files[@]}" "$W/speed-starter/grading.json" > "$OUT/phases-speed.md"
  cat "$OUT/phases-speed.md" >> "$OUT/trust.txt"
  log "children's own CuPy compiles (0 expected)"
  local compiled=0
  for g in speed2 speed-starter; do $PY tests/cupy_cache_report.py "$W/$g" | tee -a "$OUT/trust.txt" || compiled=1; done
  if [ "$compiled" = 1 ]; then
    grade_once speed-diag solutions GRADER_CUPY_CACHE="$W/cupy-diag-cache" CUPY_CACHE_SAVE_CUDA_SOURCE=1
    GRADER_CUPY_CACHE="$W/cupy-diag-cache" $PY tests/cupy_cache_report.py "$W/speed-diag" | tee -a "$OUT/trust.txt"
  fi
  [ "${SPEED_TESTS:-1}" = 0 ] && return 0  # the gputests step runs them too
  log "speed GPU tests"
  timeout ${PYTEST_TIMEOUT:-500} $PY -m pytest -q -m gpu -p no:cacheprovider --basetemp="$W/pt-speed" \
    tests/test_warm_cache_gpu.py 2>&1 | tee "$W/logs/speed-tests.txt" | tail -15
  tail -3 "$W/logs/speed-tests.txt" >> "$OUT/trust.txt"
}
# variant: VARIANT (a name) graded VARIANT_GRADES (2) times with the rubric edited by VARIANT_SED (a sed
# script), e.g. VARIANT=before VARIANT_SED='s/timeout_s: 30}/timeout_s: 30, racecheck_blocks: null}/'.
step_variant() {
  local name=${VARIANT:-variant} k
  log "variant $name: rubric edited by ${VARIANT_SED:-nothing}"
  sed "${VARIANT_SED:-}" rubric.yaml > "$W/rubric-$name.yaml"
  export GRADER_CUPY_CACHE="$W/cupy-machine-cache"
  for k in $(seq 1 "${VARIANT_GRADES:-2}"); do
    GRADE_ARGS="--rubric $W/rubric-$name.yaml" grade_once "$name$k" solutions
  done
}
# timeline: what every GPU child of each grading did when (tools/phase_times.py --timeline).
step_timeline() {
  local g
  for g in "$W"/*/grading.json; do
    $PY tools/phase_times.py --timeline "$g" > "$OUT/timeline-$(basename "$(dirname "$g")").md"
  done
}
# racecheck: its cost and its verdicts over the whole grid and a corner of it (docs/measurements/scripts/racecheck_probe.py).
step_racecheck() {
  log "racecheck probe"
  OUT=$OUT timeout 600 $PY docs/measurements/scripts/racecheck_probe.py > "$W/logs/racecheck_probe.txt" 2>&1
  tail -5 "$W/logs/racecheck_probe.txt" >> "$OUT/trust.txt"
}
# contention (issue 15's batch): what slows a grading on GPU 0 while the host's other GPU works. One
# grading of solutions/ on GPU 0 alone, then beside each load on GPU 1 (or the CPUs): a second grading,
# a matmul loop (the GPU alone), busy CPUs, CUDA processes starting one after another (the driver), and
# ncu profiling a small program in a loop. Phases: $OUT/phases-contention.md.
_load() {  # _load KIND SECONDS: a background load, on GPU 1 where it uses one
  local kind=$1 secs=$2 end=$(( $(date +%s) + $2 ))
  case $kind in
    grade) CUDA_VISIBLE_DEVICES=1 timeout 120 $PY grader/run_local.py solutions --out "$W/cload-$RANDOM" --quiet \
             > /dev/null 2>&1 ;;
    matmul) CUDA_VISIBLE_DEVICES=1 timeout $((secs + 5)) $PY -c "
import time, cupy as cp
a = cp.random.rand(8192, 8192, dtype=cp.float32); t = time.time()
while time.time() - t < $secs: a @ a; cp.cuda.Device().synchronize()" ;;
    cpu) for i in $(seq 1 12); do timeout "$secs" $PY -c 'while 1: pass' & done; wait ;;
    contexts) for i in 1 2 3 4; do
        ( while [ "$(date +%s)" -lt "$end" ]; do CUDA_VISIBLE_DEVICES=1 $PY -c '
import cupy as cp; x = cp.zeros(1 << 26, dtype=cp.float32); x.sum().item()' > /dev/null 2>&1; done ) & done; wait ;;
    ncu) while [ "$(date +%s)" -lt "$end" ]; do CUDA_VISIBLE_DEVICES=1 timeout 60 ncu --clock-control none \
           --metrics sm__cycles_elapsed.avg,dram__bytes_read.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum \
           $PY -c 'import cupy as cp; a = cp.ones((2048, 2048), cp.float32); [a @ a for _ in range(7)]
cp.cuda.Device().synchronize()' > /dev/null 2>&1; done ;;
  esac
}
step_contention() {
  log "contention: a grading on GPU 0, alone and beside loads on GPU 1 / the CPUs"
  export GRADER_CUPY_CACHE="$W/cupy-machine-cache"
  local files=() kind k
  set -m  # each load in a process group of its own, ended whole after its grading
  CUDA_VISIBLE_DEVICES=0 grade_once c-warm solutions
  for k in 1 2; do CUDA_VISIBLE_DEVICES=0 grade_once "c-alone$k" solutions; files+=("$W/c-alone$k/grading.json"); done
  for kind in ${CONTENTION_LOADS:-grade matmul cpu contexts ncu}; do
    _load "$kind" 40 & local pid=$!
    sleep 3
    CUDA_VISIBLE_DEVICES=0 grade_once "c-$kind" solutions
    files+=("$W/c-$kind/grading.json")
    kill -- -$pid 2>/dev/null; wait $pid 2>/dev/null
  done
  set +m
  $PY tools/phase_times.py "${files[@]}" > "$OUT/phases-contention.md"
  grep -v '&nbsp;' "$OUT/phases-contention.md" | tee -a "$OUT/trust.txt"
}
# race: the missing-barrier case graded alone; its racecheck verdict and every racecheck message of the
# solutions' gradings (each shared-memory stage: "racecheck: no shared-memory hazard").
step_race() {
  log "race: tests/submissions/race_missing_sync, and racecheck's words in the solutions' gradings"
  GRADE_ARGS="--stages tiled" grade_once race tests/submissions/race_missing_sync
  $PY - "$W" <<'PY' | tee -a "$OUT/trust.txt"
import json, sys
from pathlib import Path
for res in [Path(sys.argv[1]) / n / "results.json" for n in ("c-alone1", "speed2", "race")]:
    if not res.exists():
        continue
    for t in json.loads(res.read_text())["tests"]:
        if t["number"].endswith(".correct"):
            words = [p for p in t.get("output", "").replace("\n", "; ").split("; ") if "race" in p.lower()]
            print(f"{res.parent.name:14} {t['number']:12} {t.get('status', '')}: {' | '.join(words)[:160]}")
PY
}
# ncucost: one grading's ncu run again, as the grader runs it and in variants (docs/measurements/scripts/ncu_cost.py),
# alone and beside CUDA processes starting on GPU 1 (NCU_PLAN="LOAD:VARIANT,...;...", NCU_REPEAT).
step_ncucost() {
  log "ncucost: what the ncu run costs, and what slows it"
  export GRADER_CUPY_CACHE="$W/cupy-machine-cache"
  CUDA_VISIBLE_DEVICES=0 grade_once ncu-base solutions
  $PY docs/measurements/scripts/ncu_cost.py "$W/ncu-base/work" "$OUT" --repeat "${NCU_REPEAT:-2}" ${NCU_PLAN:+--plan "$NCU_PLAN"} 2>&1 | tee -a "$OUT/trust.txt"
}
# contexts: what a CUDA context costs to make, alone, beside one kept open, beside the other GPU's
# (docs/measurements/scripts/context_cost.py); its JSON goes into trust.txt.
step_contexts() {
  log "contexts: the cost of making a CUDA context"
  $PY docs/measurements/scripts/context_cost.py --reps "${CTX_REPS:-10}" --burst "${CTX_BURST:-12}" 2>&1 | tee -a "$OUT/trust.txt"
}
# device: single grades of solutions/ handed the GPU's description (grade --device, as a service
# worker or a batch does) and probing it themselves, in turn; their phase tables side by side.
step_device() {
  log "device: single grades with the GPU's description handed over (--device) and without, in turn"
  export GRADER_CUPY_CACHE="$W/cupy-machine-cache"
  $PY -c 'import sys; from pathlib import Path; from grader.gpu.device import describe_into
sys.exit(describe_into(Path(sys.argv[1]), 60) or None)' "$W/device.json"
  local files=() k name t0
  for k in 0 1 2; do
    for name in given probed; do
      t0=$(date +%s.%N)
      if [ $name = given ]; then set -- --device "$W/device.json"; else set --; fi
      timeout 400 $PY -m grader grade solutions --out "$W/dev-$name$k" --quiet "$@" > "$W/logs/dev-$name$k.txt" 2>&1
      echo "dev-$name$k rc=$? $($PY -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 2))" "$t0" "$(date +%s.%N)") s" | tee -a "$OUT/trust.txt"
      [ "$k" = 0 ] || files+=("$W/dev-$name$k/grading.json")  # round 0 warms the machine
    done
  done
  $PY tools/phase_times.py "${files[@]}" > "$OUT/phases-device.md"
  grep -v '&nbsp;' "$OUT/phases-device.md" | tee -a "$OUT/trust.txt"
}
for s in "$@"; do "step_$s"; done
log bundle
# One grading's raw Nsight Compute table (every reference kernel), for tests/fixtures/ncu/.
for g in speed2 sol1; do
  [ -f "$W/$g/work/ncu/ncu_raw.csv.txt" ] && cp "$W/$g/work/ncu/ncu_raw.csv.txt" "$OUT/ncu_raw_$g.csv.txt"
done
( cd "$W" && find . -name '*.npy' -delete; tar czf "$OUT/bundle.tgz" --exclude='*.cubin' --exclude='*/work/*' . )
# The device tool brings back a few files only: every table and log of $OUT goes into one archive.
tar czf "$W/extras.tgz" -C "$OUT" --exclude=bundle.tgz --exclude=trust.txt . \
  && mv "$W/extras.tgz" "$OUT/extras.tgz" \
  && find "$OUT" -maxdepth 1 -type f ! -name bundle.tgz ! -name extras.tgz ! -name trust.txt ! -name log.txt -delete
ls -la "$OUT"
