# The pieces every device-call script of docs/measurements/scripts/ needs, in one place for the current
# and later scripts (the dated scripts of earlier rounds keep their own copies, as their records ran them).
# Source it from a script run at the repository root, after setting:
#   OUT   the folder whose files come back (run.txt gets the log)
#   W     the work folder (gradings go into $W/NAME)
#   SITE  where the carried wheels are installed (PYTHONPATH)
# It defines:
#   say                 stdin to $OUT/run.txt and stderr (seen as it runs)
#   log WORDS           a timed "== HH:MM:SS WORDS" line, said
#   device_setup        the carried wheels (.whl or ../.whl) into $SITE, bubblewrap from .deb (or ../.deb) where
#                       none is installed, PYTHONPATH, then the GPU, driver, tools and commit into run.txt
#   grade NAME SUB ARGS one timed `python -m grader grade SUB ARGS` into $W/NAME, its summary line said
#                       (summarize_grading.py)
#   score_of DIR        "score/max" from DIR/results.json, or "no results.json"
#   left                the seconds left of BUDGET_S since T0 (both set by the script)
# shellcheck shell=bash

say() { tee -a "$OUT/run.txt" >&2; }
left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
log() { echo "== $(date +%T) $*" | say; }

device_setup() {
  local whl=.whl deb=.deb
  [ -d "$whl" ] || whl=../.whl
  [ -d "$deb" ] || deb=../.deb
  if compgen -G "$whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$whl"/*.whl \
      2>&1 | tail -3 | tee -a "$OUT/run.txt"
  else
    log "no wheels in .whl or ../.whl: using the interpreter's own packages"
  fi
  export PYTHONPATH=$SITE:$PWD
  if ! command -v bwrap >/dev/null && compgen -G "$deb/bubblewrap_*.deb" >/dev/null; then
    mkdir -p /tmp/bw && dpkg -x "$deb"/bubblewrap_*.deb /tmp/bw && ln -sf /tmp/bw/usr/bin/bwrap /usr/local/bin/bwrap
  fi
  { nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.max.sm --format=csv,noheader; bwrap --version
    python3 -V; nvcc --version | tail -1; python3 -c 'import cupy; print("cupy", cupy.__version__)'
    python3 -m pytest --version; python3 -m grader.sandbox.guard; git log --oneline -1 2>/dev/null; } 2>&1 \
    | tee -a "$OUT/run.txt"
}

grade() {
  local name=$1 sub=$2; shift 2
  local t0; t0=$(date +%s.%N)
  timeout 300 python3 -m grader grade "$sub" --out "$W/$name" --quiet "$@" > "$W/$name.log" 2>&1
  local rc=$? t1; t1=$(date +%s.%N)
  python3 docs/measurements/scripts/summarize_grading.py "$W/$name" "$name" "$rc" "$t0" "$t1" | say
}

score_of() {
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]+'/results.json')); \
print(f\"{r.get('score')}/{sum(t.get('max_score') or 0 for t in r['tests'])}\")" "$1" 2>/dev/null || echo "no results.json"
}
