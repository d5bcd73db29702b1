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
    **client_options: Any,
) -> _Collection: ...
def unpersist(master: str, rdd_id: int, **client_options: Any) -> int: ...
def partition_block_ids(collection: Any, rdd_id: int) -> List[str]: ...
def dumps(value: Any) -> List[Any]: ...
def loads(block: Any) -> Any: ...

class CachedPartition:
    master: str
    rdd_id: int
    index: int
    level: str
    block_id: str
    def __call__(self) -> Any: ...
