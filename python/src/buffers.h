#pragma once

// The two ends of zero-copy block transfer between Python and the client:
//   * BlockBuffer: a received block, owned by a Python object that exposes it as a read-only
//     buffer (memoryview, numpy.frombuffer, bytes() read it in place);
//   * BorrowBytes: a Python object's buffer lent to a put as a chunk (common/chunk.h), sent by
//     ZeroMQ straight from the Python object's memory.

#include <pybind11/pybind11.h>

#include <cstddef>
#include <vector>

#include "common/chunk.h"

namespace bm::python {

// A block's bytes received by a get. Immutable; Python owns it (blockmgr.Buffer) and every
// memoryview or NumPy array made from it keeps it alive through the buffer protocol.
class BlockBuffer {
 public:
  explicit BlockBuffer(std::vector<std::byte> bytes) : bytes_(std::move(bytes)) {}
  std::span<const std::byte> bytes() const { return bytes_; }
  size_t size() const { return bytes_.size(); }

 private:
  std::vector<std::byte> bytes_;
};

// Defines blockmgr.Buffer in `module`.
void RegisterBlockBuffer(pybind11::module_& module);

// Wraps received bytes in a blockmgr.Buffer (no copy). Needs the GIL.
pybind11::object MakeBlockBuffer(std::vector<std::byte> bytes);

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
