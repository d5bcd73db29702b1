#!/usr/bin/env bash
# Configures and builds blockmgr into ./build (or $BUILD_DIR).
#
#   deploy/build.sh [--target T]... [CMAKE_ARGS...]
#
# Without --target it builds everything (the servers, bmctl, the examples, the tests and the
# benchmarks: what tests/run.sh needs); with --target only those targets and what they link
# (deploy/demo.sh builds only what it runs). Other arguments go to cmake's configure step.
# ccache, when installed, caches the compiler's output across builds and build folders.
# The demo configures a fresh folder with -G Ninja -DBM_UNITY_BUILD=ON (a first build's time).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
targets=()
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --target) targets+=(--target "$2"); shift 2 ;;
    *) cmake_args+=("$1"); shift ;;
  esac
done
launcher=()
# At the first configure only: a build folder configured without it stays so.
if [ ! -f "$build/CMakeCache.txt" ] && command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "${launcher[@]}" \
  "${cmake_args[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
echo "build: binaries in $build/bin"
