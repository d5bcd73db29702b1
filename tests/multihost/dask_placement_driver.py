"""The driver of MultiHostDaskTest (dask_multihost_test.cc), run inside host 0's namespace.

Persists a dask.bag of PARTITIONS partitions through blockmgr.dask.persist, computes it once
(each partition is computed and cached), then computes the same collection again (each
partition tagged with the host of the Dask worker that read it), reading every bm-worker's
/metrics before and after the second computation. Prints one JSON object: the block reads the
workers counted as local and as remote during the second computation, and, for diagnosis, how
many partitions were read on a host holding their block.

    dask_placement_driver.py SCHEDULER MASTER PARTITIONS WORKERS METRICS_URL...
"""

import json
import re
import sys
import urllib.request

import dask.bag as db
import distributed

import blockmgr.dask

READS = re.compile(r'^blockmgr_worker_block_reads_total\{origin="(local|remote)"\}\s+(\S+)$',
                   re.MULTILINE)


def block_reads(urls):
    """{"local": n, "remote": n} summed over the workers' /metrics."""
    total = {"local": 0, "remote": 0}
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        for origin, value in READS.findall(text):
            total[origin] += int(float(value))
    return total


def tag_with_host(partition):
    """[(index of the partition, host of the Dask worker that read it)]: the value of the
    second computation, so the driver can also tell where each partition was read."""
    items = list(partition)
    return [(items[0] // 2000, distributed.get_worker().address.split("://")[1].rsplit(":", 1)[0])]


def main():
    scheduler, master, partitions, workers = sys.argv[1:5]
    metrics_urls = sys.argv[5:]
    partitions, workers = int(partitions), int(workers)
    with distributed.Client(scheduler) as client:
        client.wait_for_workers(workers, timeout=60)
        bag = db.from_sequence(range(partitions * 1000), npartitions=partitions)
        cached = blockmgr.dask.persist(bag.map_partitions(lambda p: [x * 2 for x in p]),
                                       master=master, rdd_id=31)
        first = sum(cached.compute())
        before = block_reads(metrics_urls)
        read_on = cached.map_partitions(tag_with_host).compute()
        after = block_reads(metrics_urls)
        located = blockmgr.dask.cached_hosts(master, 31, partitions)
    print(json.dumps({
        "sum": first,
        "local": after["local"] - before["local"],
        "remote": after["remote"] - before["remote"],
        # Diagnosis: partitions whose task ran on a host holding their block.
        "read_where_cached": sum(1 for i, host in read_on if host in located[i]),
        "read_on": read_on,
        "block_hosts": located,
    }))



if __name__ == "__main__":
    main()
