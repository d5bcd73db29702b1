#!/usr/bin/env bash
# The main job: install what is missing, build, launch a local master and two workers, and
# walk through blockmgr's basics with bmctl, then run the cached word count twice (the second
# run reads every partition from the cache). Pass --keep to leave the cluster running.
# BUILD_DIR chooses the build directory (default ./build), as for deploy/build.sh.
#
# It installs only the packages building the servers needs (install-deps.sh --servers) and
# builds only what it runs, not the tests and benchmarks, which tests/run.sh installs and
# builds: the servers and bmctl first, then bm-wordcount once the first blocks are stored. It
# prints how long each phase took (installing packages, building, the demo's steps) and when
# the first block was stored.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
keep=0
[ "${1:-}" = "--keep" ] && keep=1

started=$SECONDS
phase_started=$SECONDS
phases=()
# Records how long the phase that just ended took, and prints it.
end_phase() {
  local line
  line=$(printf '%-13s %4d s' "$1" $((SECONDS - phase_started)))
  phases+=("$line")
  echo "demo: $1 took $((SECONDS - phase_started)) s ($((SECONDS - started)) s since the start)"
  phase_started=$SECONDS
}

"$root/deploy/install-deps.sh" --servers
end_phase packages
# A first build compiles the libraries in unity batches (CMakeLists.txt, BM_UNITY_BUILD) with
# Ninja, which compiles a library's sources while the libraries below it still link, so both
# cores stay busy: 0.42x the time of a file-by-file build with Make
# (bench/notes/2026-12-05-fresh-machine.md). A folder configured before keeps its own choices.
first=()
if [ ! -f "${BUILD_DIR:-$root/build}/CMakeCache.txt" ]; then
  first=(-DBM_UNITY_BUILD=ON)
  if command -v ninja >/dev/null; then first+=(-G Ninja); fi
fi
"$root/deploy/build.sh" --target bm-master --target bm-worker --target bmctl "${first[@]}"
end_phase build

bin="${BUILD_DIR:-$root/build}/bin"
run_dir="$root/run"
"$root/deploy/cluster.sh" stop --run-dir "$run_dir" >/dev/null 2>&1 || true
"$root/deploy/cluster.sh" start --workers 2 --memory 64MiB --run-dir "$run_dir" --bin "$bin"
master="$(cat "$run_dir/master.addr")"
# The cluster runs with keys: bmctl and bm-wordcount use the admin key cluster.sh made.
. "$run_dir/env"
[ $keep = 1 ] || trap '"$root/deploy/cluster.sh" stop --run-dir "$run_dir"' EXIT

bmctl() { echo "+ bmctl $*" >&2; "$bin/bmctl" --master "$master" "$@"; }

work="$run_dir/demo"
mkdir -p "$work"
# Partitions of "RDD 1": four 2 MiB blocks of random bytes, cached in memory (spill to disk).
for p in 0 1 2 3; do
  head -c $((2 * 1024 * 1024)) /dev/urandom >"$work/part-$p"
  bmctl put "rdd_1_$p" "$work/part-$p" --level MEMORY_AND_DISK
  if [ "$p" = 0 ]; then echo "demo: first block stored $((SECONDS - started)) s after the start"; fi
done
# A broadcast variable on disk only, and a shuffle block.
echo "the quick brown fox" | bmctl put broadcast_0 - --level DISK_ONLY
head -c 100000 /dev/urandom | bmctl put shuffle_0_1_2 - --level MEMORY_ONLY

bmctl workers
bmctl locations rdd_1_0 rdd_1_3 broadcast_0
bmctl rdds
bmctl blocks

bmctl get rdd_1_2 -o "$work/part-2.back"
cmp "$work/part-2" "$work/part-2.back" && echo "demo: rdd_1_2 came back byte-exact"

bmctl rm-rdd 1
bmctl blocks

# The example computation: word counts over a generated 32 MiB text in 16 partitions, the
# per-partition counts cached as RDD 100. The first run computes and caches them; the second,
# another process, reads them all from the cache. Each run ends with its summary line.
end_phase basics
"$root/deploy/build.sh" --target bm-wordcount
end_phase build-example
corpus="$work/corpus.txt"
"$bin/bm-wordcount" generate --output "$corpus" --size 32MiB --seed 42
"$bin/bm-wordcount" unpersist --master "$master" --rdd-id 100 >/dev/null  # start uncached
wordcount() {
  local run=$1
  shift
  echo "+ bm-wordcount run --master $master --input $corpus --partitions 16 --rdd-id 100 $*" >&2
  "$bin/bm-wordcount" run --master "$master" --input "$corpus" --partitions 16 --rdd-id 100 \
    "$@" | tee "$work/wordcount-$run.out"
}
wordcount 1
# The second run reads the cached counts and merges them through a shuffle of 4 reducers
# (README "Shuffles"): the same checksum line.
wordcount 2 --reducers 4
bmctl rdds
echo "demo: word count, first run:  $(tail -1 "$work/wordcount-1.out")"
echo "demo: word count, cached run, through a shuffle: $(tail -1 "$work/wordcount-2.out")"
if [ "$(tail -2 "$work/wordcount-1.out" | head -1)" != "$(tail -2 "$work/wordcount-2.out" | head -1)" ]; then
  echo "demo: the shuffled counts differ from the first run's" >&2
  exit 1
fi
# Leave no cached counts behind for a later run on another input (see README).
"$bin/bm-wordcount" unpersist --master "$master" --rdd-id 100
end_phase wordcount
echo "demo: done in $((SECONDS - started)) s:"
printf '  %s\n' "${phases[@]}"
if [ $keep = 1 ]; then
  echo "cluster left running: $bin/bmctl --master $master workers; stop with deploy/cluster.sh stop"
fi
