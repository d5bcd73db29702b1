#pragma once

// A block's bytes in shared memory that nobody can change: a memfd filled once, then sealed
// against writing, shrinking and growing (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW |
// F_SEAL_SEAL). A worker hands such a region's descriptor to a reader on its own host (README
// "Same-host reads"); the reader maps it read-only and reads the block with no copy through a
// socket. The seals are what make that safe: no process, the worker included, can write to the
// pages again, so a reader's bytes never change under it and a reader can never write into
// them (a writable shared mapping, write(2) and ftruncate(2) all fail on a sealed memfd).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "blockmgr/chunk.h"
#include "blockmgr/status.h"

namespace bm {

// A sealed memfd and the owner's read-only mapping of it. Immutable once created; shared by
// the chunks that view it. The pages are freed when the last mapping and descriptor of the
// memfd, in any process, are gone.
class SealedRegion {
 public:
  // Writes `size` bytes through `fill` (given the writable mapping; an error aborts), then
  // unmaps it, seals the memfd and maps it again read-only. `name` shows in /proc/PID/maps.
  static Result<std::shared_ptr<const SealedRegion>> Create(
      const std::string& name, uint64_t size,
      const std::function<Status(std::span<std::byte>)>& fill);
  ~SealedRegion();
  SealedRegion(const SealedRegion&) = delete;
  SealedRegion& operator=(const SealedRegion&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  uint64_t size() const { return size_; }
  // A descriptor of the memfd opened read-only (so even the descriptor a reader receives
  // grants no write access), owned by the region; pass it on with SCM_RIGHTS.
  int read_only_fd() const { return read_only_fd_; }

 private:
  SealedRegion() = default;

  std::byte* data_ = nullptr;  // null for an empty region
  uint64_t size_ = 0;
  int read_only_fd_ = -1;
};

// A chunk viewing a whole sealed region, keeping it alive: how a block moved into shared
// memory is stored, so the worker serves TCP reads from the same pages it hands to local
// readers and the bytes are never held twice.
class SealedRegionChunk final : public Chunk {
 public:
  explicit SealedRegionChunk(std::shared_ptr<const SealedRegion> region)
      : region_(std::move(region)) {}
  std::span<const std::byte> bytes() const override { return region_->bytes(); }
  const std::shared_ptr<const SealedRegion>& region() const { return region_; }

 private:
  std::shared_ptr<const SealedRegion> region_;
};

// A region received from another process, mapped read-only (the reader's side). Unmapped when
// destroyed, after which `on_unmapped` runs (the reader tells the worker it may stop counting
// the pages). Thread-safe to destroy on any thread.
class MappedRegion final : public Chunk {
 public:
  // Maps `size` bytes of `fd` read-only and shared, pre-faulted; takes ownership of `fd` (closed
  // once mapped: the mapping keeps the memfd alive). Checks that the memfd carries the write,
  // shrink and grow seals, so a region the sender could still change is refused (kDataLoss).
  static Result<std::shared_ptr<const MappedRegion>> Map(int fd, uint64_t size,
                                                         std::function<void()> on_unmapped);
  ~MappedRegion() override;
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;

  std::span<const std::byte> bytes() const override { return {data_, size_}; }

 private:
  MappedRegion(std::byte* data, uint64_t size, std::function<void()> on_unmapped)
      : data_(data), size_(size), on_unmapped_(std::move(on_unmapped)) {}

  std::byte* data_;
  uint64_t size_;
  std::function<void()> on_unmapped_;
};

}  // namespace bm
