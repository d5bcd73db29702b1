#pragma once

namespace bm {

// Tunes glibc malloc for a process that moves blocks as ~1 MiB buffers. By default glibc
// serves each such buffer with a fresh mmap and unmaps it on free, so every frame received
// pays page faults on first touch (measured here: a memory-tier get ran ~6x slower). Raising
// the mmap and trim thresholds keeps freed buffers in the heap for reuse; the price is that
// RSS does not shrink right after a burst of frees. Call once, first thing in main().
void TuneAllocatorForBlockBuffers();

}  // namespace bm
