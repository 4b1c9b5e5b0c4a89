#!/usr/bin/env bash
# Device calls of speed round 9 (#32; docs/measurements/2026-12-02-h200-speed-round9.md). From the repo
# root on the device machine, with .whl and .deb carried:
#   bash docs/measurements/scripts/2026-12-02-speed-round9.sh STEP [N] ...
# Its own steps:
#   pyspy-gil       one grade of solutions/ under py-spy --gil (the py-spy wheel in .whl/): which threads
#                   and functions hold the grading process's GIL;
#   ncu-start       ncu_overhead.py --start: a profile child's start, step by step, with and without ncu;
#   tool-help       ncu's and compute-sanitizer's options on replay, workers and threads;
#   process-marks N N grades with the process's own marks (process_marks.py);
#   ncu-overhead    ncu_overhead.py on the work folder that round 6's `grades` step keeps
#                   (/tmp/r6/solutions-1/work), so `grades` must come before it.
# Every other step is round 8's script's (and through it round 7's and round 6's: grades N, interleave N,
# gpu-tests, cpu, ...), run one at a time in the order given, with this round's output folder.
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
  tool-help)
    echo "== $(date +%T) the tools' options for replay, workers and threads" | tee -a "$OUT/run.txt"
    { ncu --version | tail -1; ncu --help | grep -i -E -A2 "replay|thread|cache-control|graph"; \
      compute-sanitizer --version | tail -1; compute-sanitizer --help | grep -i -E -A2 "racecheck|worker|thread"; } \
      2>&1 | head -120 | tee -a "$OUT/run.txt" ;;
  process-marks)
    n=1; case ${1:-} in [0-9]*) n=$1; shift ;; esac
    echo "== $(date +%T) $n grades of solutions/ with the process's own marks (process_marks.py)" | tee -a "$OUT/run.txt"
    for k in $(seq 1 "$n"); do
      t0=$(date +%s.%N)
      T0=$t0 python3 "$here/process_marks.py" grade solutions --out /tmp/r9-marks --quiet 2>&1 | grep MARKS | tee -a "$OUT/run.txt"
      echo "  the shell saw $(python3 -c "import time; print(f'{time.time() - $t0:.3f}')") s" | tee -a "$OUT/run.txt"
    done ;;
  ncu-start)
    echo "== $(date +%T) ncu: a profile child's start, step by step, under ncu and without it" | tee -a "$OUT/run.txt"
    timeout 200 python3 "$here/ncu_overhead.py" /tmp/r6/solutions-1/work "$OUT" --start 2>&1 | tail -12 | tee -a "$OUT/run.txt" ;;
  ncu-overhead)
    echo "== $(date +%T) ncu: each kernel's passes by profiled program, and its readings beside other GPU work" | tee -a "$OUT/run.txt"
    timeout 400 python3 "$here/ncu_overhead.py" /tmp/r6/solutions-1/work "$OUT" 2>&1 | tail -60 | tee -a "$OUT/run.txt" ;;
  pyspy-gil)
    echo "== $(date +%T) one grade of solutions/ under py-spy --gil: what holds the grading process's GIL" | tee -a "$OUT/run.txt"
    /tmp/site/bin/py-spy record --gil --threads --rate 250 --format raw -o /tmp/r9-pyspy.txt -- \
      python3 -m grader grade solutions --out /tmp/r9-pyspy --quiet > /tmp/r9-pyspy.log 2>&1
    echo "  rc=$? $(tail -1 /tmp/r9-pyspy.log)" | tee -a "$OUT/run.txt"
    python3 - /tmp/r9-pyspy.txt <<'PY' | tee -a "$OUT/run.txt"
import collections, re, sys
own, total, threads = collections.Counter(), collections.Counter(), collections.Counter()
n = 0
for line in open(sys.argv[1]):
    stack, _, count = line.rstrip().rpartition(" ")
    c = int(count); n += c
    frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
    threads[re.sub(r"\d+", "#", frames[0])] += c
    own[frames[-1]] += c
    for f in set(frames[1:]):
        total[f] += c
print(f"samples with the GIL held {n} (250/s: {n / 250:.1f} s)")
print("by thread:", "; ".join(f"{k} {v}" for k, v in threads.most_common(10)))
print("self:"); [print(f"  {v:6d} {k[:160]}") for k, v in own.most_common(25)]
print("inclusive:"); [print(f"  {v:6d} {k[:160]}") for k, v in total.most_common(45)]
PY
    ;;
  *)
    args=("$step")
    case ${1:-} in [0-9]*) args+=("$1"); shift ;; esac
    bash "$here/2026-12-02-speed-round8.sh" "${args[@]}" ;;
  esac
done
