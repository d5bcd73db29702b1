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
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
