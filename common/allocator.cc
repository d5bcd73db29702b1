#include "common/allocator.h"

#include <malloc.h>

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

}  // namespace bm
