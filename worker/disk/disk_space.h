#pragma once

// How much of its filesystem a disk store (disk_store.h) may use: the RocksDB sizes scaled to
// the filesystem, and the headroom kept free for RocksDB's own files. Pure functions, so the
// sizing can be read (and changed) in one place; the store applies them when it opens.

#include <cstdint>

namespace bm::disk {

// Memtable size and table file size, scaled to the filesystem: RocksDB's 64 MiB default would
// leave a small filesystem (a 64 MiB tmpfs) no room for blocks once the headroom is kept.
uint64_t WriteBufferBytesFor(uint64_t filesystem_bytes);

inline constexpr int kMaxWriteBuffers = 3;
inline constexpr int kLevel0CompactionTrigger = 4;  // RocksDB's default, made explicit
inline constexpr int kCompactionFiles = 8;          // max_compaction_bytes, in table files

// Space kept free on the filesystem for RocksDB's own files (see the .cc for what it counts).
uint64_t HeadroomFor(uint64_t filesystem_bytes);

}  // namespace bm::disk
