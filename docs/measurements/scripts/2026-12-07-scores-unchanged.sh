#!/usr/bin/env bash
# #46's GPU check: the same submissions graded on one GPU, in one call, by this code and by the code before
# #46's redesign (b690787, unpacked beside the repository as .gpuwork-old and carried), then compared item by
# item (scores_compare.py: status, score, points and the message with its numbers masked). Then the GPU suite
# if the budget leaves room. Run from the repository root on the device machine, with .whl, .deb and
# .gpuwork-old carried:
#   BUDGET_S=480 bash docs/measurements/scripts/2026-12-07-scores-unchanged.sh
# What comes back, under $OUT: run.txt (log and table), compare.txt, gradings.tgz (each grading's results.json
# and grading.json), gpu-tests.txt.
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/scores-out}
W=${WORK:-/tmp/scores}
BUDGET_S=${BUDGET_S:-480}
SITE=${SITE:-/tmp/site}
OLD=${OLD:-.gpuwork-old}
rm -rf "$W"; mkdir -p "$W" "$OUT"
export PYTHONUNBUFFERED=1
# shellcheck source=docs/measurements/scripts/device_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/device_lib.sh"
device_setup
log "setup took $(( $(date +%s) - T0 )) s"

CASES=${CASES:-"solutions starter tests/submissions/textbook/course race_missing_sync nan_output predict_precompute \
n_branch_timed_path fp16_in_fp32_stage tf32_in_fp32_stage illegal_address"}
stages_of() {  # a known-wrong case's --stages from tests/submissions/EXPECTED.yaml
  python3 -c "import sys,yaml; print(','.join(yaml.safe_load(open('tests/submissions/EXPECTED.yaml'))[sys.argv[1]]['stages']))" "$1"
}
for case in $CASES; do
  [ "$(left)" -lt 150 ] && { log "out of budget before $case"; break; }
  sub=$case; args=()
  if [ -d "tests/submissions/$case" ]; then sub=tests/submissions/$case; args=(--stages "$(stages_of "$case")"); fi
  name=$(basename "$case")
  grade "new-$name" "$sub" "${args[@]}"
  (cd "$OLD" && PYTHONPATH=$SITE:$PWD timeout 300 python3 -m grader grade "$PWD/../$sub" --out "$W/old-$name" \
     --quiet "${args[@]}" > "$W/old-$name.log" 2>&1; echo "old-$name rc=$? $(score_of "$W/old-$name")") | say
done
python3 docs/measurements/scripts/scores_compare.py "$W" > "$OUT/compare.txt" 2>&1; tail -40 "$OUT/compare.txt" | say
(cd "$W" && find . \( -name grading.json -o -name results.json \) -not -path "*/work/*" | tar czf "$OUT/gradings.tgz" -T -)
if [ "$(left)" -gt 140 ]; then
  log "gpu-tests"
  timeout $(( $(left) - 10 )) python3 -m pytest -m gpu -q -p no:cacheprovider > "$OUT/gpu-tests.txt" 2>&1
  log "gpu-tests rc=$? $(tail -1 "$OUT/gpu-tests.txt")"
else
  log "gpu-tests skipped: $(left) s left"
fi
log "done in $(( $(date +%s) - T0 )) s"
