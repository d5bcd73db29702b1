"""Cache the partitions of Dask collections in blockmgr.

    import blockmgr.dask
    cached = blockmgr.dask.persist(bag, master="tcp://127.0.0.1:7700", rdd_id=7)
    cached.count().compute()   # computes each partition once, caches it as rdd_7_<i>
    cached.count().compute()   # reads the cached partitions

``persist`` returns a collection of the same kind (array, bag, dataframe, delayed) with one
task per partition. Each task asks blockmgr for its partition (``Client.get_or_compute``):
when a worker holds it, the partition is read from there instead of being computed; otherwise
the task computes it (running the partition's part of the original graph inside the task, on
the Dask worker) and stores it. Across Dask clients, clusters and processes that use the same
``rdd_id``, each partition is computed once: concurrent tasks for the same partition wait for
the one computing it.

Partitions are stored with pickle protocol 5 and its out-of-band buffers laid out after the
pickle in one block, so NumPy and pandas data is copied once into the block when stored, and
read back as views of the received block (read-only arrays) without another copy.

Each partition's task is placed where its partition lives, as Spark schedules a task on the
executor holding its cached block: ``persist`` asks the master once where the RDD's blocks are
and gives each task a Dask worker restriction to the host(s) of the blockmgr workers holding
its partition (memory copies first), with ``allow_other_workers=True``, so a busy or missing
host delays nothing: the task then runs elsewhere and reads the partition over the network. A
partition not cached yet is pre-assigned a host of the active ``distributed`` client's workers,
round-robin (no restriction without a distributed client): its first computation runs there and
stores it on that host's blockmgr worker (puts prefer a worker on the client's own host), so a
later computation of the same collection runs there again and reads it locally. The hosts are
the host parts of the addresses (``10.0.0.5``), which Dask matches against its workers' hosts:
run each Dask worker on the host of its blockmgr worker, on the same interface. The
restrictions are layer annotations of the returned collection, and a graph optimisation
(installed in ``dask.config`` "optimizations" by the first ``persist``) puts them back on the
partition tasks after Dask's low-level optimisation (fusion) has dropped the layers.
``placement=False`` leaves tasks where Dask puts them.

Upstream tasks that several partitions share (an aggregation feeding every partition) run once
per partition that is computed; persist such a collection with ``dask.persist`` first, or cache
the collection after the shared step.
"""

from __future__ import annotations

import pickle
import struct
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import STORAGE_LEVELS, _blockmgr

__all__ = [
    "persist", "unpersist", "partition_block_ids", "cached_hosts", "place_partitions",
    "restore_placement", "dumps", "loads",
]

DEFAULT_LEVEL = "MEMORY_AND_DISK"

# ---- the stored form of a partition ----
#
#   magic "BMP5", then little-endian u32 buffer count n, u64 pickle length, n x u64 buffer
#   lengths; then the pickle; then each out-of-band buffer, starting at a multiple of 64 bytes
#   from the block's start (so arrays read in place are aligned).

_MAGIC = b"BMP5"
_ALIGN = 64


def _pad(offset: int) -> int:
    return (-offset) % _ALIGN


def dumps(value: Any) -> List[Any]:
    """``value`` as a list of bytes-like parts whose concatenation is the stored block; the
    out-of-band buffers are the objects' own memory, not copies."""
    buffers: List[pickle.PickleBuffer] = []
    try:
        body = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    except (pickle.PicklingError, AttributeError, TypeError):
        # Values holding lambdas or local classes: cloudpickle (which Dask uses for tasks)
        # writes a pickle that plain pickle.loads reads back.
        import cloudpickle

        buffers = []
        body = cloudpickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    header = struct.pack(
        "<4sIQ%dQ" % len(raws), _MAGIC, len(raws), len(body), *[r.nbytes for r in raws]
    )
    parts: List[Any] = [header, body]
    offset = len(header) + len(body)
    for raw in raws:
        pad = _pad(offset)
        if pad:
            parts.append(bytes(pad))
        parts.append(raw)
        offset += pad + raw.nbytes
    return parts


