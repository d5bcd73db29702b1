#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "worker/disk/chunk_file_deleter.h"
#include "worker/disk/disk_format.h"

namespace rocksdb {
class FileSystem;
class FSWritableFile;
}  // namespace rocksdb

namespace bm::disk {

// A block version's bytes being written to its chunk file (ChunkFiles::Create). Bytes go
// straight to write(2) (no buffering, no checksum: the version's unit digests cover them), so
// what Append() returned for is in the kernel's page cache and survives a kill of the process.
// Every kRangeSyncBytes written, the kernel is asked to start writing them out
// (sync_file_range(SYNC_FILE_RANGE_WRITE), without waiting: RocksDB's bytes_per_sync): a 64 MiB
// block then measured several times faster than left to the kernel's own writeback, whose
// dirty-page throttling stalled the writer (bench/notes/2026-12-04-disk-write-path.md).
class ChunkFileWriter {
 public:
  explicit ChunkFileWriter(std::unique_ptr<rocksdb::FSWritableFile> file, std::string path);
  ~ChunkFileWriter();
  Status Append(std::span<const std::byte> bytes);
  // Closes the file; every byte appended is then in it.
  Status Close();
  const std::string& path() const { return path_; }

 private:
  static constexpr uint64_t kRangeSyncBytes = uint64_t{1} << 20;

  std::unique_ptr<rocksdb::FSWritableFile> file_;
  const std::string path_;
  uint64_t written_ = 0;
  uint64_t synced_to_ = 0;  // writeback started for [0, synced_to_)
};

// The directory of chunk files beside a disk store's database: one file per block version that
// keeps its bytes out of RocksDB, named by the version's generation (16 hex digits), holding the
// block's bytes at their block offsets and then a trailer describing the version (its meta
// record, checksummed: disk_format.h). The version's meta record in RocksDB says that its bytes
// are here (Meta::in_file); the file is written whole, trailer last, before that record is
// committed, and deleted after the record is (see DiskStore, and PROTOCOL.md "Disk layout").
// Files of stores written before trailers hold the bytes only, and read the same.
//
// Files go through the RocksDB FileSystem of the store's Env, so the fault-injecting file
// systems of the tests reach them as they reach RocksDB's own files.
//
// Not thread-safe: part of a DiskStore, on its storage thread.
class ChunkFiles {
 public:
  // `dir` is created by CreateDirectory(). `fs` is borrowed and must outlive this.
  ChunkFiles(std::string dir, rocksdb::FileSystem* fs);

  Status CreateDirectory();
  const std::string& dir() const { return dir_; }
  std::string PathOf(uint64_t generation) const;

  // A new, empty file for `generation` (replacing any file left under that name).
  Result<std::unique_ptr<ChunkFileWriter>> Create(uint64_t generation);
  // Reads [offset, offset + length) of `generation`'s file into new chunks, one per digest
  // unit the range overlaps (cut at unit boundaries), each read with one pread(2) straight into
  // the chunk's own buffer. kDataLoss when the file is missing or shorter than the range.
  Result<std::vector<ChunkPtr>> Read(uint64_t generation, uint64_t offset, uint64_t length) const;
  // The version `generation`'s file of `file_bytes` bytes describes in its trailer; nullopt when
  // it has none (an unfinished write, or a file written before trailers); kDataLoss when the
  // trailer is damaged or does not fit the file.
  Result<std::optional<std::pair<BlockId, Meta>>> ReadTrailer(uint64_t generation,
                                                              uint64_t file_bytes) const;
  // Deletes `generation`'s file; Ok when there was none.
  Status Delete(uint64_t generation);
  // Queues the deletion of `generation`'s file of `bytes` bytes, which no meta names any more, on
  // a thread of its own (ChunkFileDeleter): the caller does not wait for the file system to
  // free it.
  void DeleteInBackground(uint64_t generation, uint64_t bytes);
  // Returns once every deletion queued so far is done.
  void WaitForDeletions() { deleter_.Drain(); }
  // The bytes of files queued for deletion and not yet deleted.
  uint64_t deleting_bytes() const { return deleter_.pending_bytes(); }
  // Every chunk file: generation -> size in bytes. Other names are left alone.
  Result<std::map<uint64_t, uint64_t>> List() const;
  // Flips the byte at `offset` of `generation`'s file in place (fault injection).
  Status FlipByte(uint64_t generation, uint64_t offset);

 private:
  const std::string dir_;
  rocksdb::FileSystem* const fs_;
  ChunkFileDeleter deleter_;  // after fs_, which it uses
};

}  // namespace bm::disk
