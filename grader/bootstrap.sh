#!/usr/bin/env bash
# Set up the grader's Python environment and CUDA tools, then optionally run it.
#
#   bash grader/bootstrap.sh setup               only set up
#   bash grader/bootstrap.sh grade [args...]     set up, then: python grader/run_local.py solutions/ [args...]
#   bash grader/bootstrap.sh test [pytest args]  set up with the test extras, then: python -m pytest [args],
#                                                on parallel workers (pytest-xdist: -n N --dist loadfile, see below)
#   bash grader/bootstrap.sh lint                set up with the test extras, then: ruff check, mypy, lint-imports (as .ci/run)
#
# Commands run from the repository root, whatever the caller's cwd.
#
# Decision:
#   * If python3 (or $GRADER_PYTHON) already imports the grader's packages (+ pytest for `test`,
#     + ruff and mypy for `lint`, + cupy when `nvidia-smi -L` lists a GPU) and the system has
#     nvcc and cuobjdump, use it and install nothing (the offline GPU machine).
#   * Otherwise create/reuse .venv in the repo root and install -e ".[extras]" into it (uv, else pip), where
#     extras = test (for `test` and `lint`), cuda13 or cuda12 (GPU visible; by the driver's CUDA
#     version), nvcc (no usable nvcc found), sass (no usable cuobjdump/nvdisasm found).
#     The install runs again only when pyproject.toml changed or an extra is newly needed
#     (stamp: .venv/.grader-bootstrap).
#
# Environment (all optional; grader/deploy/install.sh, the Gradescope/Docker install, sets them):
#   GRADER_PYTHON=PATH        the base interpreter (default: python3)
#   GRADER_NO_INSTALL=1       never create .venv, run pip or apt-get: use the base interpreter as it is
#                             (it must import the grader's packages); missing tools are only warned about
#
# bubblewrap (bwrap, the sandbox of students' code) is installed with apt-get when missing, as root
# on Debian or Ubuntu; elsewhere the command to install it is printed.
#   GRADER_CUPY=cuda13|cuda12 install that CuPy extra even though no GPU is visible now
#                             (a Docker build sees no GPU; the container will)
#   GRADER_PYTHON_FILE=PATH   write the path of the interpreter chosen here into PATH
#   GRADER_INSTALLER=pip      install .venv's packages with pip, not uv (see venv_install)
#   GRADER_TEST_WORKERS=N     `test`'s pytest-xdist workers (default: one more than the CPUs, at most 4; 0 where
#                             a GPU is visible; 0: one process). Not added when the arguments choose (-n,
#                             --numprocesses, -p no:xdist) or where pytest-xdist is not installed (an
#                             offline machine's own Python)
set -euo pipefail

REPO="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "$REPO"

say() { printf 'bootstrap: %s\n' "$*" >&2; }

usage() {
    sed -n '2,8p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
}

if [[ $# -lt 1 ]]; then usage; exit 2; fi
cmd=$1
shift
case "$cmd" in
    setup | grade | test) ;;
    lint) if [[ $# -gt 0 ]]; then say "lint takes no arguments (it checks grader, tests and tools)"; exit 2; fi ;;
    -h | --help) usage; exit 0 ;;
    *) say "unknown command '$cmd'"; usage; exit 2 ;;
esac
# `test` and `lint` write the bytecode of each module their processes import (the venv's packages, the tests'
# helpers) at its first import, whatever PYTHONDONTWRITEBYTECODE says: every later process reads it, where
# setup_venv compiled none of the venv ahead for them.
if [[ "$cmd" == test || "$cmd" == lint ]]; then unset PYTHONDONTWRITEBYTECODE; fi

BASE_PY="${GRADER_PYTHON:-python3}"
if ! command -v "$BASE_PY" >/dev/null 2>&1; then
    say "no '$BASE_PY' on PATH; install Python >= 3.10 (or set GRADER_PYTHON)"
    exit 1
fi
if ! "$BASE_PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
    say "$BASE_PY is $("$BASE_PY" -V 2>&1); the grader needs Python >= 3.10 (set GRADER_PYTHON)"
    exit 1
