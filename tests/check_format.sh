#!/usr/bin/env bash
# Fails when a C++ file that git tracks differs from what clang-format makes of it
# (.clang-format: Google style, 100 columns). Run from anywhere; installs clang-format if it is
# missing. To fix: git ls-files '*.cc' '*.h' | xargs clang-format -i
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
. deploy/apt_packages.sh
install_missing_packages check-format clang-format >/dev/null
mapfile -t files < <(git ls-files '*.cc' '*.h')
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! clang-format --dry-run -Werror "${files[@]}" 2>"$log"; then
  echo "check-format: these files are not formatted as .clang-format says:"
  grep -oE '^[^ :]+\.(cc|h):[0-9]+:[0-9]+: error' "$log" | cut -d: -f1 | sort -u | sed 's/^/  /'
  echo "check-format: run: git ls-files '*.cc' '*.h' | xargs clang-format -i"
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
