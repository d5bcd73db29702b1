#include "common/allocator.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cstdint>

namespace bm {

void TuneAllocatorForBlockBuffers() {
  // 32 MiB is the largest mmap threshold glibc accepts on 64-bit; buffers below it come from
  // the heap. Setting it also turns off glibc's dynamic threshold adjustment.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  // Return memory to the OS only when more than this much is free at the top of the heap.
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  // Grow the heap in large steps, so a burst of frames does not extend it buffer by buffer.
  mallopt(M_TOP_PAD, 64 << 20);
}

void AdviseHugePages(std::byte* data, size_t size) {
  constexpr uintptr_t kHugePage = 2 << 20;
  const uintptr_t start = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) & ~(kHugePage - 1);
  if (end <= start) return;
  // Errors (no THP in this kernel, a range not anonymous memory) leave the pages as they were.
  (void)madvise(reinterpret_cast<void*>(start), end - start, MADV_HUGEPAGE);
}

}  // namespace bm
