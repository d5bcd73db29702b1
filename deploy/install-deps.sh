#!/usr/bin/env bash
# Installs the Debian packages blockmgr needs to build and test, only those that are missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libzmq3-dev cppzmq-dev
  capnproto libcapnp-dev
  librocksdb-dev
  libgtest-dev libgmock-dev
  libcli11-dev libspdlog-dev nlohmann-json3-dev
  libbenchmark-dev libhiredis-dev libmemcached-dev
  pybind11-dev python3-dev python3-numpy python3-distributed python3-pytest
  yamllint dpkg-dev file iproute2
  libcpp-httplib-dev
  libsodium-dev
  libxxhash-dev
  libzookeeper-mt-dev
)

. "$(dirname "${BASH_SOURCE[0]}")/apt_packages.sh"
install_missing_packages install-deps "${packages[@]}"
