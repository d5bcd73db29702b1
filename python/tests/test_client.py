"""blockmgr.Client against a real cluster: round trips, zero copy, errors, get_or_compute."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import blockmgr
from blockmgr.local import free_port

MiB = 1 << 20
SIZES = [0, 1, MiB, 64 * MiB]


def pattern(size, seed=0):
    return (np.arange(size, dtype=np.uint64) * 2654435761 + seed).astype(np.uint8)


def as_kind(array, kind):
    if kind == "bytes":
        return array.tobytes()
    if kind == "memoryview":
        return memoryview(bytearray(array.tobytes()))
    return array


@pytest.mark.parametrize("size", SIZES, ids=["0B", "1B", "1MiB", "64MiB"])
@pytest.mark.parametrize("kind", ["bytes", "memoryview", "numpy"])
def test_round_trip(client, size, kind):
    expected = pattern(size, seed=len(kind))
    block = "rdd_1_%d" % SIZES.index(size)
    put = client.put(block, as_kind(expected, kind), "MEMORY_ONLY")
    assert put.size == size
    assert put.worker_id in ("w1", "w2")

    got = client.get(block)
    assert len(got) == size
    assert np.array_equal(np.frombuffer(got, dtype=np.uint8), expected)
    assert got == expected.tobytes()


def test_get_returns_a_read_only_buffer_that_numpy_views_in_place(client):
    data = pattern(4 * MiB)
    client.put("rdd_2_0", data)
    got = client.get("rdd_2_0")

    view = memoryview(got)
    assert view.readonly and view.nbytes == data.nbytes
    first = np.frombuffer(got, dtype=np.uint8)
    second = np.frombuffer(got, dtype=np.uint8)
    # Both arrays are views of the one received block, not copies of it.
    assert np.shares_memory(first, second)
    assert first.__array_interface__["data"][0] == second.__array_interface__["data"][0]
    assert not first.flags.writeable
    with pytest.raises(ValueError):
        first[0] = 1
    # The array keeps the block alive after the Buffer's last other reference is gone.
    del got, view, second
    assert np.array_equal(first, data)


def test_a_held_block_is_never_overwritten_by_later_gets(client):
    # Gets receive into memory reused from Buffers already freed, never from live ones.
    first, second = pattern(3 * MiB, seed=1), pattern(3 * MiB, seed=2)
    client.put("rdd_2_2", first)
    client.put("rdd_2_3", second)
    held = np.frombuffer(client.get("rdd_2_2"), dtype=np.uint8)
    for _ in range(3):
        assert np.array_equal(np.frombuffer(client.get("rdd_2_3"), dtype=np.uint8), second)
        assert np.array_equal(held, first)


def test_put_sends_from_the_objects_own_memory(client):
    # While a put runs (GIL released), the bytearray stays exported to it: the client reads
    # the object's memory instead of a copy, so Python cannot resize it meanwhile.
    data = bytearray(pattern(64 * MiB).tobytes())
    exported = []
    for attempt in range(20):
        done = threading.Event()
        thread = threading.Thread(target=lambda: (client.put("rdd_2_4", data), done.set()))
        thread.start()
        while not done.is_set() and not exported:
            try:
                data.append(0)
                data.pop()
            except BufferError:
                exported.append(attempt)
        thread.join()
        if exported:
            break
    assert exported, "the put never held the bytearray's buffer"
    assert client.get("rdd_2_4") == data


def test_non_contiguous_arrays_are_stored_in_c_order(client):
    matrix = np.arange(64, dtype=np.int32).reshape(8, 8)
    client.put("rdd_2_1", matrix.T)
    assert np.array_equal(np.frombuffer(client.get("rdd_2_1"), dtype=np.int32).reshape(8, 8), matrix.T)


RSS_PROBE = textwrap.dedent("""
    import sys
    import numpy as np
    import blockmgr

    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024

    client = blockmgr.Client(sys.argv[1])
    client.workers()  # connected, so the get below is only the block
    before = status("VmRSS")
    block = client.get(sys.argv[2])
    array = np.frombuffer(block, dtype=np.uint8)
    assert np.shares_memory(array, np.frombuffer(block, dtype=np.uint8))
    print(len(block), before, status("VmRSS"), status("VmHWM"))
