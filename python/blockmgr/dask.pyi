from typing import Any, List, Optional, TypeVar

_Collection = TypeVar("_Collection")

DEFAULT_LEVEL: str

def persist(
    collection: _Collection,
    master: str,
    rdd_id: int,
    level: str = "MEMORY_AND_DISK",
    name: Optional[str] = None,
    register: bool = True,
    placement: bool = True,
    **client_options: Any,
) -> _Collection: ...
def unpersist(master: str, rdd_id: int, **client_options: Any) -> int: ...
def partition_block_ids(collection: Any, rdd_id: int) -> List[str]: ...
def cached_hosts(
    master: str, rdd_id: int, partitions: int, **client_options: Any
) -> List[List[str]]: ...
def place_partitions(
    cached: List[List[str]], dask_hosts: List[str]
) -> List[Optional[List[str]]]: ...
def restore_placement(dsk: Any, keys: Any, **kwargs: Any) -> Any: ...
def dumps(value: Any) -> List[Any]: ...
def loads(block: Any) -> Any: ...

class CachedPartition:
    master: str
    rdd_id: int
    index: int
    level: str
    block_id: str
    hosts: Optional[List[str]]
    def __call__(self) -> Any: ...
