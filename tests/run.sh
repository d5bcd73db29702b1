#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs the whole test suite with ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/deploy/install-deps.sh"
"$root/deploy/install-test-deps.sh"
"$root/deploy/build.sh" "$@"
cd "${BUILD_DIR:-$root/build}"
ctest --output-on-failure -j"$(nproc)" --timeout 600
