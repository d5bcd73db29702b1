from . import dask as dask
from ._blockmgr import (
    Aborted as Aborted,
    BlockLocation as BlockLocation,
    BlockLocations as BlockLocations,
    Buffer as Buffer,
    CacheCounters as CacheCounters,
    Client as Client,
    DataLoss as DataLoss,
    Error as Error,
    InternalError as InternalError,
    InvalidArgument as InvalidArgument,
    NotFound as NotFound,
    OutOfSpace as OutOfSpace,
    PermissionDenied as PermissionDenied,
    PutResult as PutResult,
    RddInfo as RddInfo,
    ShuffleReader as ShuffleReader,
    ShuffleWriter as ShuffleWriter,
    TooLarge as TooLarge,
    Unavailable as Unavailable,
    UnknownWorker as UnknownWorker,
    WorkerInfo as WorkerInfo,
    tune_allocator as tune_allocator,
)

STORAGE_LEVELS: tuple[str, ...]
