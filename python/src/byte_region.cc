#include "byte_region.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

namespace bm::python {

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kFirstCapacity = size_t{1} << 20;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Large regions ask for transparent huge pages: one fault per 2 MiB instead of per 4 KiB.
void AdviseHugePages(std::byte* data, size_t capacity) {
  if (capacity >= kHugePage) madvise(data, capacity, MADV_HUGEPAGE);
}

}  // namespace

ByteRegion::~ByteRegion() {
  if (data_ != nullptr) munmap(data_, capacity_);
}

bool ByteRegion::Reserve(size_t capacity) {
  capacity = RoundUp(capacity, capacity >= kHugePage ? kHugePage : kPage);
  void* mapped;
  if (data_ == nullptr) {
    mapped = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  } else {
    mapped = mremap(data_, capacity_, capacity, MREMAP_MAYMOVE);
  }
  if (mapped == MAP_FAILED) return false;
  data_ = static_cast<std::byte*>(mapped);
  capacity_ = capacity;
  AdviseHugePages(data_, capacity_);
  return true;
}

bool ByteRegion::Append(std::span<const std::byte> bytes) {
  if (bytes.empty()) return true;
  if (bytes.size() > capacity_ - size_ &&
      !Reserve(std::max({kFirstCapacity, size_ + bytes.size(), capacity_ * 2}))) {
    return false;
  }
  std::memcpy(data_ + size_, bytes.data(), bytes.size());
  size_ += bytes.size();
  return true;
}

std::unique_ptr<ByteRegion> RegionPool::Take() {
  {
    MutexLock lock(mutex_);
    if (!free_.empty()) {
      std::unique_ptr<ByteRegion> region = std::move(free_.back());
      free_.pop_back();
      free_bytes_ -= region->capacity();
      region->Clear();
      return region;
    }
  }
  return std::make_unique<ByteRegion>();
}

void RegionPool::Give(std::unique_ptr<ByteRegion> region) {
  MutexLock lock(mutex_);
  if (free_.size() >= kMaxRegions || free_bytes_ + region->capacity() > kMaxBytes) return;
  free_bytes_ += region->capacity();
  free_.push_back(std::move(region));
}

}  // namespace bm::python
