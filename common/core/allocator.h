#pragma once

#include <cstddef>

namespace bm {

// Tunes glibc malloc for a process that moves blocks as ~1 MiB buffers. By default glibc
// serves each such buffer with a fresh mmap and unmaps it on free, so every frame received
// pays page faults on first touch (a memory-tier get ran several times slower; bench/notes).
// Raising
// the mmap and trim thresholds keeps freed buffers in the heap for reuse; the price is that
// RSS does not shrink right after a burst of frees. Call once, first thing in main().
void TuneAllocatorForBlockBuffers();

// Asks the kernel to back [data, data + size) with transparent huge pages where it can (the
// 2 MiB-aligned extents inside it), before the range is first written. For a fresh buffer of
// a big block: a buffer above the mmap threshold is a fresh mapping each time, and on a VM
// first touch costs a fault per 4 KiB page, which dominated filling a big buffer (bench/notes,
// 2026-12-02: huge pages for big gets). Only a hint: where THP is off or the
// range holds no aligned 2 MiB extent, nothing changes.
void AdviseHugePages(std::byte* data, size_t size);

// For a process whose heap holds the blocks themselves (bm-worker): runs the program again, in
// place (same pid, same arguments), with glibc's malloc asking for transparent huge pages for
// its heaps (GLIBC_TUNABLES glibc.malloc.hugetlb=1), which glibc reads only at start-up.
// Every received frame is a malloc'd buffer; until the cache is full they land on fresh pages,
// and a worker filling its memory paid a fault per 4 KiB (1 MiB puts into a fresh worker
// measured several times slower than with huge-page heaps; bench/notes). Returns without doing
// anything where
// it would change nothing: GLIBC_TUNABLES already names the setting (so an operator can say
// glibc.malloc.hugetlb=0), the kernel's THP mode is not "madvise" ("always" gives huge pages
// anyway, "never" none), or the exec fails. Call first thing in main(), before any thread.
void RestartWithHugePageHeaps(char** argv);

}  // namespace bm
