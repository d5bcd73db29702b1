// DiskStore's opening: the database (repairing it past unreadable table files), the start-up
// scan into the index, the chunk files checked against it and taken back from where the index
// lost them, and the check against the commit journal (disk_store.h, "Lost blocks").

#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "common/core/byte_size.h"
#include "common/core/digest.h"
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
#include "worker/disk/disk_store.h"
#include "worker/disk/disk_store_impl.h"
#include "worker/disk/journal_check.h"

namespace bm {

using disk::ErrorListener;
using disk::Meta;

namespace {

// RocksDB's info log, forwarded to the worker's own log (warnings and worse) instead of a LOG
// file in the disk directory. A LOG file is rolled by path once it reaches its size limit, so
// a roll after the directory was moved away or unmounted created a new LOG in whatever took
// its place (a bare mount point on the root filesystem): the store must write nothing there.
class WorkerLogForRocksDb final : public rocksdb::Logger {
 public:
  explicit WorkerLogForRocksDb(std::string dir)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL), dir_(std::move(dir)) {}

  using rocksdb::Logger::Logv;
  // RocksDB has put the level's name in front of the format already.
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    std::vsnprintf(line, sizeof line, format, ap);
    spdlog::warn("disk store {}: rocksdb: {}", dir_, line);
  }

 private:
  const std::string dir_;
};

}  // namespace

Result<std::unique_ptr<DiskStore>> DiskStore::Open(const std::string& dir, uint64_t limit_bytes,
                                                   DiskValueFormat format) {
  DiskStoreOptions options;
  options.limit_bytes = limit_bytes;
  options.format = format;
  return Open(dir, std::move(options));
}

Result<std::unique_ptr<DiskStore>> DiskStore::Open(const std::string& dir,
                                                   DiskStoreOptions options) {
  if (dir.empty()) return InvalidArgumentError("disk store directory is empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return InvalidArgumentError("cannot create disk store directory " + dir + ": " + ec.message());
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return InvalidArgumentError("disk store path " + dir + " is not a directory");
  }
  // Before anything in it is read or written: two stores there would share chunk files.
  BM_ASSIGN_OR_RETURN(std::unique_ptr<DiskDirectoryLock> lock, DiskDirectoryLock::Acquire(dir));
  std::unique_ptr<DiskStore> store(new DiskStore(dir, std::move(options)));
  store->lock_ = std::move(lock);
  BM_ASSIGN_OR_RETURN(FilesystemSpace space, store->MeasureSpace());
  store->write_buffer_bytes_ = disk::WriteBufferBytesFor(space.total_bytes);
  store->headroom_ = disk::HeadroomFor(space.total_bytes);
  rocksdb::FileSystem* fs = store->env_ != nullptr ? store->env_->GetFileSystem().get()
                                                   : rocksdb::FileSystem::Default().get();
  store->impl_->files =
      std::make_unique<disk::ChunkFiles>((std::filesystem::path(dir) / "chunks").string(), fs);
  BM_RETURN_IF_ERROR(store->impl_->files->CreateDirectory());
  // Outside RocksDB's directory listing: RocksDB ignores files it did not name. Read before the
  // database is loaded: it says which chunk files hold committed versions (CheckChunkFiles).
  BM_ASSIGN_OR_RETURN(
      store->journal_,
      CommitJournal::Open((std::filesystem::path(dir) / "committed-blocks.journal").string()));
  BM_RETURN_IF_ERROR(store->OpenDatabase());
  if (store->journal_->existed()) {
    store->CheckAgainstJournal(store->journal_->recorded(), store->journal_->removed(),
                               "since the last run");
  } else {
    spdlog::info("disk store: no commit journal in {} yet; starting one ({} blocks)", dir,
                 store->impl_->index.size());
    if (Status s = store->journal_->Rewrite(store->impl_->index.Generations()); !s.ok()) {
      spdlog::warn("disk store: cannot write the commit journal: {}", s.ToString());
    }
  }
  return store;
}

