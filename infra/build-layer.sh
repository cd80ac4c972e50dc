#!/usr/bin/env bash
# Build the CoreLayer for `sam build` (Metadata BuildMethod: makefile -> `make build-CoreLayer`).
#
# Usage: infra/build-layer.sh ARTIFACTS_DIR
#
# Installs the mcpbridge distribution (shared/mcpbridge) and its runtime dependencies, pinned by
# requirements/constraints.txt, as Linux arm64 CPython 3.13 wheels into ARTIFACTS_DIR/python - the directory
# Lambda puts on sys.path for a layer. Dev tools (the `dev` extra) are not installed. Works on any host OS and
# architecture: pip selects manylinux2014_aarch64 wheels and never compiles anything for the host.
# Set PYTHON to choose the interpreter that runs pip (default: python3).
set -euo pipefail

if [[ $# -ne 1 || -z "$1" ]]; then
    echo "usage: $0 ARTIFACTS_DIR" >&2
    exit 2
fi

mkdir -p "$1"
artifacts_dir="$(cd "$1" && pwd)"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

if [[ ! -f requirements/constraints.txt ]]; then
    echo "build-layer: requirements/constraints.txt is missing (run from the repository root)" >&2
    exit 1
fi

"${PYTHON:-python3}" -m pip install \
    --disable-pip-version-check \
    --no-input \
    --no-warn-conflicts \
    --no-warn-script-location \
    --no-compile \
    --target "$artifacts_dir/python" \
    --platform manylinux2014_aarch64 \
    --implementation cp \
    --python-version 3.13 \
    --only-binary=:all: \
    -c requirements/constraints.txt \
    .

# (--no-warn-conflicts: with --target, pip would compare against the build host's environment, which is irrelevant.)
# Byte code is written by the Lambda runtime itself; console scripts point at the build host's interpreter.
find "$artifacts_dir/python" -type d -name __pycache__ -prune -exec rm -rf {} +
rm -rf "$artifacts_dir/python/bin"