""")


def test_a_256_mib_get_holds_the_block_once(client, cluster):
    size = 256 * MiB
    client.put("rdd_3_0", np.full(size, 7, dtype=np.uint8), "MEMORY_ONLY")
    try:
        out = subprocess.run([sys.executable, "-c", RSS_PROBE, cluster.master, "rdd_3_0"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        length, before, after, peak = map(int, out.stdout.split())
        assert length == size
        # One copy of the block (plus at most a received range or two), never two copies.
        assert after - before >= 0.9 * size
        assert peak - before < 1.25 * size, (before, after, peak)
    finally:
        client.remove(["rdd_3_0"])


def test_a_same_host_get_is_the_workers_shared_memory_read_only(client, cluster):
    data = np.arange(2 * MiB, dtype=np.uint8)
    client.put("rdd_4_0", data, "MEMORY_ONLY")
    try:
        block = client.get("rdd_4_0")
        with open("/proc/self/maps") as maps:
            assert "memfd:bm-block rdd_4_0" in maps.read(), "the get copied instead of mapping"
        array = np.frombuffer(block, dtype=np.uint8)
        assert np.array_equal(array, data)
        assert memoryview(block).readonly
        with pytest.raises(ValueError):
            array[0] = 1
        with blockmgr.Client(cluster.master, local_reads=False) as over_tcp:
            assert np.array_equal(np.frombuffer(over_tcp.get("rdd_4_0"), dtype=np.uint8), data)
        del array, block
    finally:
        client.remove(["rdd_4_0"])


def test_unknown_block_raises_not_found_with_bmctls_message(client):
    with pytest.raises(blockmgr.NotFound) as raised:
        client.get("rdd_404_0")
    assert isinstance(raised.value, blockmgr.Error)
    assert str(raised.value).startswith("not found: ")
    assert "rdd_404_0" in str(raised.value)


def test_bad_ids_and_levels_raise_invalid_argument(client):
    with pytest.raises(blockmgr.InvalidArgument):
        client.get("rdd_x")
    with pytest.raises(ValueError):
        client.put("rdd_5_0", b"x", "MEMORY_SOMETIMES")
    with pytest.raises(TypeError):
        client.put("rdd_5_0", 12345)
    with pytest.raises(TypeError):
        client.get(3.5)


def test_a_stated_compute_cost_keeps_an_expensive_block_in_memory(bin_dir):
    from blockmgr.local import LocalCluster
    # Room for four 1 MiB blocks; the worker evicts by cost (its default).
    with LocalCluster(workers=1, memory="4MiB", bin_dir=bin_dir) as small:
        with blockmgr.Client(small.master) as c:
            block = b"x" * MiB
            c.put("rdd_1_0", block, "MEMORY_ONLY", compute_cost=5.0)
            for rdd in (2, 3, 4):
                c.put("rdd_%d_0" % rdd, block, "MEMORY_ONLY", compute_cost=0.01)
            c.put("rdd_5_0", block, "MEMORY_ONLY")  # no cost: weighed at the median

            def held(block_id):
                try:
                    c.get(block_id)
                    return True
                except blockmgr.NotFound:
                    return False

            # The oldest block stays: it is the expensive one. One cheap block made room.
            assert held("rdd_1_0")
            assert held("rdd_5_0")
            assert sum(held("rdd_%d_0" % rdd) for rdd in (2, 3, 4)) == 2
            with pytest.raises(ValueError):
                c.put("rdd_6_0", b"x", "MEMORY_ONLY", compute_cost=-1.0)


def test_unreachable_master_raises_unavailable_within_the_timeout():
    client = blockmgr.Client("tcp://127.0.0.1:%d" % free_port(), timeout=0.5)
    start = time.monotonic()
    with pytest.raises(blockmgr.Unavailable) as raised:
        client.workers()
    assert time.monotonic() - start < 3.0
    assert isinstance(raised.value, ConnectionError)


def test_the_master_comes_from_the_environment_or_zookeeper(cluster, monkeypatch):
    monkeypatch.delenv("BLOCKMGR_MASTER", raising=False)
    monkeypatch.delenv("BLOCKMGR_ZOOKEEPER", raising=False)
    with pytest.raises(ValueError, match="give master .* or zookeeper"):
        blockmgr.Client()
    monkeypatch.setenv("BLOCKMGR_MASTER", cluster.master)
    with blockmgr.Client() as client:
        assert len(client.workers()) == 2
    # A ZooKeeper nobody answers at: calls wait for a leader, then say so.
    monkeypatch.delenv("BLOCKMGR_MASTER")
    client = blockmgr.Client(zookeeper="127.0.0.1:%d" % free_port(), timeout=0.5,
                             leader_wait=1.0)
    with pytest.raises(blockmgr.Unavailable, match="ZooKeeper"):
        client.workers()


def test_network_waits_release_the_gil():
    client = blockmgr.Client("tcp://127.0.0.1:%d" % free_port(), timeout=1.0)
    done = threading.Event()
    spins = 0

    def wait_for_master():
        with pytest.raises(blockmgr.Unavailable):
            client.ping()
        done.set()

    thread = threading.Thread(target=wait_for_master)
    thread.start()
    while not done.is_set():
        spins += 1
    thread.join()
    # With the GIL held for the second the call waits, this thread could not have run.
    assert spins > 10000


def test_metadata_calls(client):
    assert [w.id for w in client.workers()] == ["w1", "w2"]
    client.put((6, 0), b"a" * 100)
    client.put("rdd_6_1", b"b" * 200, "MEMORY_AND_DISK_2")
    client.register_rdd(6, "six", "MEMORY_AND_DISK", 3)

    locations = client.locations(["rdd_6_0", "rdd_6_1", "rdd_6_2"])
    assert [l.block for l in locations] == ["rdd_6_0", "rdd_6_1", "rdd_6_2"]
    assert [len(l.locations) for l in locations] == [1, 2, 0]
    assert locations[1].locations[0].size == 200

    assert [b.block for b in client.blocks(rdd=6)] == ["rdd_6_0", "rdd_6_1"]
    rdd = next(r for r in client.rdds() if r.rdd_id == 6)
    assert (rdd.name, rdd.total_partitions, rdd.cached_partitions) == ("six", 3, 2)

    got = client.get_many(["rdd_6_1", "rdd_6_2", "rdd_6_0"])
    assert [None if g is None else bytes(g) for g in got] == [b"b" * 200, None, b"a" * 100]

    assert client.remove(["rdd_6_0", "rdd_6_9"]) == 1
    assert client.remove_rdd(6) == 1
    assert client.blocks(rdd=6) == []


def test_threads_share_a_client(client):
    errors = []

    def worker(n):
        try:
            for i in range(20):
                data = pattern(1000 + i, seed=n)
                client.put("rdd_7_%d" % (n * 100 + i), data)
                assert np.array_equal(np.frombuffer(client.get("rdd_7_%d" % (n * 100 + i)), np.uint8), data)
        except Exception as e:  # reported below, with the thread's failure
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    client.remove_rdd(7)


def test_get_or_compute_computes_once_then_reads(client):
    calls = []

    def compute():
        calls.append(1)
        return [b"head-", np.arange(10, dtype=np.uint8)]

    first = client.get_or_compute("rdd_8_0", "MEMORY_ONLY", compute)
    second = client.get_or_compute("rdd_8_0", "MEMORY_ONLY", compute)
    assert bytes(first) == bytes(second) == b"head-" + bytes(range(10))
    assert len(calls) == 1
    counters = client.counters
    assert (counters.computes, counters.hits) == (1, 1)


def test_get_or_compute_reraises_the_functions_exception(client):
    def fail():
        raise KeyError("no such partition")

    with pytest.raises(KeyError, match="no such partition"):
        client.get_or_compute("rdd_8_1", "MEMORY_ONLY", fail)
    with pytest.raises(TypeError):
        client.get_or_compute("rdd_8_1", "MEMORY_ONLY", lambda: 42)
    # The lease was given up: the next call computes at once.
    assert bytes(client.get_or_compute("rdd_8_1", "MEMORY_ONLY", lambda: b"ok")) == b"ok"


def test_a_compute_function_cannot_reenter_its_own_client(client):
    with pytest.raises(ValueError, match="its own get_or_compute"):
        client.get_or_compute("rdd_8_2", "MEMORY_ONLY", lambda: client.get("rdd_8_0"))


GOC_PROCESS = textwrap.dedent("""
    import os, sys, time
    import blockmgr

    master, go_file, count_file = sys.argv[1:4]
    client = blockmgr.Client(master)
    client.workers()
    deadline = time.monotonic() + 30
    while not os.path.exists(go_file) and time.monotonic() < deadline:
        time.sleep(0.001)

    def compute():
        with open(count_file, "a") as f:
            f.write("%d\\n" % os.getpid())
        return b"computed by %d" % os.getpid() * 1000

    block = client.get_or_compute("rdd_9_0", "MEMORY_AND_DISK", compute)
    c = client.counters
    print(c.computes, c.waits + c.hits, bytes(block)[:40].decode())