def loads(block: Any) -> Any:
    """The value a block written by :func:`dumps` holds; its out-of-band buffers are views of
    ``block`` (which they keep alive), not copies."""
    view = memoryview(block).cast("B")
    if len(view) < 16 or bytes(view[:4]) != _MAGIC:
        raise _blockmgr.InvalidArgument("not a partition stored by blockmgr.dask")
    count, body_length = struct.unpack_from("<IQ", view, 4)
    lengths = struct.unpack_from("<%dQ" % count, view, 16)
    offset = 16 + 8 * count
    body = view[offset : offset + body_length]
    offset += body_length
    buffers = []
    for length in lengths:
        offset += _pad(offset)
        buffers.append(view[offset : offset + length])
        offset += length
    if offset != len(view):
        raise _blockmgr.InvalidArgument("a stored partition's size does not match its header")
    return pickle.loads(body, buffers=buffers)


# ---- clients in Dask worker processes ----

# One blockmgr client per thread and master: a Dask worker runs tasks on several threads, and a
# client serves one call at a time (get_or_compute holds it while the partition is computed).
_local = threading.local()


def _client(master: str, options: Dict[str, Any]) -> _blockmgr.Client:
    clients = getattr(_local, "clients", None)
    if clients is None:
        clients = _local.clients = {}
    key = (master, tuple(sorted(options.items())))
    client = clients.get(key)
    if client is None:
        client = clients[key] = _blockmgr.Client(master, **options)
    return client


class CachedPartition:
    """The task of one cached partition: reads block ``rdd_<rdd_id>_<index>`` from blockmgr,
    or computes the partition from ``graph`` and stores it. Picklable, so Dask ships it to its
    workers."""

    def __init__(
        self,
        master: str,
        rdd_id: int,
        index: int,
        level: str,
        graph: Dict[Any, Any],
        key: Any,
        client_options: Dict[str, Any],
        hosts: Optional[List[str]] = None,
    ) -> None:
        self.master = master
        self.rdd_id = rdd_id
        self.index = index
        self.level = level
        self.graph = graph
        self.key = key
        self.client_options = client_options
        # The hosts this task should run on (None: anywhere); see place_partitions.
        self.hosts = hosts

    @property
    def block_id(self) -> str:
        return "rdd_%d_%d" % (self.rdd_id, self.index)

    def __call__(self) -> Any:
        import dask.core

        computed: List[Any] = []

        def compute() -> List[Any]:
            value = dask.core.get(self.graph, self.key)
            computed.append(value)
            return dumps(value)

        client = _client(self.master, self.client_options)
        block = client.get_or_compute(self.block_id, self.level, compute)
        # The partition computed here is returned as it is rather than read back from bytes.
        return computed[0] if computed else loads(block)

    def __repr__(self) -> str:
        return "CachedPartition(%s)" % self.block_id


# ---- placement: the hosts each partition's task should run on ----


def _host_of(address: str) -> str:
    """The host part of a blockmgr or Dask address: "10.0.0.5" for "tcp://10.0.0.5:7701",
    "fd00::1" for "tcp://[fd00::1]:7701"."""
    rest = address.split("://", 1)[-1]
    if rest.startswith("["):
        return rest[1 : rest.find("]")]
    return rest.rsplit(":", 1)[0]


