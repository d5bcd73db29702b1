#pragma once

// The two ends of zero-copy block transfer between Python and the client:
//   * BlockBuffer: a received block, owned by a Python object that exposes it as a read-only
//     buffer (memoryview, numpy.frombuffer, bytes() read it in place);
//   * BorrowBytes: a Python object's buffer lent to a put as a chunk (blockmgr/chunk.h), sent by
//     ZeroMQ straight from the Python object's memory.

#include <pybind11/pybind11.h>

#include <cstddef>
#include <vector>

#include "blockmgr/chunk.h"
#include "byte_region.h"

namespace bm::python {

// A block's bytes received by a get, in a vector or in a region of a pool (which gets the
// region back when this goes). Immutable; Python owns it (blockmgr.Buffer) and every
// memoryview or NumPy array made from it keeps it alive through the buffer protocol.
class BlockBuffer {
 public:
  explicit BlockBuffer(std::vector<std::byte> bytes) : vector_(std::move(bytes)) {}
  BlockBuffer(std::unique_ptr<ByteRegion> region, std::shared_ptr<RegionPool> pool)
      : region_(std::move(region)), pool_(std::move(pool)) {}
  // A block mapped from a worker on this host (Client::GetMapped): the buffer is the mapping.
  explicit BlockBuffer(ChunkPtr mapped) : mapped_(std::move(mapped)) {}
  ~BlockBuffer() {
    if (region_) pool_->Give(std::move(region_));
  }
  BlockBuffer(const BlockBuffer&) = delete;
  BlockBuffer& operator=(const BlockBuffer&) = delete;

  std::span<const std::byte> bytes() const {
    if (mapped_) return mapped_->bytes();
    return region_ ? region_->bytes() : std::span<const std::byte>(vector_);
  }
  size_t size() const { return bytes().size(); }

 private:
  std::vector<std::byte> vector_;
  std::unique_ptr<ByteRegion> region_;  // null: the bytes are in vector_
  std::shared_ptr<RegionPool> pool_;
  ChunkPtr mapped_;  // null unless mapped
};

// Defines blockmgr.Buffer in `module`.
void RegisterBlockBuffer(pybind11::module_& module);

// Wraps received bytes in a blockmgr.Buffer (no copy). Needs the GIL.
pybind11::object MakeBlockBuffer(std::vector<std::byte> bytes);
// The same for a block mapped from shared memory (one chunk): no copy; the mapping (and the
// worker's pin) lasts as long as the Buffer and every view of it.
pybind11::object MakeBlockBuffer(ChunkPtr mapped);
// The same for bytes received into a region of `pool`. Small blocks are copied into a vector
// of their size and the region goes straight back to the pool.
pybind11::object MakeBlockBuffer(std::unique_ptr<ByteRegion> region,
                                 std::shared_ptr<RegionPool> pool);

// The bytes of `data` (anything with a C-contiguous buffer: bytes, bytearray, memoryview,
// NumPy arrays) as a chunk that borrows them: the Python object's buffer export is held until
// the last reference to the chunk is dropped, which may be on a ZeroMQ I/O thread after the put
// returned (the chunk then takes the GIL to let go). A non-contiguous buffer is copied into a
// chunk of its own. Raises TypeError for an object without a buffer. Needs the GIL.
BlockData BorrowBytes(const pybind11::handle& data);

// The bytes a compute function returned, copied once into one vector: a buffer, or a list or
// tuple of buffers concatenated (so a caller can return a header and its out-of-band buffers
// without joining them first). Raises TypeError for anything else. Needs the GIL.
std::vector<std::byte> GatherBytes(const pybind11::handle& result);

}  // namespace bm::python
