"""blockmgr: a client for blockmgr clusters (cached partitions, Spark-style storage levels).

    import blockmgr, numpy as np
    client = blockmgr.Client("tcp://127.0.0.1:7700")
    client.put("rdd_7_0", np.arange(1000), "MEMORY_AND_DISK")
    array = np.frombuffer(client.get("rdd_7_0"), dtype=np.int64)   # no copy

``blockmgr.dask`` caches the partitions of Dask collections.
"""

from ._blockmgr import (
    Aborted,
    BlockLocation,
    BlockLocations,
    Buffer,
    CacheCounters,
    Client,
    DataLoss,
    Error,
    InternalError,
    InvalidArgument,
    NotFound,
    OutOfSpace,
    PermissionDenied,
    PutResult,
    RddInfo,
    ShuffleReader,
    ShuffleWriter,
    TooLarge,
    Unavailable,
    UnknownWorker,
    WorkerInfo,
    tune_allocator,
)

STORAGE_LEVELS = (
    "MEMORY_ONLY",
    "MEMORY_AND_DISK",
    "DISK_ONLY",
    "MEMORY_ONLY_2",
    "MEMORY_AND_DISK_2",
    "DISK_ONLY_2",
)

__all__ = [
    "Aborted",
    "BlockLocation",
    "BlockLocations",
    "Buffer",
    "CacheCounters",
    "Client",
    "DataLoss",
    "Error",
    "InternalError",
    "InvalidArgument",
    "NotFound",
    "OutOfSpace",
    "PermissionDenied",
    "PutResult",
    "RddInfo",
    "STORAGE_LEVELS",
    "ShuffleReader",
    "ShuffleWriter",
    "TooLarge",
    "Unavailable",
    "UnknownWorker",
    "WorkerInfo",
    "tune_allocator",
]
