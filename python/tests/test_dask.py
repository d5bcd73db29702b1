"""blockmgr.dask with a real distributed.LocalCluster (worker processes): partitions are
computed once, cached, and read back by other Dask clients in other processes."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import blockmgr
import blockmgr.dask

distributed = pytest.importorskip("distributed", reason="needs python3-distributed")
import dask_tasks  # noqa: E402  (this directory is on PYTHONPATH)


@pytest.fixture(scope="module")
def dask_client():
    # Worker processes, not threads: partitions are computed and cached in other processes.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                                  host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                  silence_logs=40) as cluster:
        with distributed.Client(cluster) as client:
            yield client


def test_persist_computes_each_partition_once_then_reads_the_cache(cluster, dask_client, tmp_path):
    path = str(tmp_path / "computed")
    bag = dask_tasks.bag_of_squares(path)
    cached = blockmgr.dask.persist(bag, master=cluster.master, rdd_id=21, name="squares")
    assert type(cached) is type(bag) and cached.npartitions == 4

    expected = [x * x for x in range(40)]
    assert cached.compute() == expected
    assert sorted(dask_tasks.computed(path)) == ["bag-0", "bag-10", "bag-20", "bag-30"]
    assert cached.compute() == expected
    assert len(dask_tasks.computed(path)) == 4  # the second run read every partition

    with blockmgr.Client(cluster.master) as client:
        rdd = next(r for r in client.rdds() if r.rdd_id == 21)
        assert (rdd.name, rdd.total_partitions, rdd.cached_partitions) == ("squares", 4, 4)
        assert [b.block for b in client.blocks(rdd=21)] == ["rdd_21_%d" % i for i in range(4)]


def test_persisted_arrays_keep_their_kind_and_values(cluster, dask_client, tmp_path):
    path = str(tmp_path / "computed")
    array = dask_tasks.array_scaled(path)
    cached = blockmgr.dask.persist(array, master=cluster.master, rdd_id=22)
    assert type(cached) is type(array) and cached.chunks == array.chunks

    expected = np.arange(4000, dtype=np.float64) * 2.0
    assert np.array_equal(cached.compute(), expected)
    assert np.array_equal(cached.sum().compute(), expected.sum())
    assert len(dask_tasks.computed(path)) == 4


def test_stored_partitions_are_read_as_views_of_the_block():
    value = {"a": np.arange(100000, dtype=np.int64), "b": "text"}
    parts = blockmgr.dask.dumps(value)
    # The array's memory is one of the parts itself, not a copy of it.
    assert any(isinstance(p, memoryview) and np.shares_memory(np.asarray(p), value["a"])
               for p in parts)
    block = b"".join(bytes(p) for p in parts)
    loaded = blockmgr.dask.loads(block)
    assert loaded["b"] == "text" and np.array_equal(loaded["a"], value["a"])
    assert np.shares_memory(loaded["a"], np.frombuffer(block, dtype=np.uint8))
    block_start = np.frombuffer(block, dtype=np.uint8).__array_interface__["data"][0]
    assert (loaded["a"].__array_interface__["data"][0] - block_start) % 64 == 0
    with pytest.raises(blockmgr.InvalidArgument):
        blockmgr.dask.loads(b"not a partition")


def test_partitions_plain_pickle_cannot_write_are_stored_with_cloudpickle():
    value = [lambda x: x * 3, np.ones(10)]
    loaded = blockmgr.dask.loads(b"".join(bytes(p) for p in blockmgr.dask.dumps(value)))
    assert loaded[0](2) == 6 and np.array_equal(loaded[1], value[1])


DRIVER = textwrap.dedent("""
    import os, sys, time
    import distributed
    import blockmgr.dask
    import dask_tasks

    scheduler, master, rdd_id, path, go_file = sys.argv[1:6]
    with distributed.Client(scheduler) as client:
        deadline = time.monotonic() + 60
        while go_file != "-" and not os.path.exists(go_file) and time.monotonic() < deadline:
            time.sleep(0.001)
        bag = dask_tasks.bag_of_squares(path, n=60, partitions=6)
        cached = blockmgr.dask.persist(bag, master=master, rdd_id=int(rdd_id))
        print(sum(cached.compute()))
