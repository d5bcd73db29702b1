#pragma once

// Internal to DiskStore: the state its .cc files share (disk_store.cc: writes, reads,
// removals, space and recovery; disk_store_open.cc: opening, the start-up scan, rebuilding
// from chunk files and the check against the commit journal). Not for any other file.

#include <rocksdb/cache.h>
#include <rocksdb/options.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/disk/chunk_files.h"
#include "worker/disk/disk_error_listener.h"
#include "worker/disk/disk_format.h"
#include "worker/disk/disk_index.h"
#include "worker/disk/disk_store.h"

namespace bm {

struct DiskStore::Impl {
  // Committed blocks, loaded at Open() and kept in step with every commit and removal.
  disk::DiskIndex index;
  uint64_t claimed_bytes = 0;  // declared sizes of writers not yet committed or abandoned
  uint64_t next_generation = 1;
  uint64_t opening = 0;  // counts opens of the database (a reopen after a storage error)
  rocksdb::WriteOptions write_options;  // WAL on, not synced: survives a process kill
  rocksdb::ReadOptions read_options;
  // For large chunks of digested versions read for a reader that checks the digests itself
  // (ReadForCheckingReader): no block checksum. The table block still goes into the block
  // cache, where later reads find it without a checksum too; with fill_cache off, RocksDB
  // would copy every value out of its own buffer instead of pinning it (a 1 MiB memmove per
  // chunk). Those later reads are Verify's and the scrubber's, which check the same digests.
  rocksdb::ReadOptions reader_checked_read_options = [] {
    rocksdb::ReadOptions options;
    options.verify_checksums = false;
    return options;
  }();
  // The database's block cache, shared with the chunks pinned into it (see PinnedChunk). Kept
  // across reopens, since pinned chunks may still point into it.
  std::shared_ptr<rocksdb::Cache> block_cache;
  // Of the open database; shared with RocksDB, which calls it from its own threads.
  std::shared_ptr<disk::ErrorListener> listener;
  // Non-empty while the store is read-only: why.
  std::string read_only_reason;
  // Versions removed while read-only: hidden from the index, deleted once writable.
  std::vector<std::pair<BlockId, disk::Meta>> hidden_removals;
  // Key ranges of removed versions whose bytes may still be on disk (in table files or the
  // write-ahead log) until RocksDB compacts them; reclaimed when space is short.
  std::vector<std::pair<std::string, std::string>> removed_ranges;
  // Bytes of the versions in removed_ranges: free space once reclaimed, so counted as room.
  uint64_t reclaimable_bytes = 0;
  // Generations whose records the last start-up scan could not read (a table block failed
  // RocksDB's checksum): versions committed there lost their metadata.
  std::vector<disk::UnreadableGenerations> unreadable_generations;
  // The chunk files beside the database (set by Open()).
  std::unique_ptr<disk::ChunkFiles> files;
  // Versions the last open dropped because their chunk file was missing or short: generation
  // -> why (the journal check names them lost with it).
  std::map<uint64_t, std::string> damaged_files;
  // Table files RocksDB could not use at the last open, set aside by a repair (disk_repair.h),
  // and why: the blocks the commit journal then finds missing had their records there.
  std::vector<std::string> unreadable_tables;
  std::string unreadable_tables_error;
  // A reopen failed or the directory is gone (TryRecover): read-only until the worker restarts.
  bool unrecoverable = false;
};

}  // namespace bm
