"""Type stubs of the compiled client (blockmgr._blockmgr)."""

from typing import Callable, Protocol, Iterable, List, Optional, Sequence, Tuple, Union


BlockIdLike = Union[str, Tuple[int, int]]
"""A block id: "rdd_7_3", "broadcast_4", "shuffle_1_2_3", or an (rdd_id, partition) tuple."""

class _SupportsBuffer(Protocol):
    """Anything with the buffer protocol (a NumPy array, an mmap, ...)."""

    def __buffer__(self, flags: int) -> memoryview: ...

BytesLike = Union[bytes, bytearray, memoryview, "Buffer", _SupportsBuffer]

class Error(Exception):
    """Base class of every error a blockmgr call raises."""

class NotFound(Error): ...
class Unavailable(Error, ConnectionError): ...
class OutOfSpace(Error): ...
class PermissionDenied(Error, PermissionError): ...
class InvalidArgument(Error, ValueError): ...
class Aborted(Error): ...
class TooLarge(Error): ...
class UnknownWorker(Error): ...
class InternalError(Error): ...
class DataLoss(Error): ...

class ShuffleWriter:
    """Writes one attempt of one map task of a shuffle (Client.shuffle_writer)."""

    @property
    def bytes_written(self) -> int: ...
    def write(self, partition: int, data: BytesLike) -> None: ...
    def flush(self) -> None: ...
    def commit(self) -> None: ...

class ShuffleReader:
    """Reads one reduce partition's committed output (Client.shuffle_reader)."""

    @property
    def missing_maps(self) -> List[int]: ...
    @property
    def bytes_read(self) -> int: ...
    def for_each(self, fn: Callable[[int, memoryview], object]) -> None: ...
    def read_all(self) -> Buffer: ...

class Buffer:
    """A block's bytes, received by a get: a read-only buffer (memoryview, numpy.frombuffer)."""

    @property
    def nbytes(self) -> int: ...
    def __len__(self) -> int: ...
    def __bytes__(self) -> bytes: ...
    def __buffer__(self, flags: int) -> memoryview: ...
    def __eq__(self, other: object) -> bool: ...

class PutResult:
    worker_id: str
    address: str
    tier: str
    size: int
    replicas: List[str]
    copies_wanted: int

class WorkerInfo:
    id: str
    address: str
    memory_capacity: int
    memory_used: int
    memory_free: int
    disk_used: int
    disk_capacity: int
    block_count: int
    last_heartbeat_age_ms: int
    host: str
    rack: str
    state: str

class BlockLocation:
    worker_id: str
    address: str
    tier: str
    size: int

class BlockLocations:
    block: str
    level: str
    locations: List[BlockLocation]

class RddInfo:
    rdd_id: int
    name: str
    level: str
    total_partitions: int
    cached_partitions: int
    memory_bytes: int
    disk_bytes: int
    workers: List[str]

class CacheCounters:
    local_hits: int
    remote_hits: int
    hits: int
    misses: int
    computes: int
    waits: int
    bytes_fetched: int
    store_failures: int

class Client:
    """A connection to a blockmgr cluster (a bm-master and its workers)."""

    def __init__(
        self,
        master: str = "",
        *,
        timeout: float = 5.0,
        compute_lease: float = 5.0,
        compute_wait: float = 2.0,
        holder_name: str = "",
        local_hosts: Sequence[str] = (),
        zookeeper: str = "",
        leader_wait: float = 10.0,
        local_reads: bool = True,
    ) -> None: ...
    def put(
        self,
        id: BlockIdLike,
        data: BytesLike,
        level: str = "MEMORY_AND_DISK",
        *,
        worker: Optional[str] = None,
        replication: int = 0,
        compute_cost: Optional[float] = None,
    ) -> PutResult: ...
    def get(self, id: BlockIdLike) -> Buffer: ...
    def get_many(self, ids: Iterable[BlockIdLike]) -> List[Optional[Buffer]]: ...
    def get_or_compute(
        self,
        id: BlockIdLike,
        level: str,
        fn: Callable[[], Union[BytesLike, Sequence[BytesLike]]],
    ) -> Buffer: ...
    def locations(self, ids: Iterable[BlockIdLike]) -> List[BlockLocations]: ...
    def workers(self) -> List[WorkerInfo]: ...
    def rdds(self) -> List[RddInfo]: ...
    def blocks(self, rdd: Optional[int] = None) -> List[BlockLocations]: ...
    def remove(self, ids: Iterable[BlockIdLike]) -> int: ...
    def remove_rdd(self, rdd_id: int) -> int: ...
    def register_rdd(
        self, rdd_id: int, name: str, level: str = "MEMORY_AND_DISK", partitions: int = 0
    ) -> None: ...
    def ping(self) -> None: ...
    def register_shuffle(
        self, shuffle_id: int, maps: int, partitions: int, level: str = ...
    ) -> dict: ...
    def shuffle_writer(self, shuffle_id: int, map: int, attempt: int = ...) -> ShuffleWriter: ...
    def shuffle_reader(self, shuffle_id: int, partition: int) -> ShuffleReader: ...
    def unregister_shuffle(self, shuffle_id: int) -> None: ...
    def shuffles(self) -> List[dict]: ...
    @property
    def counters(self) -> CacheCounters: ...
    def take_counters(self) -> CacheCounters: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Client": ...
    def __exit__(self, *args: object) -> None: ...

def tune_allocator() -> None:
    """Tunes this process's malloc for moving blocks (as blockmgr's programs do); RSS then
    does not shrink right after a burst of frees."""
