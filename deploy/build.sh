#!/usr/bin/env bash
# Configures and builds blockmgr into ./build (or $BUILD_DIR).
#
#   deploy/build.sh [--target T]... [CMAKE_ARGS...]
#
# Without --target it builds everything (the servers, bmctl, the examples, the tests and the
# benchmarks: what tests/run.sh needs); with --target only those targets and what they link
# (deploy/demo.sh builds only what it runs). Other arguments go to cmake's configure step.
# ccache, when installed, caches the compiler's output across builds and build folders.
# -DBM_UNITY_BUILD=ON compiles the libraries in unity batches (a first build's time; the demo's).
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
first=()
# At the first configure only (a build folder keeps what it was configured with): Ninja when
# installed (install-deps.sh installs it), which compiles a library's sources while the libraries
# below it still link, so both cores stay busy; ccache when installed.
if [ ! -f "$build/CMakeCache.txt" ]; then
  generator_given=0
  for arg in "${cmake_args[@]}"; do case "$arg" in -G*) generator_given=1 ;; esac; done
  if [ $generator_given = 0 ] && [ -z "${CMAKE_GENERATOR:-}" ] && command -v ninja >/dev/null; then
    first+=(-G Ninja)
  fi
  if command -v ccache >/dev/null; then
    first+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  fi
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "${first[@]}" \
  "${cmake_args[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
echo "build: binaries in $build/bin"