""")


def run_driver(scheduler, master, rdd_id, path):
    """Computes the cached collection in a new process with a Dask client of its own."""
    driver = subprocess.run([sys.executable, "-c", DRIVER, scheduler, master, str(rdd_id), path,
                             "-"], capture_output=True, text=True, timeout=180)
    assert driver.returncode == 0, driver.stderr
    return int(driver.stdout)


def test_a_client_in_another_process_reads_the_cached_partitions(cluster, dask_client, tmp_path):
    path = str(tmp_path / "computed")
    expected = sum(x * x for x in range(60))
    scheduler = dask_client.scheduler.address
    assert run_driver(scheduler, cluster.master, 23, path) == expected
    assert len(dask_tasks.computed(path)) == 6
    assert run_driver(scheduler, cluster.master, 23, path) == expected
    assert len(dask_tasks.computed(path)) == 6


def test_two_clients_started_together_compute_each_partition_once(cluster, dask_client, tmp_path):
    # The drivers use two Dask clusters, so no scheduler can share their tasks: only blockmgr's
    # compute leases keep the partitions from being computed twice.
    path = str(tmp_path / "computed")
    go_file = str(tmp_path / "go")
    expected = sum(x * x for x in range(60))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                                  host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                  silence_logs=40) as other:
        drivers = [
            subprocess.Popen([sys.executable, "-c", DRIVER, scheduler, cluster.master, "24", path,
                              go_file], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for scheduler in (dask_client.scheduler.address, other.scheduler_address)
        ]
        open(go_file, "w").close()
        results = []
        for d in drivers:
            out, err = d.communicate(timeout=180)
            assert d.returncode == 0, err
            results.append(int(out))
    assert results == [expected, expected]
    assert sorted(dask_tasks.computed(path)) == ["bag-%d" % (10 * i) for i in range(6)]


def test_partitions_are_placed_on_their_cached_hosts_else_round_robin():
    cached = [["10.0.0.2", "10.0.0.3"], [], [], ["10.0.0.1"], [], []]
    # Uncached partitions go to the least used Dask host, counting the cached partitions.
    assert blockmgr.dask.place_partitions(cached, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]) == [
        ["10.0.0.2", "10.0.0.3"], ["10.0.0.3"], ["10.0.0.1"], ["10.0.0.1"], ["10.0.0.2"],
        ["10.0.0.3"]]
    assert blockmgr.dask.place_partitions([[], [], []], ["a", "b"]) == [["a"], ["b"], ["a"]]
    # Without a Dask cluster to spread over, uncached partitions run anywhere.
    assert blockmgr.dask.place_partitions([["h"], []], []) == [["h"], None]


def restrictions_on_scheduler(dask_scheduler):
    return {str(key): (sorted(ts.host_restrictions or ()), ts.loose_restrictions)
            for key, ts in dask_scheduler.tasks.items() if ts.host_restrictions}


def test_persisted_tasks_carry_their_hosts_to_the_scheduler(cluster, dask_client, tmp_path):
    path = str(tmp_path / "computed")
    bag = dask_tasks.bag_of_squares(path, n=40, partitions=4)
    ids = blockmgr.dask.partition_block_ids(bag, 25)
    assert blockmgr.dask.cached_hosts(cluster.master, 25, 4) == [[], [], [], []]

    # Not cached yet: a host of the Dask cluster's workers each, as layer annotations.
    cached = blockmgr.dask.persist(bag, master=cluster.master, rdd_id=25)
    (layer,) = cached.__dask_graph__().layers.values()
    keys = sorted(layer.keys())
    assert [layer.annotations["workers"](k) for k in keys] == [["127.0.0.1"]] * 4
    assert all(layer.annotations["allow_other_workers"](k) is True for k in keys)
    assert all(t[0].hosts == ["127.0.0.1"] for t in layer.values())

    # The scheduler gets them as loose host restrictions, also after low-level optimisation
    # fused the partition tasks into the tasks reading them (the layers are gone then).
    lengths = cached.map_partitions(len)
    held = dask_client.persist(lengths)
    distributed.wait(held)
    restricted = dask_client.run_on_scheduler(restrictions_on_scheduler)
    assert len(restricted) == 4, restricted
    assert all(r == (["127.0.0.1"], True) for r in restricted.values()), restricted
    del held

    # Cached: the hosts of the blockmgr workers holding each partition.
    assert blockmgr.dask.cached_hosts(cluster.master, 25, 4) == [["127.0.0.1"]] * 4
    again = blockmgr.dask.persist(bag, master=cluster.master, rdd_id=25, placement=False)
    (layer,) = again.__dask_graph__().layers.values()
    assert not layer.annotations
    assert len(ids) == 4
