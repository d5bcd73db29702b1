#include "worker/disk/disk_store.h"

#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "common/core/byte_size.h"
#include "common/core/digest.h"
#include "common/core/mutex.h"
#include "common/core/protocol.h"
#include "worker/disk/chunk_files.h"
#include "worker/disk/commit_journal.h"
#include "worker/disk/disk_directory.h"
#include "worker/disk/disk_error_listener.h"
#include "worker/disk/disk_format.h"
#include "worker/disk/disk_index.h"
#include "worker/disk/disk_repair.h"
#include "worker/disk/disk_scan.h"
#include "worker/disk/disk_space.h"
#include "worker/disk/disk_store_impl.h"
#include "worker/disk/disk_store_writer.h"
#include "worker/disk/journal_check.h"

namespace bm {
namespace {

using disk::FromRocks;
using disk::Meta;
using disk::SaturatingAdd;

// Chunk bytes read from RocksDB, pinned where RocksDB read them (the table block it loaded
// from the file, a block cache entry, or its own copy of a memtable value): handed to the
// network with no copy. A chunk may outlive the store (a send still queued in ZeroMQ when the
// worker shuts down), so it shares ownership of the block cache its pin may point into;
// `cache_` is declared first so it is destroyed after the pin is released.
class PinnedChunk final : public Chunk {
 public:
  explicit PinnedChunk(std::shared_ptr<rocksdb::Cache> cache) : cache_(std::move(cache)) {}
  rocksdb::PinnableSlice& value() { return value_; }
  std::span<const std::byte> bytes() const override {
    return {reinterpret_cast<const std::byte*>(value_.data()), value_.size()};
  }