def cached_hosts(master: str, rdd_id: int, partitions: int,
                 **client_options: Any) -> List[List[str]]:
    """For each partition of RDD ``rdd_id``, the hosts of the blockmgr workers holding it:
    memory copies first, each host once; empty when it is not cached. One call to the master
    (Dask's counterpart of Spark's ``getPreferredLocations``)."""
    ids = ["rdd_%d_%d" % (rdd_id, i) for i in range(partitions)]
    with _blockmgr.Client(master, **client_options) as client:
        blocks = client.locations(ids)
    hosts: List[List[str]] = []
    for block in blocks:
        ordered = [l for l in block.locations if l.tier == "memory"]
        ordered += [l for l in block.locations if l.tier != "memory"]
        partition_hosts: List[str] = []
        for location in ordered:
            host = _host_of(location.address)
            if host and host not in partition_hosts:
                partition_hosts.append(host)
        hosts.append(partition_hosts)
    return hosts


def _dask_worker_hosts() -> List[str]:
    """The hosts of the active distributed client's workers, sorted; empty without one."""
    try:
        from distributed import get_client
        client = get_client()
    except (ImportError, ValueError):
        return []
    workers = client.scheduler_info().get("workers", {})
    return sorted({_host_of(address) for address in workers})


def place_partitions(cached: List[List[str]], dask_hosts: List[str]) -> List[Optional[List[str]]]:
    """Where each partition's task should run: the hosts holding it when cached; otherwise one
    of ``dask_hosts``, the least used so far (counting the cached partitions on it), earliest
    first, which is round-robin when nothing is cached; None (anywhere) without ``dask_hosts``."""
    load = {host: 0 for host in dask_hosts}
    for hosts in cached:
        if hosts and hosts[0] in load:
            load[hosts[0]] += 1
    placed: List[Optional[List[str]]] = []
    for hosts in cached:
        if hosts:
            placed.append(list(hosts))
        elif dask_hosts:
            host = min(dask_hosts, key=lambda h: load[h])  # min keeps the first of equals
            load[host] += 1
            placed.append([host])
        else:
            placed.append(None)
    return placed


def _cached_partitions_in(task: Any, found: List["CachedPartition"], depth: int = 0) -> None:
    """The CachedPartition objects inside a (possibly fused) task."""
    if depth > 32:
        return
    if isinstance(task, CachedPartition):
        found.append(task)
    elif isinstance(task, (tuple, list)):
        for part in task:
            _cached_partitions_in(part, found, depth + 1)
    else:
        inner = getattr(task, "dsk", None)  # SubgraphCallable: Blockwise fusion
        if isinstance(inner, dict):
            for part in inner.values():
                _cached_partitions_in(part, found, depth + 1)


def restore_placement(dsk: Any, keys: Any, **kwargs: Any) -> Any:
    """A Dask graph optimisation: when low-level optimisation turned the graph into a plain
    dict (which drops layer annotations), puts the worker restrictions of the CachedPartition
    tasks back as annotations of a one-layer graph. Other graphs are returned as they are."""
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    if isinstance(dsk, HighLevelGraph):
        return dsk  # the layers and their annotations survived
    hosts: Dict[Any, List[str]] = {}
    for key, task in dsk.items():
        found: List[CachedPartition] = []
        _cached_partitions_in(task, found)
        placed = [c.hosts for c in found if c.hosts]
        if placed:
            hosts[key] = placed[0]
    if not hosts:
        return dsk
    layer = MaterializedLayer(dict(dsk), annotations={
        "workers": hosts.get,
        "allow_other_workers": lambda key: True if key in hosts else None,
    })
    return HighLevelGraph({"blockmgr-placed-%d" % id(layer): layer},
                          {"blockmgr-placed-%d" % id(layer): set()})


def _install_restore_placement() -> None:
    import dask

    optimizations = list(dask.config.get("optimizations", ()))
    if restore_placement not in optimizations:
        dask.config.set(optimizations=optimizations + [restore_placement])


def partition_block_ids(collection: Any, rdd_id: int) -> List[str]:
    """The block ids ``persist(collection, rdd_id=rdd_id)`` caches the partitions as."""
    import dask.core

    return ["rdd_%d_%d" % (rdd_id, i) for i, _ in enumerate(dask.core.flatten(collection.__dask_keys__()))]


