#!/usr/bin/env bash
# Device calls of speed round 6 (#32; docs/measurements/2026-12-02-h200-speed-round6.md). From the repo
# root on the device machine, with .whl and .deb carried:
#   bash docs/measurements/scripts/2026-12-02-speed-round6.sh STEP...
# Round 5's script (its steps, below in its words) with its own output folders, and two steps of its own:
# hopper-runs N (tune_hopper.py's rows named in $HOPPER_ONLY, default "default,nostreamk", N times) and
# sanitize (compute-sanitizer memcheck, racecheck and synccheck on one launch of the stream-K reference at
# N = 3072, memcheck at 4096 too, the whole grid), ncu-vs-cublas (ncu on one launch of each tune_hopper.py
# row named in $NCU_VARIANTS and of cuBLAS at N = 4096: time, SM clock, DRAM and L2 bytes, tensor pipe).
# Steps: grades [N] (one warm-up, then N timed full grades of solutions/, the first kept with its work
# folder), nogpu (a --no-gpu grade: the compiles with no GPU child beside them), lock N (grades with
# --gpu-lock: the GPU children start after the compiles), probe (the probe child), ncusol (docs/measurements/scripts/ncu_sol_cost.py on the kept work),
# interleave N (before/after gradings in turn), process (the process around one grading), cpu (the host's CPUs during a grade: cpu_busy.py), hopper (tune_hopper.py), demo, serve-load, gpu-tests,
# ncureplay (ncu_replay_cost.py on the kept work), importtime (the grader's imports, python -X importtime),
# serve-load3 (the service with three gradings per GPU), pyspy (one warm grade with py-spy sampling the grading process: where its own CPU time goes; the py-spy wheel in .whl/),
# and round 5's: attack-timeline (attack_timeline.py: one GPU attack case fenced and plain, with timelines),
# hostile-alone (the GPU suite's hostile grading alone, with its timeline); gpu-tests also keeps the suite's grading.json files.
set -u
OUT=${OUT:-/tmp/r6-out}
W=/tmp/r6
mkdir -p "$W" "$OUT"
export PYTHONUNBUFFERED=1
log() { echo "== $(date +%T) $*" | tee -a "$OUT/run.txt"; }
if [ ! -d /tmp/site/dacite ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD
if ! command -v bwrap >/dev/null; then
  mkdir -p /tmp/bw && dpkg -x .deb/bubblewrap_*.deb /tmp/bw && ln -sf /tmp/bw/usr/bin/bwrap /usr/local/bin/bwrap
fi
{ date -u; nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  nproc; git log --oneline -1 2>/dev/null; python3 -V; nvcc --version | tail -1; } 2>&1 | tee -a "$OUT/run.txt"

# grade NAME SUBMISSION [grade args...]: one timed grading (from the folder $FROM, default .), one
# summary line, its phase line
grade() {
  local name=$1 sub=$2; shift 2
  local from=${FROM:-$PWD} t0 t1 rc
  t0=$(date +%s.%N)
  (cd "$from" && PYTHONPATH=/tmp/site:$from timeout 300 python3 -m grader grade "$OLDPWD/$sub" --out "$W/$name" --quiet "$@") \
    > "$W/$name.log" 2>&1
  rc=$?; t1=$(date +%s.%N)
  python3 docs/measurements/scripts/summarize_grading.py "$W/$name" "$name" "$rc" "$t0" "$t1" | tee -a "$OUT/run.txt"
  python3 - "$W/$name/grading.json" "$name" <<'PY' | tee -a "$OUT/run.txt"
import json, sys
try:
    g = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    print(f"  {sys.argv[2]} phases: none ({exc})"); raise SystemExit
steps = [p for p in g.get("phases", []) if not p.get("detail") and not p.get("stage")]
print(f"  {sys.argv[2]} phases: " + ", ".join(f"{p['name']} {p['seconds']:.2f}" for p in steps))
print(f"  {sys.argv[2]} cpu: {g.get('cpu_seconds')} (grader {g.get('cpu_seconds_grader')})")
PY
}

# timeline GRADING_JSON: each party's events in seconds from the grading's start, and the steps' ends
timeline() {
  python3 - "$1" <<'PY' | tee -a "$OUT/run.txt"
import json, sys
g = json.load(open(sys.argv[1]))
first = g["phases"][0]
start = first["ended"] - first["seconds"]
print("  steps: " + ", ".join(f"{p['name']} ends {p['ended'] - start:.2f}" for p in g["phases"]
                              if not p.get("detail") and not p.get("stage") and p["ended"] > start))
for p in g.get("timeline", []):
    print(f"  {p['party']:26} " + " ".join(f"{e[1]}@{e[0] - start:.2f}" for e in p["events"]))
PY
}

while [ $# -gt 0 ]; do
  step=$1; shift
  n=5; case ${1:-} in [0-9]*) n=$1; shift ;; esac
  case $step in
  grades)
    log "solutions/: a warm-up grade, then $n timed full grades (the first keeps its work folder)"
    grade solutions-warm solutions
    grade solutions-1 solutions --keep-work
    for k in $(seq 2 "$n"); do grade "solutions-$k" solutions; done
    timeline "$W/solutions-$n/grading.json" ;;
  nogpu)
    log "solutions/ with --no-gpu: the compiles alone"
    grade nogpu solutions --no-gpu ;;
  lock)
    log "solutions/ with --gpu-lock (its GPU children start after the compiles), $n times"
    for k in $(seq 1 "$n"); do grade "lock-$k" solutions --gpu-lock "$W/gpu0.lock"; done ;;
  cpu)
    log "the host's CPUs during one grade of solutions/, and one nvcc alone"
    ( cd /tmp && /usr/bin/time -f "nvcc naive alone %e s" nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -O3 -Xptxas -v -lineinfo \
        "$OLDPWD/solutions/gemm/naive.cu" -o /tmp/naive.cubin 2>&1 | tail -1 ) | tee -a "$OUT/run.txt"
    python3 docs/measurements/scripts/cpu_busy.py "$OUT/cpu_busy.json" -- python3 -m grader grade solutions --out "$W/cpu" --quiet \
      2>&1 | tail -40 | tee -a "$OUT/run.txt"
    timeline "$W/cpu/grading.json" ;;
  process)
    log "one grade of solutions/, the process around the grading: its start to the grading's start, the grading's end to its exit"
    python3 - "$W/process" <<'PY' 2>&1 | tee -a "$OUT/run.txt"