""")


def test_get_or_compute_from_8_processes_computes_once(cluster, tmp_path):
    go_file = tmp_path / "go"
    count_file = tmp_path / "computed"
    processes = [
        subprocess.Popen([sys.executable, "-c", GOC_PROCESS, cluster.master, str(go_file),
                          str(count_file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for _ in range(8)
    ]
    go_file.write_text("go")
    outputs = [p.communicate(timeout=120) for p in processes]
    for p, (out, err) in zip(processes, outputs):
        assert p.returncode == 0, err
    results = [out.split(maxsplit=2) for out, _ in outputs]

    assert len(count_file.read_text().split()) == 1
    assert sum(int(r[0]) for r in results) == 1  # computes
    assert sum(int(r[1]) for r in results) == 7  # waited for it, or read it
    assert len({r[2] for r in results}) == 1     # everyone got the same bytes


LEASE_PROCESS = textwrap.dedent("""
    import os, sys, time
    import blockmgr

    master, role, computing_file, count_file = sys.argv[1:5]
    client = blockmgr.Client(master, compute_lease=0.5)
    client.workers()

    def compute():
        with open(count_file, "a") as f:
            f.write(role + "\\n")
        open(computing_file, "w").close()
        # Python work holding the GIL for three leases: only the client's renewer thread,
        # which needs no GIL, keeps the lease from passing to the waiting process.
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            pass
        return b"computed by " + role.encode()

    if role == "waiter":
        deadline = time.monotonic() + 30
        while not os.path.exists(computing_file) and time.monotonic() < deadline:
            time.sleep(0.001)
    print(bytes(client.get_or_compute("rdd_10_0", "MEMORY_ONLY", compute)).decode())
""")


def test_the_lease_is_renewed_while_a_python_function_holds_the_gil(cluster, tmp_path):
    args = [str(tmp_path / "computing"), str(tmp_path / "computed")]
    waiter = subprocess.Popen([sys.executable, "-c", LEASE_PROCESS, cluster.master, "waiter", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    computer = subprocess.run([sys.executable, "-c", LEASE_PROCESS, cluster.master, "computer",
                               *args], capture_output=True, text=True, timeout=60)
    waited, err = waiter.communicate(timeout=60)
    assert computer.returncode == 0, computer.stderr
    assert waiter.returncode == 0, err
    assert (tmp_path / "computed").read_text().split() == ["computer"]
    assert computer.stdout.strip() == waited.strip() == "computed by computer"
