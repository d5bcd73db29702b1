#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "blockmgr/block_id.h"
#include "blockmgr/chunk.h"
#include "blockmgr/status.h"
#include "blockmgr/storage_level.h"
#include "worker/block_status.h"
#include "worker/block_store.h"

namespace rocksdb {
class DB;
class Env;
class Status;
struct Options;
}  // namespace rocksdb

namespace bm {

class CommitJournal;
class DiskDirectoryLock;
namespace disk {
struct Meta;
class ChunkFiles;
class ChunkFileWriter;
}  // namespace disk

// How chunk values are laid out in RocksDB. Measured side by side (bm-bench row "4s", RocksDB
// 7.8, 1 MiB chunks, in-process; bench/notes): plain values were read several times faster than
// blob files and written about as fast, so kPlain is the default; kBlobFiles stays selectable
// so the two can be measured again. Either format reads a
// database written in the other (RocksDB reads existing blob files whatever the setting).
enum class DiskValueFormat { kPlain, kBlobFiles };

// Size and free space of the filesystem holding a store.
struct FilesystemSpace {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;  // free to an unprivileged writer (statvfs f_bavail)
};

// Measures the filesystem's space; an interface so tests can fake a filling disk.
class SpaceProbe {
 public:
  virtual ~SpaceProbe() = default;
  virtual Result<FilesystemSpace> Measure() const = 0;
};

// statvfs(2) of `dir`.
std::unique_ptr<SpaceProbe> MakeStatvfsProbe(std::string dir);

struct DiskStoreOptions {
  uint64_t limit_bytes = 0;  // 0: as much as the filesystem has
  DiskValueFormat format = DiskValueFormat::kPlain;
  // Null: statvfs of the store's directory.
  std::unique_ptr<SpaceProbe> space_probe;
  // The RocksDB environment (tests pass one that injects write errors); null: the default.
  // Its file system also holds the chunk files. Borrowed: must outlive the store.
  rocksdb::Env* env = nullptr;
  // Blocks of at least this many bytes keep their bytes in a chunk file beside the database,
  // out of RocksDB's write-ahead log (see DiskStore); smaller ones in RocksDB records.
  // UINT64_MAX: every block in RocksDB, as stores were written before chunk files.
  uint64_t chunk_file_min_bytes = kDefaultChunkFileMinBytes;
  // Measured in-process (bench/notes/2026-12-04-disk-write-path.md): a file per block wrote
  // blocks of 64 KiB and more faster than RocksDB's log, and 4 KiB blocks slower; its gets
  // were faster at every size measured.
  static constexpr uint64_t kDefaultChunkFileMinBytes = 64 * 1024;
};

// Blocks on disk in RocksDB under one directory. A block is a metadata record plus its bytes
// as chunks of about kChunkBytes under keys that carry the block's generation, so a reader
// never mixes two versions and a crash mid-write leaves only garbage that Open() sweeps away.
//
// Chunk files: a block of chunk_file_min_bytes or more keeps its bytes in a file of its own
// under <dir>/chunks, named by its generation (chunk_files.h), and RocksDB holds only its meta
// record. The file is written whole (write(2), no checksum: the unit digests cover the bytes),
// then a trailer holding a copy of the meta record under its own checksum, before the meta is
// committed, and deleted after the meta is. The meta's commit is the commit point: a crash
// before it leaves a file without a meta (without a valid trailer if cut short), which Open()
// deletes, unless the commit journal names that file's version as its block's committed one:
// then the meta was committed and lost since (a damaged table file, a damaged write-ahead log),
// and Open() takes the version back from the trailer (TakeBackFromChunkFiles), into the index
// and the database. Files written before trailers hold the bytes only; they read the same, but
// cannot be taken back. Those bytes skip RocksDB's write-ahead log, whose
// software CRC32C (Debian's RocksDB) was a large share of a disk put's CPU. Durability is the
// log's, unchanged: neither is fsynced, so an acknowledged block survives a kill of the process
// (its bytes and meta are in the kernel's page cache), not a crash of the machine. A file found
// missing or shorter than its block at open costs that block (reported lost, counted corrupt).
// Reads of a file version pread(2) into chunks of their own; Read and ReadGeneration hash every
// unit they return against the stored digests (as RocksDB's checksum checked table blocks),
// ReadForCheckingReader leaves that to the reader.
//
// Space: a write claims its declared size when it begins and is refused (kOutOfSpace) unless it
// fits both the byte limit (if any) and the filesystem's free space less a headroom kept for
// RocksDB's own files (see Headroom() in the .cc). Sizes are checked before any counter grows.
//
// Storage errors: a failed RocksDB write or a background error (a flush or compaction that
// failed) makes the store read-only, since RocksDB must not be written after a failed write
// (its log writer asserts). While read-only it serves reads, refuses writes with kOutOfSpace,
// and takes removals by hiding the blocks at once and deleting them once writable again.
// Maintain() reopens the database when the filesystem has room again, and only while the
// directory is still the one opened (a DiskDirectoryLock, disk_directory.h, held from Open to
// destruction, also keeps any second store out of it): the free space of a bare mount point or
// of whatever took a moved directory's place is no reason to write. A reopen that fails leaves
// the store read-only for good, its index empty and its blocks reported lost, never a crash.
// The DiskSet never runs Maintain() on a failed disk, so a failed disk is not reopened. A store
// whose filesystem is too full to open for writing opens read-only and recovers the same way.
//
// Lost blocks: every commit and removal is also appended to a CommitJournal beside the
// database. Open() and a reopen compare it with what RocksDB recovered; every block that did
// not survive is logged with the reason, counted and returned by TakeLost().
//
// Corruption: a table block that fails RocksDB's checksum costs the blocks whose bytes it
// holds, never the store. The start-up scan steps over damaged metadata, and a table file
// RocksDB cannot open is set aside (disk_repair.h): the versions in chunk files are taken back
// from them (above), the others are lost, named by the journal check with the damaged table
// file; a read that meets a damaged chunk fails with kDataLoss and drops the block. Either way
// a lost block is reported by TakeLost() and never served.
//
// Its parts, all run on the storage thread that owns the store:
//   disk_format.h       the key layout and the metadata codec (pure functions);
//   disk_index.h        the committed versions this store serves, and their bytes;
//   disk_scan.h         the start-up scan that rebuilds the index (and steps over damage);
//   journal_check.h     what the commit journal says was lost, as a verdict the store applies;
//   disk_store_writer.h a streamed write, cut into chunks;
// and this class: disk_store_open.cc opens it (the database, the scan, chunk files taken back,
// the journal check); disk_store.cc has chunk reads, removals, space, the read-only state and
// recovery. Both share DiskStore::Impl (disk_store_impl.h).
//
// Not thread-safe: owned by the worker's storage thread (StorageThread).
class DiskStore final : public BlockStore {
 public:
  // kUnavailable when another store (in this process or another) has `dir` open, in whatever
  // spelling; kInvalidArgument or kInternal when the directory cannot be used.
  static Result<std::unique_ptr<DiskStore>> Open(const std::string& dir, uint64_t limit_bytes,
                                                 DiskValueFormat format = DiskValueFormat::kPlain);
  static Result<std::unique_ptr<DiskStore>> Open(const std::string& dir, DiskStoreOptions options);
  ~DiskStore();

