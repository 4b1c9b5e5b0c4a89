#!/usr/bin/env bash
# The Hopper stage's tuning and calibration run on an sm_90a GPU (one device-tool call):
#   OUT=/dir bash docs/measurements/scripts/gpu_hopper.sh
# 1. every variant of solutions/gemm/hopper.cu and the WMMA port (docs/measurements/scripts/tune_hopper.py);
# 2. the default variant 4 more times (5 measurements of the reference);
# 3. Nsight Compute metrics of the reference and of the WMMA port, one launch each at N = 2048;
# 4. compute-sanitizer racecheck of the reference at N = 256, timed.
set -u
OUT=${OUT:-/tmp/gpu_hopper}
mkdir -p "$OUT"
B=/tmp/tune_hopper
python3 docs/measurements/scripts/tune_hopper.py > "$OUT/tune.txt" 2>&1; cp -f "$OUT/tune_hopper.json" "$OUT/tune_all.json" 2>/dev/null
for i in 2 3 4 5; do
  OUT=$OUT python3 docs/measurements/scripts/tune_hopper.py --only default --build "$B-$i" | tail -1 >> "$OUT/default_repeats.txt" 2>&1
done
METRICS=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,sm__inst_executed_pipe_tensor_op_hmma.sum,sm__inst_executed_pipe_tensor.sum,sm__sass_thread_inst_executed_op_ffma_pred_on.sum,gpu__time_duration.sum
for v in default wmma_port; do
  ncu --clock-control none --kernel-name mmHopper --metrics "$METRICS" --csv --page raw \
    python3 docs/measurements/scripts/tune_hopper.py --one "$B/$v.cubin" --launch 2048 > "$OUT/ncu_$v.csv" 2> "$OUT/ncu_$v.err"
done
for v in default wmma_port; do
  s=$(date +%s.%N)
  compute-sanitizer --tool racecheck --kernel-name kns=mmHopper --error-exitcode 17 \
    python3 docs/measurements/scripts/tune_hopper.py --one "$B/$v.cubin" --launch 256 > "$OUT/racecheck_$v.txt" 2>&1
  rc=$?
  echo "racecheck $v rc=$rc seconds=$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')" \
    >> "$OUT/racecheck_times.txt"
done
cuobjdump -sass "$B/wmma_port.cubin" > "$OUT/cuobjdump13.0_sm90a_wmma_port_hopper.txt" 2>&1
cat "$OUT/tune.txt" "$OUT/default_repeats.txt" "$OUT/racecheck_times.txt"