def _key_name(key: Any) -> str:
    return key[0] if isinstance(key, tuple) else key


def persist(
    collection: Any,
    master: str,
    rdd_id: int,
    level: str = DEFAULT_LEVEL,
    name: Optional[str] = None,
    register: bool = True,
    placement: bool = True,
    **client_options: Any,
) -> Any:
    """A collection like ``collection`` whose partitions are cached in blockmgr as RDD
    ``rdd_id`` (blocks ``rdd_<rdd_id>_<i>``, i in the order of ``__dask_keys__()``), at
    ``level``. Nothing is computed here: partitions are read or computed when the returned
    collection is. The RDD is registered with the master (``name``, default the collection's
    name, and its partition count) so ``bmctl rdds`` shows it; ``register=False`` skips that.
    ``client_options`` go to each :class:`blockmgr.Client` (``timeout``, ``compute_lease``...).

    With ``placement`` (the default) each partition's task carries a loose worker restriction
    (``workers=[host...]``, ``allow_other_workers=True``): the hosts holding the partition when
    cached, else a host of the active ``distributed`` client's workers, round-robin (module
    docstring). The hosts are decided here, once: persist again to follow blocks that moved.
    """
    import dask
    import dask.base
    import dask.core
    from dask.optimization import cull
    from dask.base import tokenize, replace_name_in_key

    if not dask.base.is_dask_collection(collection):
        raise TypeError("persist() needs a Dask collection, not %r" % type(collection).__name__)
    if rdd_id < 0:
        raise ValueError("rdd_id must not be negative")
    if level.upper() not in STORAGE_LEVELS:
        raise _blockmgr.InvalidArgument("invalid argument: unknown storage level '%s'" % level)

    keys = list(dask.core.flatten(collection.__dask_keys__()))
    graph = dict(dask.base.collections_to_dsk([collection], optimize_graph=True))

    # New names for the new tasks: the same for every process that caches the same collection
    # in the same RDD, so Dask clients sharing a scheduler share the tasks too.
    rename = {}
    for key in keys:
        old = _key_name(key)
        if old not in rename:
            rename[old] = "blockmgr-rdd%d-%s" % (rdd_id, tokenize(old, master, rdd_id, level))

    placed: List[Optional[List[str]]] = [None] * len(keys)
    if placement:
        placed = place_partitions(cached_hosts(master, rdd_id, len(keys), **client_options),
                                  _dask_worker_hosts())

    tasks: Dict[Any, Tuple[Callable[[], Any]]] = {}
    hosts_by_key: Dict[Any, List[str]] = {}
    for index, key in enumerate(keys):
        subgraph, _ = cull(graph, [key])
        task = CachedPartition(master, rdd_id, index, level, subgraph, key, dict(client_options),
                               placed[index])
        new_key = replace_name_in_key(key, rename)
        tasks[new_key] = (task,)
        if placed[index]:
            hosts_by_key[new_key] = placed[index]

    if register:
        with _blockmgr.Client(master, **client_options) as client:
            client.register_rdd(rdd_id, name or _key_name(keys[0]), level, len(keys))

    rebuild, args = collection.__dask_postpersist__()
    if not hosts_by_key:
        return rebuild(tasks, *args, rename=rename)
    _install_restore_placement()
    # The layer the collection is rebuilt with takes the annotations in effect (dask.annotate);
    # callables are expanded per key when the graph is sent to the scheduler.
    with dask.annotate(workers=hosts_by_key.get,
                       allow_other_workers=lambda key: True if key in hosts_by_key else None):
        return rebuild(tasks, *args, rename=rename)


def unpersist(master: str, rdd_id: int, **client_options: Any) -> int:
    """Removes every cached partition of RDD ``rdd_id``; returns how many there were."""
    with _blockmgr.Client(master, **client_options) as client:
        return client.remove_rdd(rdd_id)