 private:
  std::shared_ptr<rocksdb::Cache> cache_;
  rocksdb::PinnableSlice value_;
};

rocksdb::Slice ToSlice(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace

// DiskStore::Impl is in disk_store_impl.h (shared with disk_store_open.cc).

DiskStore::DiskStore(std::string dir, DiskStoreOptions options)
    : dir_(std::move(dir)),
      limit_(options.limit_bytes),
      format_(options.format),
      chunk_file_min_bytes_(options.chunk_file_min_bytes),
      probe_(options.space_probe != nullptr ? std::move(options.space_probe)
                                            : MakeStatvfsProbe(dir_)),
      env_(options.env),
      impl_(std::make_unique<Impl>()) {}

DiskStore::~DiskStore() {
  if (db_ == nullptr || lock_ == nullptr) return;
  // Closing writes by path (a memtable flush, MANIFEST, OPTIONS) into whatever is there now,
  // e.g. a bare mount point: a store whose directory is gone leaves its database open instead.
  if (Status here = CheckStillOpened(dir_, lock_->opened()); !here.ok()) {
    spdlog::warn("disk store {}: not closing its database: {}", dir_, here.message());
    static_cast<void>(db_->PauseBackgroundWork());
    static_cast<void>(db_.release());
  }
}

Result<std::unique_ptr<DiskWriter>> DiskStore::BeginWrite(const BlockId& id, StorageLevel level,
                                                          uint64_t total_size, uint64_t version) {
  BM_RETURN_IF_ERROR(Writable());
  const uint64_t in_use = used();
  if (limit_ != 0 && (in_use > limit_ || total_size > limit_ - in_use)) {
    return OutOfSpaceError("block " + id.ToString() + " of " + FormatBytes(total_size) +
                           " does not fit on disk: " + FormatBytes(in_use) + " of the " +
                           FormatBytes(limit_) + " limit in use");
  }
  // The filesystem's real free space, whatever the limit says. Claims of writes in progress
  // count whole: some of their bytes may be on disk already, which only errs on the safe side.
  auto fits_filesystem = [&]() -> Status {
    BM_ASSIGN_OR_RETURN(FilesystemSpace space, MeasureSpace());
    const uint64_t usable =
        space.available_bytes > headroom_ ? space.available_bytes - headroom_ : 0;
    const uint64_t claimed = impl_->claimed_bytes;
    if (claimed > usable || total_size > usable - claimed) {
      return OutOfSpaceError("block " + id.ToString() + " of " + FormatBytes(total_size) +
                             " does not fit on disk: the filesystem has " +
                             FormatBytes(space.available_bytes) + " free, of which " +
                             FormatBytes(headroom_) + " is kept for the store's own files and " +
                             FormatBytes(claimed) + " is claimed by writes in progress");
    }
    return Status::Ok();
  };
  Status fits = fits_filesystem();
  if (fits.code() == StatusCode::kOutOfSpace && impl_->files->deleting_bytes() > 0) {
    // Removed blocks' files may still hold the space: wait for their deletion, measure again.
    impl_->files->WaitForDeletions();
    fits = fits_filesystem();
  }
  if (fits.code() == StatusCode::kOutOfSpace && !impl_->removed_ranges.empty()) {
    // Removed blocks may still hold the space: give it back and measure again.
    ReclaimRemovedSpace();
    BM_RETURN_IF_ERROR(Writable());
    fits = fits_filesystem();
  }
  BM_RETURN_IF_ERROR(fits);
  const uint64_t generation = impl_->next_generation++;
  std::unique_ptr<disk::ChunkFileWriter> file;
  if (total_size > 0 && total_size >= chunk_file_min_bytes_) {
    Result<std::unique_ptr<disk::ChunkFileWriter>> created = impl_->files->Create(generation);
    BM_RETURN_IF_ERROR(
        FileWritten(created.status(), "creating the chunk file of block " + id.ToString()));
    file = std::move(created).value();
  }
  impl_->claimed_bytes += total_size;  // no wrap: total_size fits in what is free
  return std::unique_ptr<DiskWriter>(std::make_unique<DiskStoreWriter>(
      *this, id, level, total_size, generation, version, impl_->opening, std::move(file)));
}

Status DiskStore::FileWritten(Status s, const std::string& what) {
  if (s.ok()) return s;
  EnterReadOnly(what + " failed: " + s.message());
  return s;
}

Status DiskStore::AppendToFile(disk::ChunkFileWriter& file, std::span<const std::byte> bytes,
                               uint64_t opening, const std::string& what) {
  BM_RETURN_IF_ERROR(WritableSince(opening, what));
  return FileWritten(file.Append(bytes), "writing " + what);
}

Status DiskStore::FinishFile(disk::ChunkFileWriter& file, const BlockId& id, const disk::Meta& meta,
                             uint64_t opening, const std::string& what) {
  BM_RETURN_IF_ERROR(WritableSince(opening, what));
  const std::string trailer = disk::EncodeChunkTrailer(id, meta);
  BM_RETURN_IF_ERROR(FileWritten(
      file.Append(std::span(reinterpret_cast<const std::byte*>(trailer.data()), trailer.size())),
      "writing " + what));
  return FileWritten(file.Close(), "writing " + what);
}

void DiskStore::ForgetVersionBytes(const BlockId& id, const Meta& meta) {
  if (meta.in_file) {
    // Its meta is gone: a crash before the file is deleted leaves it to the next open's sweep.
    impl_->files->DeleteInBackground(meta.generation, meta.size);
    return;
  }
  impl_->removed_ranges.push_back(disk::VersionRange(id, meta));
  impl_->reclaimable_bytes = SaturatingAdd(impl_->reclaimable_bytes, meta.size);
}

Status DiskStore::WritableSince(uint64_t opening, const std::string& what) {
  BM_RETURN_IF_ERROR(Writable());
  // A reopen deletes the chunks of writes in progress (they have no meta yet), so such a write
  // cannot be completed.
  if (impl_->opening != opening) {
    return AbortedError(what + " began before the disk store was reopened; retry");
  }
  return Status::Ok();
}

Status DiskStore::PutChunk(uint64_t generation, uint64_t index, std::span<const std::byte> bytes,
                           uint64_t opening, const std::string& what) {
  BM_RETURN_IF_ERROR(WritableSince(opening, what));
  return Written(
      db_->Put(impl_->write_options, disk::VersionChunkKey(generation, index), ToSlice(bytes)),
      "writing " + what);
}

Status DiskStore::CommitVersion(const BlockId& id, const disk::Meta& meta,
                                std::span<const std::byte> last_chunk, uint64_t opening,
                                const std::string& what) {
  BM_RETURN_IF_ERROR(WritableSince(opening, what));
  rocksdb::WriteBatch batch;
  if (!last_chunk.empty()) {
    batch.Put(disk::VersionChunkKey(meta.generation, meta.chunk_count - 1), ToSlice(last_chunk));
  }
  batch.Put(disk::VersionKey(meta.generation), disk::EncodeVersionMeta(id, meta));
  const Meta* old = impl_->index.Find(id);
  if (old != nullptr) disk::DeleteVersion(batch, id, *old);
  BM_RETURN_IF_ERROR(Written(db_->Write(impl_->write_options, &batch), "committing " + what));
  if (std::optional<Meta> replaced = impl_->index.Put(id, meta)) ForgetVersionBytes(id, *replaced);
  journal_->RecordCommitted(id, meta.generation);
  impl_->claimed_bytes -= meta.size;
  return Status::Ok();
}

void DiskStore::AbandonWrite(uint64_t generation, uint64_t claimed, uint64_t chunks_written,
                             bool in_file, const std::string& what) {
  impl_->claimed_bytes -= claimed;
  if (in_file) {
    // No meta names it: deleted now, or by the next open's sweep if this fails (or crashes).
    if (Status s = impl_->files->Delete(generation); !s.ok()) {
      spdlog::warn("disk store {}: abandoned {}: {}", dir_, what, s.ToString());
    }
    return;
  }
  // A read-only store leaves them: the chunks have no meta, so the next open deletes them.
  if (chunks_written == 0 || !Writable().ok()) return;
  Status s = Written(db_->DeleteRange(impl_->write_options, db_->DefaultColumnFamily(),
                                      disk::VersionKey(generation), disk::VersionEnd(generation)),
                     "deleting the chunks of abandoned " + what);
  if (s.ok()) {
    impl_->removed_ranges.emplace_back(disk::VersionKey(generation), disk::VersionEnd(generation));
    impl_->reclaimable_bytes =
        SaturatingAdd(impl_->reclaimable_bytes, chunks_written * kChunkBytes);
  }
}

Status DiskStore::Write(const BlockId& id, StorageLevel level, const BlockData& data,
                        uint64_t version, std::span<const uint64_t> expected_unit_digests) {
  if (!expected_unit_digests.empty()) {
    std::vector<std::span<const std::byte>> pieces;
    for (const ChunkPtr& chunk : data.chunks) pieces.push_back(chunk->bytes());
    if (std::optional<uint64_t> bad =
            FirstBadUnit(pieces, 0, data.size, data.size, expected_unit_digests)) {
      return DataLossError("block " + id.ToString() + " is corrupt in memory: bytes " +
                           std::to_string(*bad * kDigestUnitBytes) + " on do not match their " +
                           "digest; not written to disk");
    }
  }
  BM_ASSIGN_OR_RETURN(std::unique_ptr<DiskWriter> writer,
                      BeginWrite(id, level, data.size, version));
  // Checked above: the bytes are not hashed a second time on their way in.
  writer->AdoptUnitDigests(expected_unit_digests);
  for (const ChunkPtr& chunk : data.chunks) BM_RETURN_IF_ERROR(writer->Append(chunk->bytes()));
  return writer->Commit();
}

Result<DiskRead> DiskStore::Read(const BlockId& id, uint64_t offset, uint64_t max_length) {
  return ReadCurrent(id, offset, max_length, ChunkCheck::kAlways);
}

Result<DiskRead> DiskStore::ReadForCheckingReader(const BlockId& id, uint64_t offset,
                                                  uint64_t max_length) {
  return ReadCurrent(id, offset, max_length, ChunkCheck::kLeftToReader);
}

Result<DiskRead> DiskStore::ReadCurrent(const BlockId& id, uint64_t offset, uint64_t max_length,
                                        ChunkCheck check) {
  const Meta* meta = impl_->index.Find(id);
  if (meta == nullptr) return NotFoundError("block " + id.ToString() + " is not on disk here");
  return ReadVersion(id, meta->generation, offset, max_length, check);
}

Result<DiskRead> DiskStore::ReadGeneration(const BlockId& id, uint64_t generation, uint64_t offset,
                                           uint64_t max_length) {
  return ReadVersion(id, generation, offset, max_length, ChunkCheck::kAlways);
}

Result<DiskRead> DiskStore::ReadVersion(const BlockId& id, uint64_t generation, uint64_t offset,
                                        uint64_t max_length, ChunkCheck check) {
  const Meta* found = impl_->index.Find(id);
  if (found == nullptr) {
    return AbortedError("block " + id.ToString() + " generation " + std::to_string(generation) +
                        " was removed");
  }
  const Meta meta = *found;  // a copy: a corrupt chunk drops the block from the index
  if (meta.generation != generation) {
    return AbortedError("block " + id.ToString() + " generation " + std::to_string(generation) +
                        " was replaced by generation " + std::to_string(meta.generation));
  }
  if (offset > meta.size) {
    return InvalidArgumentError("offset " + std::to_string(offset) + " is past the end of block " +
                                id.ToString() + " (" + std::to_string(meta.size) + " bytes)");
  }
  DiskRead read{meta.size, meta.generation, meta.level, {}, {}};
  const uint64_t length = std::min(max_length, meta.size - offset);
  if (length == 0) return read;
  if (meta.in_file) return ReadFileVersion(id, meta, offset, length, check);

  const uint64_t end = offset + length;
  const uint64_t first = offset / meta.chunk_bytes;
  const uint64_t last = (end - 1) / meta.chunk_bytes;
  // No snapshot is needed to read the chunks as of one moment: a version's chunks never change
  // once written, and only this thread deletes them (the store is not thread-safe). Taking one
  // per read also made RocksDB rewrite every table file that reached the bottom level
  // ("BottommostFiles" compactions, run when the oldest snapshot moves past a file).
  const bool reader_checks = check == ChunkCheck::kLeftToReader && !meta.unit_digests.empty();
  Status status;
  for (uint64_t i = first; i <= last && status.ok(); ++i) {
    const uint64_t chunk_start = i * meta.chunk_bytes;
    const uint64_t expected = std::min<uint64_t>(meta.chunk_bytes, meta.size - chunk_start);
    const bool unchecked = reader_checks && expected >= kUncheckedChunkMinBytes;
    const rocksdb::ReadOptions& options =
        unchecked ? impl_->reader_checked_read_options : impl_->read_options;
    auto chunk = std::make_shared<PinnedChunk>(impl_->block_cache);
    rocksdb::PinnableSlice& value = chunk->value();
    const std::string key = disk::ChunkKeyOf(id, meta, i);
    rocksdb::Status s = db_->Get(options, db_->DefaultColumnFamily(), key, &value);
    if (unchecked && (!s.ok() || value.size() != expected)) {
      // Something is off in a read RocksDB did not check (a damaged table block can parse as
      // a missing key or a wrong length): read again with the checksum, which names the damage
      // unless the unchecked read left the table block in the cache; then the same error fails
      // the read below (a parse error as corruption), and no bytes are served either way.
      value.Reset();
      s = db_->Get(impl_->read_options, db_->DefaultColumnFamily(), key, &value);
    }
    if (s.IsNotFound()) {
      status = AbortedError("chunk " + std::to_string(i) + " of block " + id.ToString() +
                            " generation " + std::to_string(generation) + " is gone");
      break;
    }
    if (s.IsCorruption()) {
      return DropCorrupt(
          id, "chunk " + std::to_string(i) + " failed RocksDB's checksum (" + s.ToString() + ")");
    }
    status = FromRocks(s, "reading block " + id.ToString());
    if (!status.ok()) break;
    if (value.size() != expected) {
      status = InternalError("chunk " + std::to_string(i) + " of block " + id.ToString() + " has " +
                             std::to_string(value.size()) + " bytes, expected " +
                             std::to_string(expected));
      break;
    }
    const uint64_t from = std::max(offset, chunk_start) - chunk_start;
    const uint64_t to = std::min(end, chunk_start + expected) - chunk_start;
    read.chunks.push_back(SliceChunk(std::move(chunk), from, to - from));
  }
  if (!status.ok()) return status;
  if (!meta.unit_digests.empty()) {
    read.unit_digests.assign(meta.unit_digests.begin() + static_cast<ptrdiff_t>(first),
                             meta.unit_digests.begin() + static_cast<ptrdiff_t>(last) + 1);
  }
  return read;
}

Result<DiskRead> DiskStore::ReadFileVersion(const BlockId& id, const Meta& meta, uint64_t offset,
                                            uint64_t length, ChunkCheck check) {
  DiskRead read{meta.size, meta.generation, meta.level, {}, {}};
  const uint64_t first = offset / meta.chunk_bytes;
  const uint64_t last = (offset + length - 1) / meta.chunk_bytes;
  // Without a reader that checks, this read checks: whole units are read and hashed against
  // their digests (as RocksDB's checksum covered table blocks), then cut to the range.
  const bool checked_here = check == ChunkCheck::kAlways;
  const uint64_t from = checked_here ? first * meta.chunk_bytes : offset;
  const uint64_t to =
      checked_here ? std::min<uint64_t>((last + 1) * meta.chunk_bytes, meta.size) : offset + length;
  Result<std::vector<ChunkPtr>> chunks = impl_->files->Read(meta.generation, from, to - from);
  if (!chunks.ok()) {
    if (chunks.status().code() == StatusCode::kDataLoss) {
      return DropCorrupt(id, chunks.status().message());
    }
    return chunks.status();
  }
  if (checked_here) {
    for (uint64_t i = first; i <= last; ++i) {
      const ChunkPtr& chunk = (*chunks)[i - first];
      if (DigestOf(chunk->bytes()) != meta.unit_digests[i]) {
        return DropCorrupt(id, "unit " + std::to_string(i) + " of its chunk file " +
                                   impl_->files->PathOf(meta.generation) +
                                   " does not match its digest");
      }
      const uint64_t unit_start = i * meta.chunk_bytes;
      const uint64_t begin = std::max(offset, unit_start) - unit_start;
      const uint64_t end = std::min(offset + length, unit_start + chunk->size()) - unit_start;
      read.chunks.push_back(
          begin == 0 && end == chunk->size() ? chunk : SliceChunk(chunk, begin, end - begin));
    }
  } else {
    read.chunks = std::move(chunks).value();
  }
  read.unit_digests.assign(meta.unit_digests.begin() + static_cast<ptrdiff_t>(first),
                           meta.unit_digests.begin() + static_cast<ptrdiff_t>(last) + 1);
  return read;
}

std::optional<BlockStatus> DiskStore::Find(const BlockId& id) const {
  return impl_->index.StatusOf(id);
}

Status DiskStore::Remove(const BlockId& id) {
  const Meta* found = impl_->index.Find(id);
  if (found == nullptr) return NotFoundError("block " + id.ToString() + " is not on disk here");
  const Meta meta = *found;
  bool deleted = false;
  if (Writable().ok()) {
    rocksdb::WriteBatch batch;
    disk::DeleteVersion(batch, id, meta);
    deleted =
        Written(db_->Write(impl_->write_options, &batch), "removing block " + id.ToString()).ok();
  }
  if (deleted) {
    ForgetVersionBytes(id, meta);
  } else {
    // Nothing may be written (or the write just failed, making the store read-only): hide it
    // now, delete it once writable (TryRecover). The journal line below keeps the removal
    // across a restart in between (CheckAgainstJournal).
    impl_->hidden_removals.emplace_back(id, meta);
  }
  journal_->RecordRemoved(id, meta.generation);
  impl_->index.Erase(id);
  return Status::Ok();
}

std::vector<BlockStatus> DiskStore::List() const { return impl_->index.List(); }

size_t DiskStore::block_count() const { return impl_->index.size(); }

uint64_t DiskStore::used() const {
  return SaturatingAdd(impl_->index.committed_bytes(), impl_->claimed_bytes);
}

uint64_t DiskStore::capacity() const {
  const uint64_t in_use = used();
  if (read_only()) return in_use;
  uint64_t room = 0;
  if (Result<FilesystemSpace> space = MeasureSpace(); space.ok()) {
    // Removed blocks' bytes count as room, in RocksDB or in files being deleted: a write that
    // needs them reclaims them, or waits for the deletions, first.
    const uint64_t usable = SaturatingAdd(
        SaturatingAdd(space->available_bytes > headroom_ ? space->available_bytes - headroom_ : 0,
                      impl_->reclaimable_bytes),
        impl_->files->deleting_bytes());
    room = usable > impl_->claimed_bytes ? usable - impl_->claimed_bytes : 0;
  }
  const uint64_t by_filesystem = SaturatingAdd(in_use, room);
  return limit_ != 0 ? std::min(limit_, by_filesystem) : by_filesystem;
}

Result<FilesystemSpace> DiskStore::MeasureSpace() const { return probe_->Measure(); }

bool DiskStore::read_only() const {
  return !impl_->read_only_reason.empty() ||
         (impl_->listener != nullptr && impl_->listener->failed());
}

std::string DiskStore::read_only_reason() const {
  if (!impl_->read_only_reason.empty()) return impl_->read_only_reason;
  if (impl_->listener != nullptr && impl_->listener->failed()) {
    return "RocksDB background error: " + impl_->listener->message();
  }
  return "";
}

Status DiskStore::Writable() {
  if (impl_->read_only_reason.empty() && impl_->listener != nullptr && impl_->listener->failed()) {
    EnterReadOnly("RocksDB background error: " + impl_->listener->message());
  }
  if (impl_->read_only_reason.empty()) return Status::Ok();
  return OutOfSpaceError("disk store is read-only after a storage error (" +
                         impl_->read_only_reason + "); it stores again once space is freed");
}

Status DiskStore::Written(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  Status status = FromRocks(s, what);
  EnterReadOnly(what + " failed: " + s.ToString());
  return status;
}

void DiskStore::EnterReadOnly(const std::string& why) {
  if (!impl_->read_only_reason.empty()) return;
  // After a failed write this RocksDB (Debian's 7.8 keeps its assertions) aborts the process
  // on the next write to the same log, so nothing is written until the database is reopened.
  impl_->read_only_reason = why;
  spdlog::error(
      "disk store {}: read-only from now on: {}; serving reads and removals, storing "
      "nothing until space is freed",
      dir_, why);
}

std::map<BlockId, uint64_t> DiskStore::HiddenRemovals() const {
  std::map<BlockId, uint64_t> removed;
  for (const auto& [id, meta] : impl_->hidden_removals) removed[id] = meta.generation;
  return removed;
}

void DiskStore::DropUnserved(const BlockId& id) {
  std::optional<Meta> erased = impl_->index.Erase(id);
  if (!erased) return;
  const Meta meta = std::move(*erased);
  if (!Writable().ok()) {
    impl_->hidden_removals.emplace_back(id, meta);
    return;
  }
  rocksdb::WriteBatch batch;
  disk::DeleteVersion(batch, id, meta);
  if (Written(db_->Write(impl_->write_options, &batch), "removing block " + id.ToString()).ok()) {
    ForgetVersionBytes(id, meta);
  } else {
    impl_->hidden_removals.emplace_back(id, meta);
  }
}

Status DiskStore::DropCorrupt(const BlockId& id, const std::string& what) {
  // A vanished directory makes every block look damaged: the disk failed, not this block.
  if (Status here = CheckStillOpened(dir_, lock_->opened()); !here.ok()) {
    return InternalError("reading block " + id.ToString() + ": " + what + "; " + here.message());
  }
  const Meta* found = impl_->index.Find(id);
  const uint64_t generation = found != nullptr ? found->generation : 0;
  std::string reason = "generation " + std::to_string(generation) + " is corrupt on disk: " + what;
  spdlog::error("disk store {}: block {} lost: {}; dropped, never served", dir_, id.ToString(),
                reason);
  DropUnserved(id);
  // Removed for good: a restart does not report it lost a second time.
  journal_->RecordRemoved(id, generation);
  ++lost_count_;
  ++corrupt_count_;
  lost_.push_back({id, reason, LostCause::kCopyCorrupt});
  return DataLossError("block " + id.ToString() + " is corrupt on this worker's disk (" + what +
                       ")");
}

Status DiskStore::ReportCorrupt(const BlockId& id, uint64_t generation, const std::string& what) {
  const Meta* found = impl_->index.Find(id);
  if (found == nullptr || found->generation != generation) {
    return DataLossError("block " + id.ToString() + " generation " + std::to_string(generation) +
                         " was corrupt (" + what + "); it is no longer stored");
  }
  return DropCorrupt(id, what);
}

Status DiskStore::CorruptStoredByte(const BlockId& id, uint64_t offset) {
  const Meta* found = impl_->index.Find(id);
  if (found == nullptr) return NotFoundError("block " + id.ToString() + " is not on disk here");
  const Meta& meta = *found;
  if (offset >= meta.size) {
    return InvalidArgumentError("offset " + std::to_string(offset) + " is not inside block " +
                                id.ToString() + " (" + std::to_string(meta.size) + " bytes)");
  }
  BM_RETURN_IF_ERROR(Writable());
  // In place, under the reads' feet: chunks already read out are copies and stay as they were.
  if (meta.in_file) return impl_->files->FlipByte(meta.generation, offset);
  const std::string key = disk::ChunkKeyOf(id, meta, offset / meta.chunk_bytes);
  std::string value;
  BM_RETURN_IF_ERROR(FromRocks(db_->Get(impl_->read_options, key, &value),
                               "reading the chunk of " + id.ToString() + " to corrupt"));
  const uint64_t at = offset % meta.chunk_bytes;
  if (at >= value.size()) {
    return InternalError("chunk of block " + id.ToString() + " holding offset " +
                         std::to_string(offset) + " has only " + std::to_string(value.size()) +
                         " bytes");
  }
  value[at] = static_cast<char>(value[at] ^ 0xFF);
  // Chunks already read out stay as they were: a pinned value is a table block, a block cache
  // entry or a copy of the memtable's, none of which this write changes.
  return Written(db_->Put(impl_->write_options, key, value),
                 "corrupting block " + id.ToString() + " (fault injection)");
}

std::vector<LostBlock> DiskStore::TakeLost() { return std::exchange(lost_, {}); }

void DiskStore::WaitForDeletions() { impl_->files->WaitForDeletions(); }

void DiskStore::Maintain() {
  if (Writable().ok()) {
    ReclaimRemovedSpace();
  } else {
    TryRecover();
  }
  // The journal grows by a line per commit and removal; compact it when mostly dead lines.
  if (Writable().ok() && journal_->lines_since_rewrite() > 4 * impl_->index.size() + 100000) {
    if (Status s = journal_->Rewrite(impl_->index.Generations(), HiddenRemovals()); !s.ok()) {
      spdlog::warn("disk store: cannot compact the commit journal: {}", s.ToString());
    }
  }
}

// A reopen rather than DB::Resume(): Resume() carries on with the open database and, after a
// failed log write, the same log writer, which is what asserts on its next write; a reopen
// replays the old log up to its last good record and writes a fresh one.
void DiskStore::TryRecover() {
  if (impl_->unrecoverable) return;
  // Room in whatever took the directory's place (a bare mount point) is no reason to write.
  if (Status here = CheckStillOpened(dir_, lock_->opened()); !here.ok()) {
    spdlog::error("disk store {}: not reopened: {}", dir_, here.message());
    impl_->unrecoverable = true;
    impl_->read_only_reason = here.message();
    return;
  }
  impl_->files->WaitForDeletions();  // their room counts
  Result<FilesystemSpace> space = MeasureSpace();
  if (!space.ok() || space->available_bytes < headroom_) return;
  spdlog::info("disk store {}: {} free again: reopening the database to store blocks again", dir_,
               FormatBytes(space->available_bytes));
  // What the store served: the reopened database must hold all of it.
  const std::map<BlockId, uint64_t> served = impl_->index.Generations();
  impl_->hidden_removals.clear();  // what the reopened index holds beyond `served` goes below
  db_.reset();                     // closes it; chunks still pinned keep the block cache alive
  Status opened = OpenDatabase();
  if (!opened.ok()) {
    // The disk went bad under the store: what it served is lost, and it stays read-only.
    impl_->unrecoverable = true;
    impl_->index.Clear();  // nothing touches the database any more
    impl_->read_only_reason = "reopening the database in " + dir_ + " failed: " + opened.message();
    spdlog::error("disk store: {}; its {} blocks are lost", impl_->read_only_reason, served.size());
    for (const auto& [id, generation] : served) {
      lost_.push_back({id, impl_->read_only_reason, LostCause::kStorageError});
    }
    lost_count_ += served.size();
    return;
  }
  // Versions the store did not serve: removals taken while read-only, and versions whose
  // commit failed yet reached the log.
  std::vector<BlockId> unwanted;
  for (const auto& [id, meta] : impl_->index.versions()) {
    auto was = served.find(id);
    if (was == served.end() || was->second != meta.generation) unwanted.push_back(id);
  }
  for (const BlockId& id : unwanted) DropUnserved(id);
  CheckAgainstJournal(served, {}, "on reopening");
}

void DiskStore::ReclaimRemovedSpace() {
  if (impl_->removed_ranges.empty()) return;
  Result<FilesystemSpace> space = MeasureSpace();
  // Plenty of room: RocksDB's own compactions give the space back in their time.
  if (space.ok() && space->available_bytes >= 2 * headroom_) {
    if (impl_->removed_ranges.size() > 100000) {
      impl_->removed_ranges.clear();
      impl_->reclaimable_bytes = 0;
    }
    return;
  }
  // A flush and a compaction of a few ranges take milliseconds on a small store, longer on a big
  // one, and only happen when space is short; they run on the storage thread, behind the jobs
  // already queued, never on the worker's loop.
  std::vector<std::pair<std::string, std::string>> ranges = std::move(impl_->removed_ranges);
  impl_->removed_ranges.clear();
  impl_->reclaimable_bytes = 0;
  // The removed bytes may still be in the memtable and its write-ahead log.
  if (!Written(db_->Flush(rocksdb::FlushOptions()), "flushing the disk store").ok()) return;
  rocksdb::ColumnFamilyHandle* cf = db_->DefaultColumnFamily();
  rocksdb::CompactRangeOptions compact;
  compact.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForceOptimized;
  for (const auto& [begin, end] : ranges) {
    const rocksdb::Slice b(begin), e(end);
    // Table files wholly inside the range go without writing anything.
    if (!Written(rocksdb::DeleteFilesInRange(db_.get(), cf, &b, &e, /*include_end=*/false),
                 "deleting table files of removed blocks")
             .ok()) {
      return;
    }
    if (!Written(db_->CompactRange(compact, cf, &b, &e), "compacting removed blocks").ok()) {
      return;
    }
    if (!Writable().ok()) return;
  }
}

uint64_t DiskStore::next_generation() const { return impl_->next_generation; }

void DiskStore::AdvanceGenerationTo(uint64_t generation) {
  impl_->next_generation = std::max(impl_->next_generation, generation);
}

}  // namespace bm
