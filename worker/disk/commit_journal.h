#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"

namespace bm {

// An append-only record, outside RocksDB, of which version (generation) of each block the disk
// store has committed, so that a restart can tell what the store should hold from what it
// holds. RocksDB's recovery keeps a consistent prefix of its write-ahead log and drops the rest
// in silence (a damaged or truncated log, a lost file); this journal is how those losses are
// found and named.
//
// One text line per commit or removal, with a checksum, appended with write(2) as soon as the
// store's write returned: the kernel has it once the call returns, so it survives a killed
// process as RocksDB's unsynced log does. A damaged or torn line is skipped (and counted) when
// read. Rewrite() compacts the file to the live set (at start, and when it has grown well past
// it), through a synced temporary file renamed into place.
//
// Not thread-safe: owned by the disk store.
class CommitJournal {
 public:
  // Reads `path` if it exists (existed() then says so) and opens it for appending.
  static Result<std::unique_ptr<CommitJournal>> Open(const std::string& path);
  ~CommitJournal();
  CommitJournal(const CommitJournal&) = delete;
  CommitJournal& operator=(const CommitJournal&) = delete;

  // What the file said when opened: the committed generation of every block not removed since.
  const std::map<BlockId, uint64_t>& recorded() const { return recorded_; }
  // Blocks whose last line is a removal, with the removed generation.
  const std::map<BlockId, uint64_t>& removed() const { return removed_; }
  bool existed() const { return existed_; }
  // Lines that were unreadable when opened (damaged or torn by a crash mid-write).
  uint64_t damaged_lines() const { return damaged_lines_; }

  void RecordCommitted(const BlockId& id, uint64_t generation);
  void RecordRemoved(const BlockId& id, uint64_t generation);
  // Replaces the file with one commit line per block of `live` and one removal line per block
  // of `removed` (removals not yet carried out in the store).
  Status Rewrite(const std::map<BlockId, uint64_t>& live,
                 const std::map<BlockId, uint64_t>& removed = {});
  // Lines appended since the last rewrite (or open), for deciding when to compact.
  uint64_t lines_since_rewrite() const { return lines_since_rewrite_; }
  // False once an append failed (a full disk): a later restart may then miss a loss or name a
  // removed block as lost. A successful Rewrite() makes it complete again.
  bool complete() const { return complete_; }

 private:
  CommitJournal(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  void Append(char kind, const BlockId& id, uint64_t generation);

  const std::string path_;
  int fd_;
  std::map<BlockId, uint64_t> recorded_;
  std::map<BlockId, uint64_t> removed_;
  bool existed_ = false;
  uint64_t damaged_lines_ = 0;
  uint64_t lines_since_rewrite_ = 0;
  bool complete_ = true;
};

}  // namespace bm