fi

# --- GPU: decides whether cupy is needed, and which build ---------------------------------
gpu=0
cuda_major=""
smi_list=""
command -v nvidia-smi >/dev/null 2>&1 && smi_list="$(nvidia-smi -L 2>/dev/null || true)"
if grep -q '^GPU ' <<<"$smi_list"; then
    gpu=1
    smi_head="$(nvidia-smi 2>/dev/null || true)"
    cuda_major="$(sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/\1/p' <<<"$smi_head" | sed -n 1p)"
    gpu_name="$(grep '^GPU ' <<<"$smi_list" | sed -n '1s/ (UUID.*//p')"
    say "GPU: ${gpu_name}; driver supports CUDA ${cuda_major:-? (assuming 12)}"
else
    say "GPU: none visible (GPU items will be 'not evaluated')"
fi
cupy_extra=""
if ((gpu)); then
    if [[ -n "$cuda_major" && "$cuda_major" -ge 13 ]]; then cupy_extra=cuda13; else cupy_extra=cuda12; fi
fi
case "${GRADER_CUPY:-}" in
    "" | none | auto) ;;
    cuda12 | cuda13)
        cupy_extra="$GRADER_CUPY"
        say "GRADER_CUPY=$GRADER_CUPY: installing CuPy for a GPU this machine will have (none needed now)"
        ;;
    *) say "GRADER_CUPY='$GRADER_CUPY' is not cuda12, cuda13 or none"; exit 2 ;;
esac

# The modules of pyproject.toml's dependencies (grader/setup_check.py: REQUIRED, and httpx for `submit`).
mods=(numpy yaml rich matplotlib dacite markdown_it httpx)
[[ "$cmd" == test ]] && mods+=(pytest)
[[ "$cmd" == lint ]] && mods+=(ruff mypy importlinter)
[[ -n "$cupy_extra" ]] && mods+=(cupy)

# Prints the modules that PY cannot import (nothing when all import).
missing_modules() {
    "$1" - "${mods[@]}" <<'EOF' 2>/dev/null || echo "(python failed)"
import importlib, sys
missing = []
for m in sys.argv[1:]:
    try:
        importlib.import_module(m)
    except Exception:
        missing.append(m)
print(" ".join(missing))
EOF
}

tool_extras() { "$1" -m grader.compile.toolchain --pip-extras; }

use_base=0
base_missing="$(missing_modules "$BASE_PY")"
base_tools="$(tool_extras "$BASE_PY")"
if [[ -z "$base_missing" && -z "$base_tools" ]]; then
    use_base=1
    PY="$BASE_PY"
    say "using $(command -v "$BASE_PY") ($("$BASE_PY" -V 2>&1)): ${mods[*]} import, nvcc and cuobjdump found; installing nothing"
