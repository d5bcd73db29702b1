#!/usr/bin/env bash
# Installs what only the tests use, when missing: headless Chromium (renders the status pages),
# the Prometheus server (scrapes /metrics) and clang (the ThreadSafetyAnalysis test). Tests that
# need them skip, saying so, where they cannot be installed; a failed install here is therefore
# reported but not fatal.
set -uo pipefail

# fonts-dejavu-core: the storage page screenshot needs a font to draw its text with.
packages=(chromium fonts-dejavu-core prometheus clang)

. "$(dirname "${BASH_SOURCE[0]}")/apt_packages.sh"
# The Prometheus package would start a server on :9090 where an init system runs; the tests
# start their own on a free loopback port.
if ! install_missing_packages install-test-deps "${packages[@]}"; then
  echo "install-test-deps: could not install ${packages[*]}; the tests that need them will skip" >&2
fi
exit 0
