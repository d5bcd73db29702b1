#!/usr/bin/env bash
# Installs what the benchmark needs (only what is missing), builds, and runs bm-bench on
# 127.0.0.1, bounded in time. Arguments go to bm-bench, e.g.:
#   bench/run.sh --quick            # a fast smoke run (about a minute)
#   bench/run.sh                    # the full run (3 GiB block, 10M master blocks)
#   bench/run.sh --json > rows.json
# BUILD_DIR (default ./build) picks the build; BENCH_TIMEOUT (seconds) bounds the run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"

"$root/deploy/install-deps.sh" >&2

# The peers measured side by side with blockmgr.
peers=(redis-server redis-tools openssl memcached iperf3 rocksdb-tools)
missing=()
for p in "${peers[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >&2
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

BUILD_DIR="$build" "$root/deploy/build.sh" >&2

quick=0
for arg in "$@"; do [ "$arg" = "--quick" ] && quick=1; done
limit="${BENCH_TIMEOUT:-$([ $quick -eq 1 ] && echo 600 || echo 1800)}"

# timeout runs bm-bench in a process group of its own and signals the whole group when the
# limit passes; bm-bench stops the servers it started (by pid) when it finishes normally. On
# any other exit of this script, the group (its id is timeout's pid) is stopped here.
bench_pid=""
cleanup() {
  if [ -n "$bench_pid" ] && kill -0 "$bench_pid" 2>/dev/null; then
    kill -TERM -- "-$bench_pid" 2>/dev/null || true
    sleep 1
    kill -KILL -- "-$bench_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

timeout --kill-after=30 "$limit" "$build/bin/bm-bench" "$@" &
bench_pid=$!
status=0
wait "$bench_pid" || status=$?
bench_pid=""
if [ $status -eq 124 ]; then echo "bench: stopped after the ${limit} s limit" >&2; fi
exit $status