Status DiskStore::OpenDatabase() {
  rocksdb::Options options;
  options.create_if_missing = true;
  if (env_ != nullptr) options.env = env_;
  // Block bytes are usually already compressed or serialized compactly; metadata is tiny.
  options.compression = rocksdb::kNoCompression;
  if (format_ == DiskValueFormat::kBlobFiles) {
    // Chunks in blob files: compactions move only small keys and pointers instead of rewriting
    // every block's bytes at each level, but every read is a file read of its own.
    options.enable_blob_files = true;
    options.min_blob_size = 4 * kKiB;
    options.blob_file_size = 256 * kMiB;
    options.enable_blob_garbage_collection = true;
    options.blob_garbage_collection_force_threshold = 0.5;
  }
  // RocksDB's default size, made explicit so chunks pinned into it can keep it alive.
  if (impl_->block_cache == nullptr) impl_->block_cache = rocksdb::NewLRUCache(32 * kMiB);
  rocksdb::BlockBasedTableOptions table_options;
  table_options.block_cache = impl_->block_cache;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table_options));
  // The sizes HeadroomFor() counts on.
  options.write_buffer_size = write_buffer_bytes_;
  options.max_write_buffer_number = disk::kMaxWriteBuffers;
  options.level0_file_num_compaction_trigger = disk::kLevel0CompactionTrigger;
  options.target_file_size_base = write_buffer_bytes_;
  options.max_compaction_bytes = write_buffer_bytes_ * disk::kCompactionFiles;
  options.level_compaction_dynamic_level_bytes = true;
  options.max_background_jobs = 2;
  options.info_log = std::make_shared<WorkerLogForRocksDb>(dir_);
  // A damaged write-ahead log is recovered up to its first bad record and no further
  // (RocksDB's default, made explicit): what survives is a consistent prefix of the writes, so
  // every surviving meta has all its chunks; the commit journal names what was dropped.
  // kSkipAnyCorruptedRecords would keep more, but could keep a meta whose chunk was in the bad
  // record; kAbsoluteConsistency and kTolerateCorruptedTailRecords refuse to open at all.
  options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  // Recovery from a storage error is the store's (a reopen in Maintain()), not RocksDB's own
  // retries, so there is one owner of the decision to write again.
  options.max_bgerror_resume_count = 0;
  impl_->listener = std::make_shared<ErrorListener>();
  options.listeners.push_back(impl_->listener);

  ++impl_->opening;
  impl_->index.Clear();
  impl_->removed_ranges.clear();
  impl_->reclaimable_bytes = 0;
  rocksdb::DB* raw = nullptr;
  std::string read_only_why;
  Result<FilesystemSpace> space = MeasureSpace();
  if (space.ok() && space->available_bytes < headroom_) {
    // Opening for writing writes (a new log, a MANIFEST, a flush of the recovered log); on a
    // full disk that fails half-way.
    read_only_why = "the filesystem has " + FormatBytes(space->available_bytes) +
                    " free, less than the " + FormatBytes(headroom_) +
                    " kept for RocksDB's own files";
  } else {
    rocksdb::Status s = rocksdb::DB::Open(options, dir_, &raw);
    if (!s.ok() && disk::IsUnreadableTableError(s) && SetAsideUnreadableTables(options, s)) {
      s = rocksdb::DB::Open(options, dir_, &raw);
    }
    if (!s.ok()) {
      std::string text = s.ToString();
      if (s.IsIOError() && text.find("/LOCK") != std::string::npos) {
        return UnavailableError("disk store " + dir_ +
                                " is in use by another process (is another worker using "
                                "this directory?): " +
                                text);
      }
      if (!s.IsNoSpace() && !s.IsIOError()) {
        return InternalError("cannot open disk store " + dir_ + ": " + text);
      }
      read_only_why = "opening for writing failed: " + text;
    }
  }
  if (raw == nullptr) {
    rocksdb::Status s = rocksdb::DB::OpenForReadOnly(options, dir_, &raw);
    if (!s.ok()) {
      return InternalError("cannot open disk store " + dir_ + " (" + read_only_why +
                           "), not even read-only: " + s.ToString());
    }
    spdlog::warn(
        "disk store {}: opened read-only: {}; serving what it holds, storing nothing "
        "until space is freed",
        dir_, read_only_why);
    impl_->read_only_reason = read_only_why;
  } else {
    impl_->read_only_reason.clear();
  }
  db_.reset(raw);
  return LoadIndex();
}