import json, subprocess, sys, time
out = sys.argv[1]
t0 = time.time()
subprocess.run([sys.executable, "-m", "grader", "grade", "solutions", "--out", out, "--quiet"], check=False,
               stdout=subprocess.DEVNULL)
t1 = time.time()
g = json.load(open(f"{out}/grading.json"))
first = g["phases"][0]
start = first["ended"] - first["seconds"]
last = max(p["ended"] for p in g["phases"] if p["ended"] > start)
print(f"process {t1 - t0:.2f} s: before the grading {start - t0:.2f} s, grading {g['seconds']:.2f} s, "
      f"after its last phase {t1 - last:.2f} s")
PY
    ;;
  probe)
    log "the probe child, 3 times"
    for k in 1 2 3; do
      python3 -c 'import time; t = time.monotonic(); from grader.gpu.device import probe_device; d, r = probe_device(60); print("probe child", round(time.monotonic() - t, 3), "s:", d and d.get("name"), r)' 2>&1 | tail -1 | tee -a "$OUT/run.txt"
    done ;;
  ncusol)
    log "ncu: the Speed-of-Light throughputs' cost"
    timeout 400 python3 docs/measurements/scripts/ncu_sol_cost.py "$W/solutions-1/work" "$OUT" --repeat 2 2>&1 | tail -12 | tee -a "$OUT/run.txt" ;;
  ncureplay)
    log "ncu: each kernel's replays, by metric set"
    timeout 400 python3 docs/measurements/scripts/ncu_replay_cost.py "$W/solutions-1/work" "$OUT" --repeat 2 2>&1 | tail -24 | tee -a "$OUT/run.txt" ;;
  pyspy)
    log "one grade of solutions/ under py-spy (the grading process's threads, 200 samples a second)"
    /tmp/site/bin/py-spy record --threads --rate 200 --format raw -o "$OUT/pyspy.txt" -- \
      python3 -m grader grade solutions --out "$W/pyspy" --quiet > "$W/pyspy.log" 2>&1
    python3 - "$OUT/pyspy.txt" <<'PY' | tee -a "$OUT/run.txt"
