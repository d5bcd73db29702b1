#!/usr/bin/python3
"""Word count over Dask, with its partitions cached in blockmgr.

    PYTHONPATH=build/python examples/python/wordcount_dask.py --bin-dir build/bin
    PYTHONPATH=build/python examples/python/wordcount_dask.py --master tcp://10.0.0.1:7077

1. Counts the words of each split of a corpus on a distributed.LocalCluster of several worker
   processes, caching the per-split counts in blockmgr (RDD --rdd-id), and merges them.
2. Runs the same job again in a new Dask cluster: every partition is read from blockmgr, none
   is computed.
3. Runs it a third time, killing one Dask worker process while the job runs: Dask reruns that
   worker's tasks elsewhere, and they read the partitions from blockmgr (which holds them
   outside Dask's workers) instead of computing them again.

Without --master it starts a blockmgr cluster of its own (bm-master and two bm-workers from
--bin-dir) and stops it at the end. Exits non-zero if a check fails.
"""

import argparse
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dask.bag as db  # noqa: E402
import distributed  # noqa: E402

import blockmgr  # noqa: E402
import blockmgr.dask  # noqa: E402
import wordcount_tasks  # noqa: E402


def word_counts(args, log_dir):
    lines = db.from_sequence(range(args.splits), npartitions=args.splits).map_partitions(
        lambda splits: [line for s in splits for line in wordcount_tasks.make_lines(s, args.lines)])
    return lines.map_partitions(wordcount_tasks.count_words, log_dir)


def computed(log_dir):
    return len(os.listdir(log_dir))


def new_dask_cluster(args):
    # PYTHONPATH reaches the worker processes, so they import wordcount_tasks too.
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    return distributed.LocalCluster(n_workers=args.dask_workers, threads_per_worker=1,
                                    processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                    silence_logs=40)


def run(args, master, log_dir, kill_a_worker=False):
    with new_dask_cluster(args) as cluster, distributed.Client(cluster) as client:
        counts = blockmgr.dask.persist(word_counts(args, log_dir), master=master,
                                       rdd_id=args.rdd_id, name="wordcount-splits",
                                       level="MEMORY_AND_DISK")
        totals = counts.map_partitions(wordcount_tasks.slow_total,
                                       args.delay if kill_a_worker else 0.0)
        start = time.monotonic()
        future = client.compute(totals.fold(wordcount_tasks.merge, initial={}))
        if kill_a_worker:
            # Wait until tasks run, then kill the process of one worker that runs some.
            deadline = time.monotonic() + 60
            busy = {}
            while not busy and time.monotonic() < deadline:
                busy = {w: t for w, t in client.processing().items() if t}
                time.sleep(0.01)
            if not busy:
                raise RuntimeError("no Dask worker was running a task to kill (raise --delay)")
            victim = sorted(busy)[0]
            pid = client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)
            print("  killed Dask worker %s (pid %d) while it ran %d tasks" % (victim, pid, len(busy[victim])))
        result = future.result()
        return result, time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--master", help="a running bm-master; default: start a local cluster")
    parser.add_argument("--bin-dir", help="where bm-master and bm-worker are (else BM_BIN_DIR, PATH)")
    parser.add_argument("--rdd-id", type=int, default=42)
    parser.add_argument("--splits", type=int, default=8)
    parser.add_argument("--lines", type=int, default=20000, help="lines per split")
    parser.add_argument("--dask-workers", type=int, default=3)
    parser.add_argument("--delay", type=float, default=1.0,
                        help="seconds each task of run 3 takes, so a worker dies mid-run")
    args = parser.parse_args()

    local = None
    master = args.master
    if not master:
        from blockmgr.local import LocalCluster

        local = LocalCluster(workers=2, memory="256MiB", bin_dir=args.bin_dir)
        master = local.master
    failures = []
    try:
        blockmgr.dask.unpersist(master, args.rdd_id)
        with tempfile.TemporaryDirectory() as log_dir:
            first, seconds = run(args, master, log_dir)
            top = sorted(first.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
            print("run 1: %d words, %d distinct, %d partitions computed, %.2f s" % (
                sum(first.values()), len(first), computed(log_dir), seconds))
            print("  top: " + ", ".join("%s=%d" % kv for kv in top))
            if computed(log_dir) != args.splits:
                failures.append("run 1 computed %d partitions, not %d" % (computed(log_dir), args.splits))

            second, seconds = run(args, master, log_dir)
            print("run 2: %d partitions computed (the rest read from blockmgr), %.2f s" % (
                computed(log_dir) - args.splits, seconds))
            if second != first or computed(log_dir) != args.splits:
                failures.append("run 2 did not read every partition from the cache")

            print("run 3: killing a Dask worker mid-run")
            third, seconds = run(args, master, log_dir, kill_a_worker=True)
            print("run 3: %d partitions computed, same counts: %s, %.2f s" % (
                computed(log_dir) - args.splits, third == first, seconds))
            if third != first or computed(log_dir) != args.splits:
                failures.append("run 3 lost cached partitions with its worker")

        with blockmgr.Client(master) as client:
            rdd = next(r for r in client.rdds() if r.rdd_id == args.rdd_id)
            print("blockmgr: rdd %d '%s': %d/%d partitions cached, %d bytes in memory" % (
                rdd.rdd_id, rdd.name, rdd.cached_partitions, rdd.total_partitions, rdd.memory_bytes))
    finally:
        if local:
            local.close()
    for failure in failures:
        print("FAILED: " + failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