bool DiskStore::SetAsideUnreadableTables(const rocksdb::Options& options,
                                         const rocksdb::Status& open_error) {
  // One cut-short or unreadable table file costs the blocks in it, not the store.
  spdlog::error("disk store {}: {}; rebuilding the database without the unreadable table file",
                dir_, open_error.ToString());
  Result<std::vector<std::string>> set_aside = disk::RepairUnreadableTables(dir_, options);
  if (!set_aside.ok()) {
    spdlog::error("{}", set_aside.status().ToString());
    return false;
  }
  std::string names;
  for (const std::string& name : *set_aside) names += (names.empty() ? "" : ", ") + name;
  spdlog::error("disk store {}: set aside {} unreadable table files in {}/lost: {}", dir_,
                set_aside->size(), dir_, names);
  impl_->unreadable_tables = std::move(set_aside).value();
  impl_->unreadable_tables_error = open_error.ToString();
  return true;
}

Status DiskStore::LoadIndex() {
  BM_ASSIGN_OR_RETURN(disk::DiskScan scan, disk::ScanDiskStore(*db_, impl_->read_options, dir_));
  impl_->index = std::move(scan.index);
  impl_->unreadable_generations = std::move(scan.unreadable_generations);
  // A read-only store leaves its garbage (it belongs to no indexed version) for a later open.
  if (scan.garbage.Count() > 0 && impl_->read_only_reason.empty()) {
    BM_RETURN_IF_ERROR(
        Written(db_->Write(impl_->write_options, &scan.garbage), "deleting disk store garbage"));
  }
  impl_->next_generation = std::max(impl_->next_generation, scan.max_generation + 1);
  CheckChunkFiles();
  return Status::Ok();
}

void DiskStore::CheckChunkFiles() {
  impl_->damaged_files.clear();
  Result<std::map<uint64_t, uint64_t>> files = impl_->files->List();
  if (!files.ok()) {
    // Every version in a file would fail its reads one by one; say why once.
    spdlog::error("disk store {}: {}", dir_, files.status().ToString());
    files = std::map<uint64_t, uint64_t>{};
  }
  std::vector<BlockId> damaged;
  std::set<uint64_t> owned;
  for (const auto& [id, meta] : impl_->index.versions()) {
    if (!meta.in_file) continue;
    owned.insert(meta.generation);
    auto file = files->find(meta.generation);
    std::string why;
    if (file == files->end()) {
      why = "its chunk file " + impl_->files->PathOf(meta.generation) + " is missing";
    } else if (file->second < meta.size) {
      why = "its chunk file " + impl_->files->PathOf(meta.generation) + " holds " +
            std::to_string(file->second) + " of its " + std::to_string(meta.size) + " bytes";
    } else {
      continue;
    }
    spdlog::error("disk store {}: block {} generation {} is lost: {}", dir_, id.ToString(),
                  meta.generation, why);
    impl_->damaged_files[meta.generation] =
        "generation " + std::to_string(meta.generation) + " is damaged on disk: " + why;
    damaged.push_back(id);
  }
  // Dropped before the journal check, which names them lost (with the reason above).
  for (const BlockId& id : damaged) DropUnserved(id);
  // At start, the journal (as read at open) names the committed versions; on a reopen the
  // store's own index before it does (TryRecover), and the files are left alone.
  if (impl_->opening == 1) TakeBackFromChunkFiles(*files, owned);
  for (const auto& [generation, size] : *files) {
    impl_->next_generation = std::max(impl_->next_generation, generation + 1);
    if (owned.contains(generation) || !impl_->read_only_reason.empty()) continue;
    // A write cut short (by a crash, or by this reopen), or a version whose meta is gone.
    spdlog::info("disk store {}: deleting chunk file {} ({} bytes), which no block owns", dir_,
                 impl_->files->PathOf(generation), size);
    if (Status s = impl_->files->Delete(generation); !s.ok()) {
      spdlog::warn("disk store {}: {}", dir_, s.ToString());
    }
  }
}