  // kOutOfSpace (with the numbers) when total_size would pass the limit or the filesystem's
  // free space less the headroom, or when the store is read-only. `version` is stored with the
  // block (BlockStatus::version).
  Result<std::unique_ptr<DiskWriter>> BeginWrite(const BlockId& id, StorageLevel level,
                                                 uint64_t total_size,
                                                 uint64_t version = 0) override;
  // Writes a whole block held in memory (used when spilling an evicted block), checked first
  // against `expected_unit_digests` when given.
  Status Write(const BlockId& id, StorageLevel level, const BlockData& data, uint64_t version = 0,
               std::span<const uint64_t> expected_unit_digests = {}) override;

  // Reads [offset, offset + max_length) (clamped to the block). kNotFound when absent;
  // kInvalidArgument when offset is past the end (offset == size reads zero bytes).
  Result<DiskRead> Read(const BlockId& id, uint64_t offset, uint64_t max_length) override;
  // As Read, but only from version `generation`: kAborted when the block was replaced or removed
  // since (a reader continuing a ranged read gets no mix of two versions).
  Result<DiskRead> ReadGeneration(const BlockId& id, uint64_t generation, uint64_t offset,
                                  uint64_t max_length) override;
  // As Read, without RocksDB's block checksum on chunks of kUncheckedChunkMinBytes or more of
  // a version stored with unit digests: the reader's digest check covers those bytes, and the
  // checksum was a second pass over them on the storage thread, in series with every get
  // (bench/README.md, workload 4). Small chunks, which share their table blocks with other
  // records, and versions without digests are read checked.
  Result<DiskRead> ReadForCheckingReader(const BlockId& id, uint64_t offset,
                                         uint64_t max_length) override;
  static constexpr uint64_t kUncheckedChunkMinBytes = 64 * 1024;
  std::optional<BlockStatus> Find(const BlockId& id) const override;
  // Removes the block. kNotFound when absent. While read-only the block is hidden at once and
  // deleted from the database when it is writable again.
  Status Remove(const BlockId& id) override;

