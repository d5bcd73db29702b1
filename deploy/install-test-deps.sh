#!/usr/bin/env bash
# Installs what only the tests use, when missing: headless Chromium (renders the status pages),
# the Prometheus server (scrapes /metrics), clang (the ThreadSafetyAnalysis test) and a ZooKeeper
# server with a Java runtime (the leader election and failover tests). Tests that
# need them skip, saying so, where they cannot be installed; a failed install here is therefore
# reported but not fatal.
set -uo pipefail

# fonts-dejavu-core: the storage page screenshot needs a font to draw its text with.
# zookeeper: only the server's jars and scripts (Debian's zookeeperd would run it as a service);
# the tests start their own on a free loopback port.
packages=(chromium fonts-dejavu-core prometheus clang zookeeper default-jre-headless)

. "$(dirname "${BASH_SOURCE[0]}")/apt_packages.sh"
# The Prometheus package would start a server on :9090 where an init system runs; the tests
# start their own on a free loopback port.
if ! install_missing_packages install-test-deps "${packages[@]}"; then
  echo "install-test-deps: could not install ${packages[*]}; the tests that need them will skip" >&2
fi
exit 0