void DiskStore::TakeBackFromChunkFiles(const std::map<uint64_t, uint64_t>& files,
                                       std::set<uint64_t>& owned) {
  const std::map<BlockId, uint64_t>& committed = journal_->recorded();
  uint64_t taken_back = 0;
  for (const auto& [generation, size] : files) {
    if (owned.contains(generation)) continue;
    Result<std::optional<std::pair<BlockId, Meta>>> trailer =
        impl_->files->ReadTrailer(generation, size);
    if (!trailer.ok()) {
      spdlog::warn("disk store {}: {}; not taken back", dir_, trailer.status().ToString());
      continue;
    }
    // No trailer: a write that never finished, or a file of a store from before trailers,
    // whose meta record alone described it.
    if (!trailer->has_value()) continue;
    const auto& [id, meta] = **trailer;
    // Not the block's committed version: a write cut short between its file and its meta, a
    // version replaced since, or a block removed since.
    auto current = committed.find(id);
    if (current == committed.end() || current->second != generation) continue;
    const Meta* found = impl_->index.Find(id);
    if (found != nullptr && found->generation >= generation) continue;
    const std::optional<Meta> older = found != nullptr ? std::optional<Meta>(*found) : std::nullopt;
    bool written = false;
    if (Writable().ok()) {
      // Back into the index for good; the older version the database still had goes with it.
      rocksdb::WriteBatch batch;
      batch.Put(disk::VersionKey(generation), disk::EncodeVersionMeta(id, meta));
      if (older.has_value()) disk::DeleteVersion(batch, id, *older);
      written = Written(db_->Write(impl_->write_options, &batch),
                        "taking block " + id.ToString() + " back from its chunk file")
                    .ok();
    }
    // Served either way; unwritten (a read-only store), the next open takes it back again.
    impl_->index.Put(id, meta);
    if (older.has_value() && written) ForgetVersionBytes(id, *older);
    owned.insert(generation);
    ++taken_back;
  }
  if (taken_back == 0) return;
  std::string damage;
  for (const disk::UnreadableGenerations& range : impl_->unreadable_generations) {
    damage += (damage.empty() ? "" : "; ") + range.damage;
  }
  for (const std::string& name : impl_->unreadable_tables) {
    damage += (damage.empty() ? "" : "; ") + ("index table " + name + " was damaged");
  }
  spdlog::warn(
      "disk store {}: rebuilt {} blocks from their chunk files: the database had lost their "
      "metadata ({})",
      dir_, taken_back,
      damage.empty() ? "RocksDB recovered its write-ahead log only up to a damaged record"
                     : damage);
}

void DiskStore::CheckAgainstJournal(const std::map<BlockId, uint64_t>& committed,
                                    const std::map<BlockId, uint64_t>& removed, const char* when) {
  std::string tables;  // the table files set aside at this open, if any
  for (const std::string& name : impl_->unreadable_tables) {
    tables += (tables.empty() ? "" : ", ") + name;
  }
  const std::string set_aside = tables.empty() ? ""
                                               : "index table " + tables + ", which was damaged (" +
                                                     impl_->unreadable_tables_error +
                                                     ") and is set aside in lost/";
  disk::JournalVerdict verdict = disk::CheckJournal(committed, removed, impl_->index,
                                                    impl_->unreadable_generations, set_aside);
  // Versions dropped for a damaged chunk file (CheckChunkFiles): lost to that, not to the log.
  for (LostBlock& block : verdict.lost) {
    auto committed_at = committed.find(block.id);
    if (committed_at == committed.end()) continue;
    auto damaged = impl_->damaged_files.find(committed_at->second);
    if (damaged == impl_->damaged_files.end()) continue;
    block.reason = damaged->second;
    ++verdict.corrupt;
  }
  impl_->damaged_files.clear();
  // Removed while the store was read-only, then a restart before it could delete them.
  for (const BlockId& id : verdict.removed_earlier) {
    spdlog::info("disk store: block {} was removed before the restart; deleting it", id.ToString());
    DropUnserved(id);
  }
  for (const BlockId& id : verdict.stale) DropUnserved(id);
  // At start-up these are losses of the restart; on a reopen, of the storage error before it.
  const bool at_start = std::string_view(when) != "on reopening";
  for (LostBlock& block : verdict.lost) {
    spdlog::error("disk store: block {} lost: {}", block.id.ToString(), block.reason);
    block.cause = at_start ? LostCause::kLostAtStartUp : LostCause::kStorageError;
  }
  impl_->unreadable_tables.clear();
  if (verdict.lost.empty()) {
    spdlog::info("disk store {}: 0 blocks lost {} ({} committed blocks checked)", dir_, when,
                 committed.size());
  } else {
    spdlog::error("disk store {}: {} blocks lost {} ({} committed blocks checked)", dir_,
                  verdict.lost.size(), when, committed.size());
  }
  corrupt_count_ += verdict.corrupt;
  lost_count_ += verdict.lost.size();
  lost_.insert(lost_.end(), std::make_move_iterator(verdict.lost.begin()),
               std::make_move_iterator(verdict.lost.end()));
  if (Status s = journal_->Rewrite(impl_->index.Generations(), HiddenRemovals()); !s.ok()) {
    spdlog::warn("disk store: cannot compact the commit journal: {}", s.ToString());
  }
}

}  // namespace bm
