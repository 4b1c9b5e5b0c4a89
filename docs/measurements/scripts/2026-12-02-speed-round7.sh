#!/usr/bin/env bash
# Device calls of speed round 7 (#32; docs/measurements/2026-12-02-h200-speed-round7.md). From the repo
# root on the device machine, with .whl and .deb carried:
#   bash docs/measurements/scripts/2026-12-02-speed-round7.sh STEP...
# Its own step, ncu-l2 (where the Hopper reference's and cuBLAS's L2 bytes come from: ncu on one launch
# of each tune_hopper.py row named in $NCU_VARIANTS and of cuBLAS at N = 4096, with the L2 sector counts
# (or the metrics in $NCU_METRICS)
# by source unit and operation, the cross-partition ones, and the bytes the SMs received from L2; the
# metrics this ncu does not know are dropped first, from `ncu --query-metrics`). Every other step is
# round 6's script's (2026-12-02-speed-round6.sh: grades N, gpu-tests, cpu, hopper-runs N, ...), run
# with this round's output folder.
set -u
export OUT=${OUT:-/tmp/r7-out}
mkdir -p "$OUT"
here=$(dirname "$0")
# round 6's script installs the carried wheels on its first call; ncu-l2's child needs them too
if [ ! -d /tmp/site/dacite ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD
L2_METRICS="gpu__time_duration.sum lts__t_bytes.sum lts__t_sectors.sum lts__t_sectors_op_read.sum lts__t_sectors_op_write.sum \
lts__t_sectors_srcunit_tex.sum lts__t_sectors_srcunit_tex_op_read.sum lts__t_sectors_srcunit_ltcfabric.sum \
lts__t_sectors_srcnode_gpc.sum lts__t_requests_srcunit_tex_op_read.sum l1tex__m_xbar2l1tex_read_bytes.sum \
lts__t_sector_hit_rate.pct dram__bytes_read.sum dram__bytes_write.sum sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
L2_METRICS=${NCU_METRICS:-$L2_METRICS}  # another list for ncu-l2, space-separated
rest=()
for step in "$@"; do
  case $step in
  ncu-l2)
    echo "== $(date +%T) ncu: L2 bytes by source, the Hopper reference (${NCU_VARIANTS:-default}) and cuBLAS at N = 4096" | tee -a "$OUT/run.txt"
    ncu --query-metrics --chip gh100 > /tmp/r7-metrics.txt 2>&1
    known=$(python3 - /tmp/r7-metrics.txt $L2_METRICS <<'PY'
import sys
names = {line.split()[0] for line in open(sys.argv[1]) if line.strip() and not line.startswith(("-", "Device", "Metric"))}
keep = [m for m in sys.argv[2:] if m.rsplit(".", 1)[0] in names or m.rsplit(".", 2)[0] in names]
gone = [m for m in sys.argv[2:] if m not in keep]
print(",".join(keep))
print("dropped (not in this ncu's list): " + (", ".join(gone) or "none"), file=sys.stderr)
PY
) 2>> "$OUT/run.txt"
    tail -1 "$OUT/run.txt"
    [ -n "$known" ] || known=$(echo $L2_METRICS | tr " " ",")
    mkdir -p /tmp/tune_hopper
    for v in ${NCU_VARIANTS:-default}; do
      python3 -c 'import sys; sys.path.insert(0, "docs/measurements/scripts"); import tune_hopper as t; from pathlib import Path; print(t.compile_variant(sys.argv[1], Path("/tmp/tune_hopper"), "nvcc")["ok"])' "$v"
      timeout 150 ncu --clock-control none --profile-from-start off --csv --page raw --metrics "$known" \
        python3 docs/measurements/scripts/tune_hopper.py --one "/tmp/tune_hopper/$v.cubin" --launch 4096 --with-cublas > "/tmp/r7-ncu-$v.csv" 2>&1
      echo "  $v rc=$?" | tee -a "$OUT/run.txt"
      python3 docs/measurements/scripts/ncu_rows.py "/tmp/r7-ncu-$v.csv" | tee -a "$OUT/run.txt"
    done ;;
  *) rest+=("$step") ;;
  esac
done
if [ ${#rest[@]} -gt 0 ]; then
  bash "$here/2026-12-02-speed-round6.sh" "${rest[@]}"
fi
