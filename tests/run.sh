#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs the whole test suite with ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
started=$SECONDS
"$root/deploy/install-deps.sh"
"$root/deploy/install-test-deps.sh"
packages=$((SECONDS - started))
"$root/deploy/build.sh" "$@"
built=$((SECONDS - started - packages))
cd "${BUILD_DIR:-$root/build}"
status=0
ctest --output-on-failure -j"$(nproc)" --timeout 600 || status=$?
echo "run.sh: packages $packages s, build $built s, tests $((SECONDS - started - packages - built)) s"
# Tests that skipped because this machine lacks something (a tool, root for namespaces): why.
if grep -q ': Skipped$' Testing/Temporary/LastTest.log 2>/dev/null; then
  echo "run.sh: skipped tests, and why:"
  awk '/: Skipped$/ { getline reason }
       /^\[  SKIPPED \] / && reason != "" {
         sub(/^\[  SKIPPED \] /, ""); sub(/ \(.*$/, ""); print "  " $0 ": " reason; reason = ""
       }' Testing/Temporary/LastTest.log | sort -u
fi
exit "$status"
