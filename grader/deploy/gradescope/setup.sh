#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder image (the zip is unpacked in
# /autograder/source). The Dockerfile runs it too. All the work is in grader/deploy/install.sh, the one
# install script; see there for the environment variables it reads.
set -euo pipefail
exec bash "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)/grader/deploy/install.sh" "$@"
