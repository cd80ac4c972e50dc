#!/usr/bin/env bash
# Build the CoreLayer for `sam build` (Metadata BuildMethod: makefile -> `make build-CoreLayer` of infra/sam/Makefile).
#
# Usage: infra/build-layer.sh ARTIFACTS_DIR [--arch arm64|x86_64] [--python 3.13] [--glibc 2.28]
#
# Installs the mcpbridge distribution (shared/mcpbridge) and its runtime dependencies, pinned by
# requirements/constraints.txt, as wheels for the target into ARTIFACTS_DIR/python - the directory Lambda puts on
# sys.path for a layer. The default target is the template's: CPython 3.13 on arm64, manylinux wheels that need at
# most glibc 2.28 (LAYER_ARCH, LAYER_PYTHON and LAYER_GLIBC override it, as do the options). Dev tools (the `dev`
# extra) are not installed. Works on any host OS and architecture: nothing is compiled for the build host. A
# dependency with no wheel for the target fails the build and is named. Set PYTHON to choose the interpreter that
# runs pip (default: python3). See infra/build_artifacts.py.
set -euo pipefail

if [[ $# -lt 1 || -z "$1" ]]; then
    echo "usage: $0 ARTIFACTS_DIR [--arch arm64|x86_64] [--python 3.13] [--glibc 2.28]" >&2
    exit 2
fi

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "${PYTHON:-python3}" "$repo_root/infra/build_artifacts.py" layer "$@"
