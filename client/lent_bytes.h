#pragma once

#include <condition_variable>
#include <cstddef>
#include <memory>
#include <span>

#include "blockmgr/chunk.h"
#include "common/core/mutex.h"

namespace bm {

// A caller's bytes handed to ZeroMQ as frames without copying them (Client::Put).
//
// The frames point into memory the caller owns only for the duration of the call, and ZeroMQ
// lets go of a sent frame on its own I/O thread, possibly after the reply that ends the call
// has arrived. So every frame is a chunk counted here, and the call waits in AwaitReturned()
// until the last one is released before it returns. A frame still queued when a call gives up
// on a peer is released when that peer's socket is reset (linger 0 drops it), which the
// upload does for every peer it abandons with pieces in flight.
class LentBytes {
 public:
  explicit LentBytes(std::span<const std::byte> bytes);
  LentBytes(const LentBytes&) = delete;
  LentBytes& operator=(const LentBytes&) = delete;
  // Waits for every chunk lent out, as AwaitReturned: the bytes must outlive their frames.
  ~LentBytes();

  size_t size() const { return bytes_.size(); }
  // A chunk viewing [offset, offset + length) of the bytes; no copy.
  ChunkPtr Lend(size_t offset, size_t length);
  // Blocks until no chunk lent out is held by anyone.
  void AwaitReturned();

 private:
  struct Count {
    Mutex mutex;
    std::condition_variable returned;  // with mutex
    size_t out BM_GUARDED_BY(mutex) = 0;
  };
  class LentChunk;

  std::span<const std::byte> bytes_;
  std::shared_ptr<Count> count_ = std::make_shared<Count>();
};

}  // namespace bm