import collections, sys
own, total, threads = collections.Counter(), collections.Counter(), collections.Counter()
n = 0
for line in open(sys.argv[1]):
    stack, _, count = line.rstrip().rpartition(" ")
    c = int(count); n += c
    frames = stack.split(";")
    threads[frames[0]] += c
    own[frames[-1]] += c
    for f in set(frames[1:]):
        total[f] += c
print(f"samples {n} (200/s: {n / 200:.1f} s of a thread on CPU)")
print("by thread:", "; ".join(f"{k} {v}" for k, v in threads.most_common(8)))
print("self:"); [print(f"  {v:6d} {k[:150]}") for k, v in own.most_common(25)]
print("inclusive:"); [print(f"  {v:6d} {k[:150]}") for k, v in total.most_common(40)]
PY
    ;;
  importtime)
    log "the grader's imports before a grading starts"
    python3 -X importtime -c 'import grader.cli' 2> "$W/importtime.txt"; sort -t'|' -k2 -n -r "$W/importtime.txt" | head -25 | tee -a "$OUT/run.txt"
    for k in 1 2 3; do /usr/bin/time -f "python -m grader --help: %e s" python3 -m grader --help >/dev/null 2>>"$OUT/run.txt"; done
    tail -3 "$OUT/run.txt" ;;
  interleave)
    log "before (.before/) and after, $n each, in turn"
    FROM=$PWD/.before grade il-warm-before solutions; grade il-warm-after solutions
    for k in $(seq 1 "$n"); do FROM=$PWD/.before grade "il-before-$k" solutions; grade "il-after-$k" solutions; done ;;
  hopper)
    log "the Hopper reference's variants"
    OUT=$OUT timeout 500 python3 docs/measurements/scripts/tune_hopper.py ${HOPPER_ONLY:+--only "$HOPPER_ONLY"} 2>&1 | tail -20 | tee -a "$OUT/run.txt" ;;
  hopper-runs)
    log "the Hopper reference's rows ${HOPPER_ONLY:-default,nostreamk}, $n times"
    for k in $(seq 1 "$n"); do
      OUT=$OUT timeout 200 python3 docs/measurements/scripts/tune_hopper.py --only "${HOPPER_ONLY:-default,nostreamk}" 2>&1 | tail -4 | tee -a "$OUT/run.txt"
      [ -f "$OUT/tune_hopper.json" ] && mv "$OUT/tune_hopper.json" "$OUT/tune_hopper_$k.json"
    done ;;
  sanitize)
    log "compute-sanitizer on one launch of the stream-K reference (the whole grid)"
    mkdir -p /tmp/tune_hopper
    nvcc -cubin -gencode=arch=compute_90a,code=sm_90a -O3 -DTUNE_STREAMK=1 solutions/gemm/hopper.cu -o /tmp/tune_hopper/sk.cubin
    for run in memcheck:3072 racecheck:3072 synccheck:3072 memcheck:4096; do
      tool=${run%:*} size=${run#*:}
      {
        t0=$(date +%s)
        timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 python3 docs/measurements/scripts/tune_hopper.py \
          --one /tmp/tune_hopper/sk.cubin --launch $size > "$W/san-$tool-$size.log" 2>&1
        echo "  $tool N=$size rc=$? in $(( $(date +%s) - t0 )) s: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|check' "$W/san-$tool-$size.log" | tr '\n' ' ' | cut -c1-300)" | tee -a "$OUT/run.txt"
      }
    done ;;
  ncu-vs-cublas)
    log "ncu: the Hopper reference ($NCU_VARIANTS) and cuBLAS at N = 4096, one launch each"
    mkdir -p /tmp/tune_hopper
    for v in ${NCU_VARIANTS:-default}; do
      python3 -c 'import sys; sys.path.insert(0, "docs/measurements/scripts"); import tune_hopper as t; from pathlib import Path; print(t.compile_variant(sys.argv[1], Path("/tmp/tune_hopper"), "nvcc")["ok"])' "$v"
      timeout 120 ncu --clock-control none --profile-from-start off --csv --page raw --metrics \
gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic \
        python3 docs/measurements/scripts/tune_hopper.py --one "/tmp/tune_hopper/$v.cubin" --launch 4096 --with-cublas > "$W/ncu-$v.csv" 2>&1
      echo "  $v rc=$?" | tee -a "$OUT/run.txt"
      python3 docs/measurements/scripts/ncu_rows.py "$W/ncu-$v.csv" | tee -a "$OUT/run.txt"
    done ;;
  demo)
    grade starter starter
    for s in wrong_index race_missing_sync compile_error zero_output illegal_address partial_write; do
      [ -d "tests/submissions/$s" ] && grade "demo-$s" "tests/submissions/$s"
    done ;;
  serve-load)
    log "the Gradescope path through the service, 16 submissions at once on one H200 (two gradings per GPU)"
    timeout 280 python3 tools/serve_gradescope_load.py --gpus 0 --gradings-per-gpu 2 --n 16 --out "$OUT/serve_load_2.json" \
      2>&1 | tail -6 | tee -a "$OUT/run.txt" ;;
  serve-load3)
    log "the Gradescope path through the service, 16 submissions at once on one H200 (three gradings per GPU)"
    timeout 280 python3 tools/serve_gradescope_load.py --gpus 0 --gradings-per-gpu 3 --n 16 --out "$OUT/serve_load_3.json" \
      2>&1 | tail -6 | tee -a "$OUT/run.txt" ;;
  attack-timeline)
    log "the attack case static_init_daemon_rewrites_results alone, fenced and plain, with its timelines"
    timeout 300 python3 docs/measurements/scripts/attack_timeline.py static_init_daemon_rewrites_results "$W/attack" 2>&1 | tee -a "$OUT/run.txt" ;;
  hostile-alone)
    log "the GPU suite's hostile grading (every GPU case in one grading) alone, with its timeline"
    rm -rf "$W/hostile" && mkdir -p "$W/hostile"
    t0=$(date +%s.%N)
    timeout 300 python3 -c 'import sys; from pathlib import Path; from tests.gpu_jobs import _hostile; w = Path(sys.argv[1]); g = _hostile(w, w / "gpu.lock"); print("hostile rc", g.rc, "wall", round(g.wall_s, 2))' "$W/hostile" 2>&1 | tail -3 | tee -a "$OUT/run.txt"
    timeline "$W/hostile/out/grading.json" ;;
  gpu-tests)
    log "GPU tests"
    t0=$(date +%s)
    timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider -rfE --durations=12 2>&1 | tail -40 | tee -a "$OUT/run.txt"
    log "GPU tests took $(( $(date +%s) - t0 )) s"
    tl=$(ls -t /tmp/pytest-of-*/pytest-*/gpu-jobs0/timeline.json 2>/dev/null | head -1)
    [ -n "$tl" ] && (cd "$(dirname "$tl")" && find . -name grading.json | tar czf "$OUT/gpu_jobs_gradings.tgz" -T -)
    [ -n "$tl" ] && cp "$tl" "$OUT/gpu_jobs_timeline.json" && python3 - "$tl" <<'PY' | tee -a "$OUT/run.txt"
import json, sys
for name, j in sorted(json.load(open(sys.argv[1])).items(), key=lambda kv: kv[1]["from_s"]):
    held = sum(g["gpu_held"] or 0 for g in j["gradings"])
    print(f"  {name:10s} {j['from_s']:6.1f}-{j['to_s']:6.1f} s, {len(j['gradings'])} gradings, GPU lock held {held:.1f} s: "
          + "; ".join(f"{g['grading']} {g['seconds'] or 0:.1f} s (wait {g['gpu_wait'] or 0:.1f}, held {g['gpu_held'] or 0:.1f})"
                      for g in j["gradings"][:6]))
    for g in j["gradings"]:
        if (g["gpu_held"] or 0) > 15:
            print(f"    {name}/{g['grading']} steps: " + ", ".join(f"{k} {v:.1f}" for k, v in g.get("steps", {}).items() if v >= 0.3))
            print(f"    {name}/{g['grading']} slowest stage runs: " + ", ".join(f"{k} {v:.1f}" for k, v in g.get("slowest_runs", {}).items()))
PY
    ;;
  esac
done
log "packing"
# only 8 files come back: every grading's files and the other outputs go into one archive beside run.txt
(cd "$W" && find . -name grading.json -o -name results.json -o -name "*.log" | grep -v /work/ > "$W/pack.list"
 tar czf "$OUT/gradings.tgz" -T "$W/pack.list" -C "$OUT" $(cd "$OUT" && ls | grep -v -e '^run.txt$' -e '^gradings.tgz$')) 2>/dev/null || true
(cd "$OUT" && ls | grep -v -e '^run.txt$' -e '^gradings.tgz$' | xargs -r rm -rf)
ls -la "$OUT" | tail -30
