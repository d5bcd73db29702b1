#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "worker/block_store.h"

namespace bm {

class DiskStore;
namespace disk {
class ChunkFileWriter;
}  // namespace disk

// A DiskStore's DiskWriter: cuts the appended bytes into chunks of kChunkBytes, digests them,
// and hands them to the store, which writes them under the write's generation
// (DiskStore::PutChunk, CommitVersion). The last chunk waits for Commit(), which writes it in
// one batch with the version's meta. A write given a chunk file (a block of
// DiskStoreOptions::chunk_file_min_bytes or more) appends every byte to that file instead, and
// Commit() closes it before committing the meta alone.
//
// States: writing -> committed, or writing -> abandoned (failed append, failed commit or
// destroyed uncommitted). Only a writing writer holds claimed space and may own chunks on disk.
//
// Borrows its store, which must outlive it. Not thread-safe: used on the storage thread, like
// the store.
class DiskStoreWriter final : public DiskWriter {
 public:
  DiskStoreWriter(DiskStore& store, const BlockId& id, StorageLevel level, uint64_t total_size,
                  uint64_t generation, uint64_t version, uint64_t opening,
                  std::unique_ptr<disk::ChunkFileWriter> file = nullptr);
  ~DiskStoreWriter() override;

  Status Append(std::span<const std::byte> bytes) override;
  void AdoptUnitDigests(std::span<const uint64_t> digests) override;
  Status Commit() override;

 private:
  enum class State { kWriting, kCommitted, kAbandoned };

  // Whether the chunk being filled (index next_chunk_) is the block's last.
  bool IsLastChunk() const { return (next_chunk_ + 1) * kChunkBytes >= total_size_; }
  Status PutChunk(std::span<const std::byte> bytes);
  // Gives back the claimed space and deletes the chunks written so far.
  void Abandon();
  std::string Describe() const;

  DiskStore& store_;
  const BlockId id_;
  const StorageLevel level_;
  const uint64_t total_size_;
  const uint64_t generation_;
  const uint64_t version_;
  const uint64_t opening_;  // the store's database opening when the write began
  State state_ = State::kWriting;
  uint64_t appended_ = 0;
  uint64_t next_chunk_ = 0;        // chunks [0, next_chunk_) are in the database
  std::vector<std::byte> buffer_;  // bytes of chunk next_chunk_, at most kChunkBytes
  BlockDigester digester_;         // of every byte appended
  // The version's chunk file, or null when its bytes go to RocksDB records.
  std::unique_ptr<disk::ChunkFileWriter> file_;
  const bool in_file_;
};

}  // namespace bm
