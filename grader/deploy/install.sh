#!/usr/bin/env bash
# The grader's one install script. Gradescope runs it through the package's setup.sh, and the
# Dockerfile runs that same setup.sh, so the zip and the image cannot drift apart
# (tests/test_gradescope_package.py checks both).
#
#   bash grader/deploy/install.sh
#
# Steps:
#   1. System packages, with apt-get when root (skipped when present): python3 and its venv module,
#      g++ (nvcc's host compiler), CA certificates, bubblewrap (bwrap: the sandbox every student
#      process runs in, docs/deployment.md "What is fenced"); on NVIDIA's CUDA images also Nsight
#      Compute (cuda-nsight-compute-X-Y) when the image has no ncu.
#   2. The dedicated user that runs students' programs (GRADER_STUDENT_USER, default "student").
#   3. The Python environment: `grader/bootstrap.sh setup` (a .venv with the grader's dependencies,
#      NVIDIA's nvcc/cuobjdump wheels where the machine has no CUDA toolkit), which records the
#      interpreter it chose in .grader-python for run_autograder.
#
# Environment (optional):
#   GRADER_INSTALL_MODE=full|reuse  reuse: no apt-get, no user, no pip; use $GRADER_PYTHON (default
#                                   python3) as it is (tests and offline machines). Default full.
#   GRADER_PYTHON=PATH              the base interpreter bootstrap starts from (default python3)
#   GRADER_CUPY=cuda13|cuda12|none  install CuPy for a GPU the machine will have at grading time
#                                   (a Docker build sees no GPU). Default: only if a GPU is visible now.
#   GRADER_INSTALL_NCU=auto|0       auto (default): install Nsight Compute on CUDA images lacking it
#   GRADER_STUDENT_USER=NAME|none   the unprivileged user to create (default student); at grading
#                                   time the same variable names the user students' processes run
#                                   as, and "none" means they run as the grader's own user
set -euo pipefail

SOURCE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)"
say() { printf 'install: %s\n' "$*" >&2; }

mode="${GRADER_INSTALL_MODE:-full}"
case "$mode" in
    full | reuse) ;;
    *) say "GRADER_INSTALL_MODE='$mode' is not full or reuse"; exit 2 ;;
esac
say "installing the grader in $SOURCE (mode $mode)"

is_root() { [[ "$(id -u)" -eq 0 ]]; }

have_ncu() {
    command -v ncu >/dev/null 2>&1 && return 0
    compgen -G '/opt/nvidia/nsight-compute/*/ncu' >/dev/null 2>&1 && return 0
    [[ -x /usr/local/cuda/bin/ncu ]]
}

system_packages() {
    local need=() ncu_pkg=""
    command -v python3 >/dev/null 2>&1 || need+=(python3)
    # Debian/Ubuntu ship ensurepip (needed by `python3 -m venv`) in python3-venv.
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then need+=(python3-venv); fi
    command -v g++ >/dev/null 2>&1 || need+=(g++)
    [[ -s /etc/ssl/certs/ca-certificates.crt ]] || need+=(ca-certificates)
    command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
    # NVIDIA's CUDA images set CUDA_VERSION (e.g. 13.0.1) and carry NVIDIA's apt repository; their
    # devel variants normally include Nsight Compute already.
    if [[ "${GRADER_INSTALL_NCU:-auto}" != 0 && -n "${CUDA_VERSION:-}" ]] && ! have_ncu; then
        local major minor
        IFS=. read -r major minor _ <<<"$CUDA_VERSION"
        ncu_pkg="cuda-nsight-compute-${major}-${minor}"
    fi
    if ((${#need[@]} == 0)) && [[ -z "$ncu_pkg" ]]; then
        say "system packages: python3, venv, g++, certificates and bubblewrap present"
        return 0
    fi
    if ! is_root || ! command -v apt-get >/dev/null 2>&1; then
        say "WARNING: missing ${need[*]} ${ncu_pkg} and cannot install them (needs root and apt-get)"
        return 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    if [[ -n "$ncu_pkg" ]]; then
        if apt-cache show "$ncu_pkg" >/dev/null 2>&1; then
            need+=("$ncu_pkg")
        else
            say "no $ncu_pkg in this machine's apt sources; ncu items will be 'not evaluated'"
        fi
    fi
    if ((${#need[@]})); then
        say "apt-get install ${need[*]}"
        apt-get install -y -qq --no-install-recommends "${need[@]}"
    fi
}

student_user() {
    local user="${GRADER_STUDENT_USER:-student}"
    [[ "$user" == none || -z "$user" ]] && return 0
    is_root || return 0
    if id "$user" >/dev/null 2>&1; then
        say "user $user exists"
        return 0
    fi
    if command -v useradd >/dev/null 2>&1; then
        useradd --create-home --shell /bin/bash "$user"
    else
        adduser --disabled-password --gecos "" "$user"
    fi
    say "created user $user (set GRADER_STUDENT_USER=$user when grading to run students' programs as it)"
}

if [[ "$mode" == full ]]; then
    system_packages
    student_user
    no_install=0
else
    say "reuse: no system packages, no user, no pip"
    no_install=1
fi

GRADER_NO_INSTALL="$no_install" GRADER_PYTHON_FILE="$SOURCE/.grader-python" \
    bash "$SOURCE/grader/bootstrap.sh" setup
say "done: the grader runs with $(cat "$SOURCE/.grader-python")"
