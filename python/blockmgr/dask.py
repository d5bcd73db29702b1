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

__all__ = ["persist", "unpersist", "partition_block_ids", "dumps", "loads"]

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
    ) -> None:
        self.master = master
        self.rdd_id = rdd_id
        self.index = index
        self.level = level
        self.graph = graph
        self.key = key
        self.client_options = client_options

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
    **client_options: Any,
) -> Any:
    """A collection like ``collection`` whose partitions are cached in blockmgr as RDD
    ``rdd_id`` (blocks ``rdd_<rdd_id>_<i>``, i in the order of ``__dask_keys__()``), at
    ``level``. Nothing is computed here: partitions are read or computed when the returned
    collection is. The RDD is registered with the master (``name``, default the collection's
    name, and its partition count) so ``bmctl rdds`` shows it; ``register=False`` skips that.
    ``client_options`` go to each :class:`blockmgr.Client` (``timeout``, ``compute_lease``...).
    """
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

    tasks: Dict[Any, Tuple[Callable[[], Any]]] = {}
    for index, key in enumerate(keys):
        subgraph, _ = cull(graph, [key])
        task = CachedPartition(master, rdd_id, index, level, subgraph, key, dict(client_options))
        tasks[replace_name_in_key(key, rename)] = (task,)

    if register:
        with _blockmgr.Client(master, **client_options) as client:
            client.register_rdd(rdd_id, name or _key_name(keys[0]), level, len(keys))

    rebuild, args = collection.__dask_postpersist__()
    return rebuild(tasks, *args, rename=rename)


def unpersist(master: str, rdd_id: int, **client_options: Any) -> int:
    """Removes every cached partition of RDD ``rdd_id``; returns how many there were."""
    with _blockmgr.Client(master, **client_options) as client:
        return client.remove_rdd(rdd_id)