else
    why=()
    [[ -n "$base_missing" ]] && why+=("$BASE_PY lacks: $base_missing")
    [[ -n "$base_tools" ]] && why+=("tools missing, pip extras: $base_tools")
    why_text="${why[0]}"
    ((${#why[@]} > 1)) && why_text+="; ${why[1]}"
    [[ "${GRADER_NO_INSTALL:-0}" == 1 ]] || say "using .venv ($why_text)"
fi

# Installs SPEC (an editable `.[extras]`) and pip into the venv VENV ($PY its interpreter), without bytecode.
# uv (Astral's installer, kept up, pip-compatible) where the base interpreter's pip can install it (kept_uv):
# from a warm cache it installs the test extras in about 2 s where pip takes about 22 s on a 2-core machine
# (docs/measurements/2026-12-06-test-suite-speed.md, "The set-up with uv"), and CI pays that on every fresh
# clone. pip itself (put in by `venv`) where uv cannot be had (no pip in the base interpreter, as in a bare
# Debian image; no index) or fails, or where GRADER_INSTALLER=pip asks for it.
# uv itself is kept in the user's cache (beside mypy's, see `lint`): a fresh clone then does not install it again
# through the base interpreter's pip, which took about 2.6 s of the set-up on a 2-core machine. A kept copy that
# does not run is installed again; two set-ups at once each install into a folder of their own and rename it.
kept_uv() {
    local kept="${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/gemm-grader/uv" tmp
    if [[ -x "$kept/bin/uv" ]] && "$kept/bin/uv" --version >/dev/null 2>&1; then
        echo "$kept/bin/uv"
        return 0
    fi
    mkdir -p "$(dirname "$kept")" && tmp="$(mktemp -d "$kept.XXXXXX")" || return 1
    if "$BASE_PY" -m pip install --disable-pip-version-check -q --target "$tmp" uv >/dev/null 2>&1 \
        && "$tmp/bin/uv" --version >/dev/null 2>&1; then
        rm -rf "$kept"
        mv -T "$tmp" "$kept" 2>/dev/null || rm -rf "$tmp"  # another set-up's copy got there first: that one
        [[ -x "$kept/bin/uv" ]] && echo "$kept/bin/uv"
        return
    fi
    rm -rf "$tmp"
    return 1
}

venv_install() {
    local spec=$1 venv=$2 uv=""
    if [[ "${GRADER_INSTALLER:-uv}" != pip ]]; then
        if [[ -x "$venv/bin/uv" ]]; then
            uv="$venv/bin/uv"  # a venv that an earlier set-up gave its own uv
        else
            uv="$(kept_uv)" || uv=""
        fi
        if [[ -n "$uv" ]]; then
            "$uv" pip install -q --python "$PY" pip -e "$spec" && return 0
            say "uv could not install $spec; trying pip"
        fi
    fi
    # The venv was made without pip: `venv` puts it in, the same way as when it makes a venv with pip.
    if ! "$PY" -m pip --version >/dev/null 2>&1; then
        "$BASE_PY" -m venv "$venv" || {
            say "could not put pip into .venv (Debian/Ubuntu: apt-get install python3-venv)"
            return 1
        }
    fi
    "$PY" -m pip install --disable-pip-version-check -q --no-compile -e "$spec"
}

setup_venv() {
    local venv="$REPO/.venv"
    if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
        say "creating .venv with $BASE_PY"
        rm -rf "$venv"
        # Without pip: venv_install brings it (with uv, or through `venv` again).
        "$BASE_PY" -m venv --without-pip "$venv" || {
            say "could not create a venv (Debian/Ubuntu: apt-get install python3-venv)"
            return 1
        }
    fi
    PY="$venv/bin/python"

    local extras=(base)
    [[ "$cmd" == test || "$cmd" == lint ]] && extras+=(test)
    [[ -n "$cupy_extra" ]] && extras+=("$cupy_extra")
    local t
    for t in $(tool_extras "$PY"); do extras+=("$t"); done

    local stamp="$venv/.grader-bootstrap"
    local hash
    hash="$(sha256sum pyproject.toml | cut -d' ' -f1)"
    local old_hash="" old_extras=()
    if [[ -f "$stamp" ]]; then
        old_hash="$(head -n 1 "$stamp")"
        mapfile -t old_extras < <(tail -n +2 "$stamp")
    fi

    local todo=() e
    for e in "${extras[@]}"; do
        if [[ "$hash" != "$old_hash" ]] || ! printf '%s\n' "${old_extras[@]}" | grep -qxF -- "$e"; then
            todo+=("$e")
        fi
    done
    if ((${#todo[@]} == 0)); then
        say ".venv up to date (extras: ${extras[*]})"
        return 0
    fi

    # When pyproject.toml changed, re-install everything this venv had, so new pins apply.
    local all=("${extras[@]}")
    for e in "${old_extras[@]}"; do
        printf '%s\n' "${all[@]}" | grep -qxF -- "$e" || all+=("$e")
    done
    local pip_extras=()
    for e in "${all[@]}"; do [[ "$e" != base ]] && pip_extras+=("$e"); done
    local spec="."
    ((${#pip_extras[@]})) && spec=".[$(IFS=,; echo "${pip_extras[*]}")]"
    if [[ -z "$old_hash" ]]; then
        say "installing -e $spec into .venv (first run)"
    elif [[ "$hash" != "$old_hash" ]]; then
        say "installing -e $spec into .venv (pyproject.toml changed)"
    else
        say "installing -e $spec into .venv (newly needed: ${todo[*]})"
    fi
    venv_install "$spec" "$venv" || return 1
    # Neither installer above writes bytecode. For `setup` and `grade` compileall writes all of it now, on every
    # CPU: the venv may be read later by processes that cannot write (an image's, a grading machine's). `test` and
    # `lint` skip that (about 12 s of CPU and 6 s before the first test on a 2-core machine): their processes
    # write the bytecode of what they import as they first import it (see after the command's check, above).
    if [[ "$cmd" == setup || "$cmd" == grade ]]; then
        "$PY" -m compileall -q -j 0 "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
            >/dev/null 2>&1 || true
    fi
    {
        echo "$hash"
        printf '%s\n' "${all[@]}"
    } >"$stamp"
}

if ((!use_base)) && [[ "${GRADER_NO_INSTALL:-0}" == 1 ]]; then
    if [[ -n "$base_missing" ]]; then
        say "GRADER_NO_INSTALL=1 but $BASE_PY lacks: $base_missing; cannot continue"
        exit 1
    fi
    use_base=1
    PY="$BASE_PY"
    say "GRADER_NO_INSTALL=1: using $BASE_PY as it is${base_tools:+ (missing tools, their items are not evaluated: $base_tools)}"
fi
if ((!use_base)); then
    if ! setup_venv; then
        if [[ -z "$base_missing" ]]; then
            PY="$BASE_PY"
            say "WARNING: .venv setup failed; falling back to $BASE_PY (missing tools: $base_tools)"
        else
            say ".venv setup failed; cannot continue"
            exit 1
        fi
    fi
fi

# --- The sandbox: bubblewrap fences every process that compiles or runs students' code ------
# As root with apt-get (Debian, Ubuntu) it is installed here; otherwise the one command to run is
# printed, and gradings say that students' code ran unfenced until it is installed.
bwrap_command() {
    local mgr
    for mgr in apt-get dnf zypper pacman apk; do
        if command -v "$mgr" >/dev/null 2>&1; then
            case "$mgr" in
                pacman) echo "sudo pacman -S bubblewrap" ;;
                apk) echo "sudo apk add bubblewrap" ;;
                *) echo "sudo $mgr install -y bubblewrap" ;;
            esac
            return
        fi
    done
    echo "install bubblewrap (bwrap) with the system's package manager"
}
if [[ "$cmd" != lint ]] && ! command -v bwrap >/dev/null 2>&1; then
    if [[ "${GRADER_NO_INSTALL:-0}" != 1 && "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
        say "bubblewrap (bwrap, the sandbox for students' code) is missing: apt-get install bubblewrap"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap; } \
            || say "WARNING: apt-get could not install bubblewrap; students' code will run unfenced"
    else
        say "WARNING: bubblewrap (bwrap) is missing, so students' code will run unfenced; to fence it: $(bwrap_command)"
    fi
fi

if [[ "$cmd" != lint ]]; then  # linting grades nothing; .ci/run's `test` that follows prints these
    # What the grader will see (one line per tool; problems such as a missing host compiler show here).
    "$PY" -m grader.compile.toolchain 2>&1 | sed 's/^/bootstrap: /' >&2 || true
    # How students' processes will be fenced here (bubblewrap or the weak fallback, and why). Not where only the
    # install's own files are (the Dockerfile's first install step: grader/deploy/gradescope/build.py, INSTALL_FILES);
    # its second step, over the whole package, says it.
    if [[ -f grader/sandbox/guard.py ]]; then
        "$PY" -m grader.sandbox.guard 2>&1 | sed 's/^/bootstrap: /' >&2 || true
    fi
fi

if [[ -n "${GRADER_PYTHON_FILE:-}" ]]; then
    py_path="$PY"
    [[ "$py_path" == */* ]] || py_path="$(command -v "$py_path")"
    printf '%s\n' "$py_path" >"$GRADER_PYTHON_FILE"
fi

# How to run the grader from now on: the one line a student needs after `setup`.
if [[ "$cmd" == setup && "$PY" == "$REPO/.venv/bin/python" ]]; then
    say "ready: .venv/ (in $REPO) holds the grader's packages; run the grader with .venv/bin/python," \
        "e.g. \`.venv/bin/python -m grader check my-submission/\` (or \`source .venv/bin/activate\` once, then \`python -m grader ...\`)"
elif [[ "$cmd" == setup ]]; then
    say "ready: $PY has the grader's packages; run the grader with it, e.g. \`$PY -m grader check my-submission/\`"
fi

case "$cmd" in
    setup) exit 0 ;;
    grade) exec "$PY" grader/run_local.py solutions/ "$@" ;;
    test)
        # Parallel workers: one more than the CPUs, at most 4; each file's tests run on one worker (--dist
        # loadfile: its module fixtures are made once; tests/file_costs.py hands the costliest files out first).
        # Many tests wait (a service starting, a time limit, a hung stand-in), and a worker beyond the CPUs
        # fills those waits, though each worker collects (imports) every test module again: on 2 CPUs three
        # workers took 12 % less wall than two for the same CPU, four more CPU than two
        # (docs/measurements/2026-12-06-test-suite-speed.md). Where a GPU is visible the default is one process: the GPU suite's shared gradings
        # (tests/gpu_jobs.py) and its lock are one process's, and no other test's load may share the GPU's
        # timed runs.
        xdist=()
        chosen=0
        for a in "$@"; do
            case "$a" in -n|-n*|--numprocesses|--numprocesses=*|no:xdist|-pno:xdist) chosen=1 ;; esac
        done
        if [[ $chosen -eq 0 ]] && "$PY" -c "import xdist" 2>/dev/null; then
            cpus="$(nproc 2>/dev/null || echo 1)"
            default=$(( cpus < 3 ? cpus + 1 : 4 ))
            ((gpu)) && default=0
            workers="${GRADER_TEST_WORKERS:-$default}"
            [[ "$workers" =~ ^[0-9]+$ ]] || { say "GRADER_TEST_WORKERS='$workers' is not a number"; exit 2; }
            [[ "$workers" -gt 0 ]] && xdist=(-n "$workers" --dist loadfile)
        fi
        # Bytecode of the grader's modules and the tests' helpers, written once before the tests: every grading
        # a test starts is a Python process of its own, and where PYTHONDONTWRITEBYTECODE is set (the grader's
        # sandboxed children always set it) each one would compile every module it imports from source again
        # (docs/measurements/2026-12-06-test-suite-speed.md, "Where each process's CPU goes"). compileall writes
        # whatever that setting says; __pycache__ stays out of git, the kit, the Gradescope zip and the image.
        "$PY" -m compileall -q -j 0 grader >/dev/null 2>&1 || true
        "$PY" -m compileall -q -l -x '/test_[^/]*\.py$' tests >/dev/null 2>&1 || true
        exec "$PY" -m pytest "${xdist[@]}" "$@" ;;
    # Settings: pyproject.toml's [tool.ruff] and [tool.mypy] (which names mypy's package); both exit 1 on a finding.
    # mypy keeps its incremental cache beside pip's, outside the checkout (MYPY_CACHE_DIR wins): a fresh clone's
    # check then takes about 0.4 s of CPU instead of about 11 (docs/measurements/2026-12-06-test-suite-speed.md,
    # "The set-up with uv"). mypy compares each module with what its cache recorded (size, time, then a hash of the
    # contents), so a clone of another commit reuses only what still matches and checks the rest again.
    # lint-imports: the floors and the no-loop rule pyproject.toml declares (docs/design.md, "The house").
    lint) MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/gemm-grader/mypy}" \
        && export MYPY_CACHE_DIR \
        && "$PY" -m ruff check grader tests tools && "$PY" -m mypy && exec "$PY" -c "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())" --no-cache ;;
esac