  // Sorted by id.
  std::vector<BlockStatus> List() const override;
  size_t block_count() const override;
  uint64_t limit() const { return limit_; }
  // Bytes of committed blocks plus space claimed by writes in progress.
  uint64_t used() const override;
  // What used() could reach now: the limit, or less when the filesystem has less room.
  uint64_t capacity() const override;
  // Space kept free on the filesystem for RocksDB's own files.
  uint64_t headroom() const { return headroom_; }

  bool read_only() const override;
  // Why the store is read-only ("" when it is not).
  std::string read_only_reason() const;

  // Off the hot path, every second or so: notices background errors, reopens a read-only store
  // once the filesystem has room again (and its directory is still the one opened), and gives
  // back the space of removed blocks when the filesystem is short of it. Blocks found lost on a
  // reopen, or lost to a reopen that failed, are added to TakeLost().
  void Maintain() override;
  // Blocks found lost since the last call (at open, or on a reopen).
  std::vector<LostBlock> TakeLost() override;
  // Blocks found lost since the store was opened.
  uint64_t lost_count() const { return lost_count_; }
  // Of those, the blocks lost to corrupt bytes on disk (a table block that failed RocksDB's
  // checksum, in the start-up scan or on a read).
  uint64_t corrupt_count() const override { return corrupt_count_; }
  Status ReportCorrupt(const BlockId& id, uint64_t generation, const std::string& what) override;
  // Rewrites the chunk holding `offset` through RocksDB, so RocksDB's own checksums pass and
  // only the block's digests can tell.
  Status CorruptStoredByte(const BlockId& id, uint64_t offset) override;
  // Returns once the chunk files of the versions removed or replaced so far are deleted (they
  // are deleted on a thread of their own, disk::ChunkFileDeleter).
  void WaitForDeletions();

  // Generations come from one increasing sequence, above every generation found on disk, so a
  // generation never names two versions of a block on this worker. (The block manager's memory
  // generations have the top bit set, which this sequence never reaches.)
  uint64_t next_generation() const;
  void AdvanceGenerationTo(uint64_t generation);

 private:
  // Whether a read's chunks get RocksDB's block checksum (see ReadForCheckingReader).
  enum class ChunkCheck { kAlways, kLeftToReader };
  // The block's current version; kNotFound when it is not stored here.
  Result<DiskRead> ReadCurrent(const BlockId& id, uint64_t offset, uint64_t max_length,
                               ChunkCheck check);
  Result<DiskRead> ReadVersion(const BlockId& id, uint64_t generation, uint64_t offset,
                               uint64_t max_length, ChunkCheck check);
  // The writes of a DiskStoreWriter (disk_store_writer.h), under the generation it was given.
  // Each fails when the store is read-only or was reopened since `opening`, the
  // impl_->opening the write began under (a reopen deletes the chunks of unfinished writes).
  friend class DiskStoreWriter;
  Status WritableSince(uint64_t opening, const std::string& what);
  Status PutChunk(uint64_t generation, uint64_t index, std::span<const std::byte> bytes,
                  uint64_t opening, const std::string& what);
  // Writes the last chunk (if not empty) and the meta in one batch, replacing the block's
  // previous version, and takes the version into the index and the journal.
  Status CommitVersion(const BlockId& id, const disk::Meta& meta,
                       std::span<const std::byte> last_chunk, uint64_t opening,
                       const std::string& what);
  // Gives back the write's claimed space and deletes the chunks (or chunk file) it wrote.
  void AbandonWrite(uint64_t generation, uint64_t claimed, uint64_t chunks_written, bool in_file,
                    const std::string& what);
  // Appends to the chunk file of a write (DiskStoreWriter with a file); a failure makes the
  // store read-only, as a failed RocksDB write does.
  Status AppendToFile(disk::ChunkFileWriter& file, std::span<const std::byte> bytes,
                      uint64_t opening, const std::string& what);
  // Appends the trailer describing version `meta` of `id` to the chunk file of a write and
  // closes it, before its meta is committed.
  Status FinishFile(disk::ChunkFileWriter& file, const BlockId& id, const disk::Meta& meta,
                    uint64_t opening, const std::string& what);
  // A file write's status; a failure makes the store read-only.
  Status FileWritten(Status s, const std::string& what);
  // After a version's meta was deleted: deletes its chunk file, or notes its RocksDB range
  // for ReclaimRemovedSpace.
  void ForgetVersionBytes(const BlockId& id, const disk::Meta& meta);
  // Reads a version whose bytes are in a chunk file.
  Result<DiskRead> ReadFileVersion(const BlockId& id, const disk::Meta& meta, uint64_t offset,
                                   uint64_t length, ChunkCheck check);
  // At open: drops the versions whose chunk file is missing or short (lost) and, when
  // writable, deletes the chunk files no version owns (writes a crash cut short).
  void CheckChunkFiles();
  // At start: takes back into the index (and writes back into the database, when writable) the
  // versions whose meta the database lost (a damaged table file, a damaged log) from their
  // chunk files, `files` (generation -> size) less those the index `owned`: a file whose trailer
  // is valid and names the version the commit journal says is its block's committed one.
  // Adds the generations taken back to `owned`.
  void TakeBackFromChunkFiles(const std::map<uint64_t, uint64_t>& files, std::set<uint64_t>& owned);

