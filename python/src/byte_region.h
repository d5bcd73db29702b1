#pragma once

// Memory that received blocks are written into: page-mapped regions that grow without copying
// (mremap) and, once their Buffer is gone, go back to a small pool for the next get, already
// faulted in. A get then costs one copy of the bytes out of the received frames into memory
// that is ready, instead of also paying a page fault per 4 KiB of a fresh allocation (which
// cost more than the transfer itself for 64 MiB blocks).

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "common/core/mutex.h"

namespace bm::python {

// One anonymous mapping. Not thread-safe; moved between a get and a Buffer, never shared.
class ByteRegion {
 public:
  ByteRegion() = default;
  ~ByteRegion();
  ByteRegion(const ByteRegion&) = delete;
  ByteRegion& operator=(const ByteRegion&) = delete;

  // Appends `bytes`, growing the mapping (by doubling, moving pages rather than bytes) when
  // they do not fit. False when the memory could not be mapped.
  bool Append(std::span<const std::byte> bytes);
  void Clear() { size_ = 0; }

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }

 private:
  bool Reserve(size_t capacity);

  std::byte* data_ = nullptr;  // null until the first Append
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// Regions of finished Buffers, kept for the next gets: at most kMaxRegions and kMaxBytes of
// them; others are unmapped. Thread-safe: a Buffer may be freed on any thread. Shared (by a
// Client and every Buffer it returned) because Buffers may outlive their Client.
class RegionPool {
 public:
  static constexpr size_t kMaxRegions = 4;
  static constexpr size_t kMaxBytes = size_t{256} << 20;

  // The most recently returned region (emptied), else a new one.
  std::unique_ptr<ByteRegion> Take();
  void Give(std::unique_ptr<ByteRegion> region);

 private:
  Mutex mutex_;
  std::vector<std::unique_ptr<ByteRegion>> free_ BM_GUARDED_BY(mutex_);
  size_t free_bytes_ BM_GUARDED_BY(mutex_) = 0;
};

}  // namespace bm::python
