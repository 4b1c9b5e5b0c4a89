#!/usr/bin/env bash
# Final check of the hostile-submission suite on a GPU (see docs/measurements/).
set -u
export PYTHONUNBUFFERED=1 CUPY_TF32=0
W=/tmp/gpu-final; rm -rf "$W"; mkdir -p "$W/fx" "${OUT:-/tmp/out}"
echo "== $(date +%T) solutions"
timeout 150 python3 grader/run_local.py solutions --stages naive,coalesced,tiled,blocktiling_1d,blocktiling_2d,wmma \
  --out "$W/sol" 2>&1 | tail -16
python3 - "$W/sol/results.json" <<'PY'
import json, sys
for t in json.load(open(sys.argv[1]))["tests"]:
    if t["number"].endswith(".correct") or t["extra_data"]["status"] != "passed":
        print(f'  {t["number"]:18} {t["extra_data"]["status"]:13} {t["output"][:170]!r}')
PY
echo "== $(date +%T) hostile suite (gpu)"
timeout ${PYTEST_TIMEOUT:-380} python3 -m pytest -q -m gpu -p no:cacheprovider --basetemp="$W/pt" tests/test_hostile.py 2>&1 | tail -40
find "$W" -name 'racecheck.txt' -o -name 'memcheck.txt' | while read f; do
  cp "$f" "$W/fx/$(echo "$f" | sed "s|$W/||; s|/|__|g")"; done
ls "$W/fx" | head -30
( cd "$W" && find . -name '*.npy' -delete; tar czf "${OUT:-/tmp/out}/bundle.tgz" sol/results.json sol/summary.md fx pt 2>/dev/null )
echo "== $(date +%T) done"