  struct Impl;
  DiskStore(std::string dir, DiskStoreOptions options);
  // Opens the database: for writing when the filesystem has the headroom, else (or when that
  // fails for lack of space) read-only.
  Status OpenDatabase();
  // DB::Open failed on an unreadable table file (`open_error`): repairs the database without it
  // (disk_repair.h) and remembers which files were set aside. False when the repair failed.
  bool SetAsideUnreadableTables(const rocksdb::Options& options, const rocksdb::Status& open_error);
  // Loads every committed block's metadata (ScanDiskStore) and, when writable, deletes records
  // that belong to no committed version (writes cut short by a crash).
  Status LoadIndex();
  // Compares the journal's committed blocks with the index, records the losses, drops versions
  // older than the journal's and compacts the journal.
  // `removed`: blocks the journal says were removed (deleted here if the store still has them).
  void CheckAgainstJournal(const std::map<BlockId, uint64_t>& committed,
                           const std::map<BlockId, uint64_t>& removed, const char* when);
  // Takes a version out of the index and deletes it (or hides it while read-only).
  void DropUnserved(const BlockId& id);
  // A block whose stored bytes are corrupt (`what`): dropped, recorded removed in the journal,
  // reported lost. Returns the kDataLoss the read that found it fails with.
  Status DropCorrupt(const BlockId& id, const std::string& what);
  // Makes the store read-only (once); `why` is logged and shown in refusals.
  void EnterReadOnly(const std::string& why);
  // Ok, or why nothing may be written now (the store is read-only).
  Status Writable();
  // The status of a RocksDB write; a failure makes the store read-only.
  Status Written(const rocksdb::Status& s, const std::string& what);
  // Closes and reopens the database once the filesystem has room.
  void TryRecover();
  // Deletes the versions removed while read-only, and compacts removed ranges when space is
  // short so their bytes leave the disk.
  void ReclaimRemovedSpace();
  Result<FilesystemSpace> MeasureSpace() const;
  std::map<BlockId, uint64_t> HiddenRemovals() const;

  const std::string dir_;
  const uint64_t limit_;
  const DiskValueFormat format_;
  const uint64_t chunk_file_min_bytes_;
  std::unique_ptr<SpaceProbe> probe_;
  rocksdb::Env* const env_;
  // Held from before anything is read until after everything is closed (declared first of
  // the rest, so destroyed last).
  std::unique_ptr<DiskDirectoryLock> lock_;
  uint64_t write_buffer_bytes_ = 0;  // memtable size, scaled to the filesystem
  uint64_t headroom_ = 0;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<CommitJournal> journal_;
  std::vector<LostBlock> lost_;
  uint64_t lost_count_ = 0;
  uint64_t corrupt_count_ = 0;
};

}  // namespace bm
