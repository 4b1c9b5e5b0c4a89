# A GPU box that grades exactly as the Gradescope package does, plus the GPU parts
# (correctness, timing against cuBLAS, Nsight Compute, measured occupancy).
#
#   docker build -t gemm-grader .
#   docker run --rm --gpus all -v "$PWD/sub":/autograder/submission -v "$PWD/out":/autograder/results \
#       gemm-grader /autograder/run_autograder
#
# Nsight Compute items need the GPU's performance counters: on hosts that restrict them to admin
# users (the driver's default), add `--cap-add SYS_ADMIN` to `docker run`; otherwise those items
# say "not evaluated: ... ERR_NVGPUCTRPERM".
#
# Students' processes run inside bubblewrap (docs/deployment.md, "What is fenced"), which needs
# namespaces and mounts in the container: `--cap-add SYS_ADMIN --security-opt seccomp=unconfined
# --security-opt apparmor=unconfined --security-opt systempaths=unconfined`. Without them the
# grader falls back to its weak fence and says so (`python -m grader.sandbox.guard`).
#
# The image is the Gradescope zip, unpacked where Gradescope unpacks it (/autograder/source), and
# installed by the zip's own setup.sh, which runs grader/deploy/install.sh -- the one install script
# (tests/test_gradescope_package.py checks that the RUN lines below call nothing else).
# The install runs twice, as layers go: first over only the files it reads (the scripts, pyproject.toml,
# the toolchain probe: grader/deploy/gradescope/build.py, INSTALL_FILES), which does the slow part (apt-get,
# the .venv, the CUDA wheels) in a layer that a change to the grader's code leaves as it was; then over the
# whole package, where it finds everything installed and only checks (seconds).
#
# Base image (ARG BASE):
#   default  nvidia/cuda:13.0.1-devel-ubuntu24.04: nvcc, cuobjdump and, in NVIDIA's devel images,
#            Nsight Compute (if an image lacks ncu, install.sh adds cuda-nsight-compute-13-0 from
#            NVIDIA's apt repository, which these images carry). The host driver must support
#            CUDA 13 (R580 or newer).
#   Gradescope's own base, to reproduce a Gradescope run (no GPU, static grading only):
#     docker build --build-arg BASE=gradescope/autograder-base:ubuntu-22.04 --build-arg GRADER_CUPY=none \
#         -t gemm-grader:gradescope .
#   (pick, from the image's tags on Docker Hub, the one matching the base image selected in the
#   assignment's Gradescope settings, Ubuntu 22.04 or newer; install.sh then
#   installs python3-venv and g++ with apt and nvcc/cuobjdump from NVIDIA's pip wheels).
#   any Debian or Ubuntu with apt-get: install.sh installs what is missing (tests/test_dockerfile_build.py
#   builds this file with buildah on a bare `debootstrap --variant=minbase bookworm` image).
ARG BASE=nvidia/cuda:13.0.1-devel-ubuntu24.04
# The packaging stage's base: any image with Python >= 3.10 as `python3` (the build is standard library
# only). An ARG so that a machine without registry access can build on a local image.
ARG PACKAGE_BASE=python:3.12-slim

# Stage 1: build the zip from the repository and unpack it (standard-library Python only).
# solutions/ and tests/ stay in this stage: the zip never contains them.
FROM ${PACKAGE_BASE} AS package
WORKDIR /src
COPY . .
RUN python3 -m grader.deploy.gradescope build --out /tmp/autograder.zip --unpack /autograder/source \
    --unpack-install /autograder/install

# Stage 2: the grading image.
FROM ${BASE}
# CuPy for the GPU the container will see at `docker run` (the build sees none): cuda13, cuda12 or none.
ARG GRADER_CUPY=cuda13
ENV DEBIAN_FRONTEND=noninteractive
# The install's own files first: the slow layer below is rebuilt only when one of them changes.
COPY --from=package /autograder/install /autograder/source
RUN bash /autograder/source/setup.sh && rm -rf /var/lib/apt/lists/* /root/.cache/pip
# Then the whole package over them, and the same setup.sh again: everything is in place, so it installs nothing.
COPY --from=package /autograder/source /autograder/source
RUN bash /autograder/source/setup.sh && rm -rf /var/lib/apt/lists/* /root/.cache/pip \
    && cp /autograder/source/run_autograder /autograder/run_autograder && chmod 755 /autograder/run_autograder \
    && mkdir -p /autograder/submission /autograder/results
WORKDIR /autograder
