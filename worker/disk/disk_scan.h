#pragma once

#include <rocksdb/write_batch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "blockmgr/status.h"
#include "worker/disk/disk_index.h"

namespace rocksdb {
class DB;
struct ReadOptions;
class Status;
}  // namespace rocksdb

namespace bm::disk {

// A RocksDB status as the store's: kOutOfSpace for a full disk, kInternal for other failures.
Status FromRocks(const rocksdb::Status& s, const std::string& what);

// What the start-up scan of a disk store's database found.
struct DiskScan {
  // Every committed version (of two metas for one id, which a commit never leaves, the newer).
  DiskIndex index;
  // Deletions of the records that belong to no committed version: writes a crash cut short,
  // unreadable records, versions superseded, and the damaged ranges below. The caller applies
  // them when the store is writable.
  rocksdb::WriteBatch garbage;
  // The highest generation met, committed or not; new generations must be above it.
  uint64_t max_generation = 0;
  // Generations whose records could not be read (a table block failed RocksDB's checksum):
  // versions committed there lost their metadata (and their bytes, unless in a chunk file).
  std::vector<UnreadableGenerations> unreadable_generations;
};

// Reads every version's metadata (one seek per stored version, legacy records too) without
// writing anything. A seek that meets a table block failing its checksum steps over the
// generations that block holds instead of failing the store. Fails only when the database
// cannot be read at all. `dir` names the store in log lines. Runs on the storage thread (at
// DiskStore::Open and on a reopen).
Result<DiskScan> ScanDiskStore(rocksdb::DB& db, const rocksdb::ReadOptions& read_options,
                               const std::string& dir);

}  // namespace bm::disk
