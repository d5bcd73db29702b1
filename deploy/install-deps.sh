#!/usr/bin/env bash
# Installs the Debian packages blockmgr needs, only those that are missing.
#
#   deploy/install-deps.sh            what building and testing everything needs (tests/run.sh)
#   deploy/install-deps.sh --servers  only what building the servers, bmctl and the examples
#                                     needs (deploy/demo.sh): on a fresh Debian 12 about half
#                                     the time of the whole set (bench/notes/2026-12-05-fresh-machine.md)
# The benchmark and the Python module are configured only where their packages are present, so
# a build from the smaller set configures; the test command installs the rest.
set -euo pipefail

# Compilers, CMake and Ninja (the demo's build), and the libraries the servers and the client
# link. GoogleTest too: the build configures its tests whenever it is asked to build anything.
servers=(
  build-essential cmake pkg-config ninja-build
  libzmq3-dev cppzmq-dev libsodium-dev
  capnproto libcapnp-dev
  librocksdb-dev
  libcli11-dev libspdlog-dev nlohmann-json3-dev libcpp-httplib-dev
  libxxhash-dev
  libzookeeper-mt-dev
  libgtest-dev libgmock-dev
)
# The benchmark's peers and libraries, the Python module and its tests, and the tools the
# packaging and multi-host tests call.
rest=(
  libbenchmark-dev libhiredis-dev libmemcached-dev
  pybind11-dev python3-dev python3-numpy python3-distributed python3-pytest
  yamllint dpkg-dev file iproute2
)

packages=("${servers[@]}")
case "${1:-}" in
  --servers) ;;
  "") packages+=("${rest[@]}") ;;
  *) echo "install-deps: unknown option $1 (usage: install-deps.sh [--servers])" >&2; exit 2 ;;
esac

. "$(dirname "${BASH_SOURCE[0]}")/apt_packages.sh"
install_missing_packages install-deps "${packages[@]}"
