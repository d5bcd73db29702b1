#include "worker/disk_store.h"

#include <rocksdb/cache.h>
#include <rocksdb/convenience.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "common/big_endian.h"
#include "common/byte_size.h"
#include "common/digest.h"
#include "common/protocol.h"
#include "worker/commit_journal.h"

namespace bm {
namespace {

// Key layout (all in the default column family). Every record of one version of a block lives
// under that version's generation, which no other version on this worker shares:
//   "v" + be64(generation)             -> Meta of the version, with its block id
//   "v" + be64(generation) + be64(i)   -> bytes of chunk i of that version
// Generations only grow, so keys are written in nearly increasing order (as RocksDB's fillseq
// writes them): flushed table files barely overlap and RocksDB moves them down the levels
// without rewriting them. With keys led by the block id, every flush overlapped every other
// and compaction rewrote each byte again (measured: 800 MiB compacted per 680 MiB put).
// A version's meta sorts just before its chunks; replacing or removing a version deletes its
// whole range, meta included. Chunks are written before the meta; the meta and the last chunk
// go in one batch, so a crash leaves at most chunks without a meta, which Open() deletes.
//
// Stores written before this layout keep their records where they were ("legacy" versions,
// read, replaced and removed in place; new versions always use the layout above):
//   "m:" + id                                   -> Meta of the committed version
//   "c:" + id + ":" + be64(generation) + be64(i) -> bytes of chunk i of that version
// Ids never contain ':', so one id's keys never interleave with another's.
constexpr std::string_view kVersionPrefix = "v";
constexpr std::string_view kVersionsEnd = "w";  // just past every version key
// Format 3 adds the block's version token (BlockStatus::version) after the fixed fields;
// format 2 (written before versions existed) reads as version 0. Format 4 adds, after the
// token, the XXH3 digest of every chunk (chunks are digest units, common/digest.h); blocks of
// older formats have none and are served unverified (RocksDB's own checksums still apply).
constexpr uint8_t kVersionMetaFormatNoToken = 2;
constexpr uint8_t kVersionMetaFormatNoDigests = 3;
constexpr uint8_t kVersionMetaFormat = 4;
static_assert(kChunkBytes == kDigestUnitBytes, "a stored chunk is one digest unit");
constexpr std::string_view kMetaPrefix = "m:";
constexpr std::string_view kChunkPrefix = "c:";
constexpr uint8_t kMetaFormat = 1;

struct Meta {
  StorageLevel level;
  uint64_t size;
  uint64_t generation;
  uint64_t chunk_count;
  uint32_t chunk_bytes;
  bool legacy = false;   // records under the id ("m:", "c:"), not under the generation
  uint64_t version = 0;  // which put wrote it (BlockStatus::version); 0 = unknown
  // One per chunk; empty for blocks written before digests were kept.
  std::vector<uint64_t> unit_digests;
};

std::string MetaKey(const BlockId& id) { return std::string(kMetaPrefix) + id.ToString(); }

std::string ChunkPrefix(const BlockId& id) {
  return std::string(kChunkPrefix) + id.ToString() + ":";
}

// The first key of `generation`'s chunks; GenerationKey(id, g + 1) is just past its last one.
std::string GenerationKey(const BlockId& id, uint64_t generation) {
  std::string key = ChunkPrefix(id);
  PutBigEndian(key, generation);
  return key;
}

std::string ChunkKey(const BlockId& id, uint64_t generation, uint64_t index) {
  std::string key = GenerationKey(id, generation);
  PutBigEndian(key, index);
  return key;
}

std::string VersionKey(uint64_t generation) {
  std::string key(kVersionPrefix);
  PutBigEndian(key, generation);
  return key;
}

// Just past every record of `generation`.
std::string VersionEnd(uint64_t generation) {
  return generation == UINT64_MAX ? std::string(kVersionsEnd) : VersionKey(generation + 1);
}

std::string VersionChunkKey(uint64_t generation, uint64_t index) {
  std::string key = VersionKey(generation);
  PutBigEndian(key, index);
  return key;
}

std::string ChunkKeyOf(const BlockId& id, const Meta& meta, uint64_t index) {
  return meta.legacy ? ChunkKey(id, meta.generation, index)
                     : VersionChunkKey(meta.generation, index);
}

// Adds to `batch` the deletion of every record of version `meta` of block `id`.
void DeleteVersion(rocksdb::WriteBatch& batch, const BlockId& id, const Meta& meta) {
  if (!meta.legacy) {
    batch.DeleteRange(VersionKey(meta.generation), VersionEnd(meta.generation));
    return;
  }
  batch.Delete(MetaKey(id));
  if (meta.chunk_count > 0) {
    batch.DeleteRange(GenerationKey(id, meta.generation), GenerationKey(id, meta.generation + 1));
  }
}

// The key range holding every record of version `meta` of block `id` but a legacy meta key.
std::pair<std::string, std::string> VersionRange(const BlockId& id, const Meta& meta) {
  if (!meta.legacy) return {VersionKey(meta.generation), VersionEnd(meta.generation)};
  return {GenerationKey(id, meta.generation), GenerationKey(id, meta.generation + 1)};
}

uint64_t ChunkCount(uint64_t size, uint64_t chunk_bytes) {
  return size / chunk_bytes + (size % chunk_bytes != 0 ? 1 : 0);
}

// The fields both meta formats share, after the format byte.
void PutMetaFields(std::string& out, const Meta& meta) {
  PutBigEndian(out, meta.size);
  PutBigEndian(out, meta.generation);
  PutBigEndian(out, meta.chunk_count);
  PutBigEndian(out, meta.chunk_bytes);
}

constexpr size_t kMetaFixedBytes = 1 + 4 * 8;

// Reads the fields PutMetaFields wrote and the level; nullopt when they are inconsistent.
std::optional<Meta> GetMetaFields(std::string_view in, std::string_view level_name) {
  Meta meta;
  meta.size = GetBigEndian(in.substr(1));
  meta.generation = GetBigEndian(in.substr(9));
  meta.chunk_count = GetBigEndian(in.substr(17));
  uint64_t chunk_bytes = GetBigEndian(in.substr(25));
  Result<StorageLevel> level = ParseStorageLevel(level_name);
  if (!level.ok() || chunk_bytes == 0 || chunk_bytes > kMaxPayloadFrameBytes ||
      meta.chunk_count != ChunkCount(meta.size, chunk_bytes)) {
    return std::nullopt;
  }
  meta.chunk_bytes = static_cast<uint32_t>(chunk_bytes);
  meta.level = *level;
  return meta;
}

// The value at VersionKey: the meta fields, the version token, the level's name (length
// first), the block id.
std::string EncodeVersionMeta(const BlockId& id, const Meta& meta) {
  std::string out;
  out.push_back(static_cast<char>(kVersionMetaFormat));
  PutMetaFields(out, meta);
  PutBigEndian(out, meta.version);
  BM_CHECK(meta.unit_digests.size() == meta.chunk_count);
  for (uint64_t digest : meta.unit_digests) PutBigEndian(out, digest);
  const std::string_view level = StorageLevelName(meta.level);
  out.push_back(static_cast<char>(level.size()));
  out += level;
  out += id.ToString();
  return out;
}

std::optional<std::pair<BlockId, Meta>> DecodeVersionMeta(std::string_view in) {
  if (in.empty()) return std::nullopt;
  const uint8_t format = static_cast<uint8_t>(in[0]);
  if (format != kVersionMetaFormat && format != kVersionMetaFormatNoDigests &&
      format != kVersionMetaFormatNoToken) {
    return std::nullopt;
  }
  if (in.size() < kMetaFixedBytes) return std::nullopt;
  const size_t token_bytes = format == kVersionMetaFormatNoToken ? 0 : 8;
  // The chunk count comes before any digest, so the digests' size is known from it.
  const uint64_t chunk_count = GetBigEndian(in.substr(17));
  if (format == kVersionMetaFormat && chunk_count > (in.size() - kMetaFixedBytes) / 8) {
    return std::nullopt;
  }
  const size_t digest_bytes = format == kVersionMetaFormat ? chunk_count * 8 : 0;
  const size_t level_at = kMetaFixedBytes + token_bytes + digest_bytes;
  if (in.size() < level_at + 1) return std::nullopt;
  const size_t level_size = static_cast<uint8_t>(in[level_at]);
  if (in.size() < level_at + 1 + level_size) return std::nullopt;
  std::optional<Meta> meta = GetMetaFields(in, in.substr(level_at + 1, level_size));
  Result<BlockId> id = BlockId::Parse(in.substr(level_at + 1 + level_size));
  if (!meta.has_value() || !id.ok()) return std::nullopt;
  if (token_bytes > 0) meta->version = GetBigEndian(in.substr(kMetaFixedBytes));
  if (digest_bytes > 0) {
    meta->unit_digests.reserve(chunk_count);
    for (uint64_t i = 0; i < chunk_count; ++i) {
      meta->unit_digests.push_back(GetBigEndian(in.substr(kMetaFixedBytes + 8 + 8 * i)));
    }
  }
  return std::pair{*id, *meta};
}

// The value at a legacy "m:" key: the meta fields, then the level's name.
std::optional<Meta> DecodeLegacyMeta(std::string_view in) {
  if (in.size() < kMetaFixedBytes || static_cast<uint8_t>(in[0]) != kMetaFormat) {
    return std::nullopt;
  }
  std::optional<Meta> meta = GetMetaFields(in, in.substr(kMetaFixedBytes));
  if (meta.has_value()) meta->legacy = true;
  return meta;
}

// a + b, or UINT64_MAX when that does not fit: a counter fed by sizes never wraps.
uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

// Memtable size and table file size, scaled to the filesystem: RocksDB's 64 MiB default would
// leave a small filesystem (a 64 MiB tmpfs) no room for blocks once the headroom below is kept.
uint64_t WriteBufferBytesFor(uint64_t filesystem_bytes) {
  return std::clamp<uint64_t>(filesystem_bytes / 32, kMiB, 64 * kMiB);
}

constexpr int kMaxWriteBuffers = 3;
constexpr int kLevel0CompactionTrigger = 4;  // RocksDB's default, made explicit
constexpr int kCompactionFiles = 8;          // max_compaction_bytes, in table files

// Space kept free on the filesystem for RocksDB's own files, so that its writes never meet a
// full disk (after a failed write this RocksDB asserts on the next one, see EnterReadOnly):
//   - a block's bytes sit in the write-ahead log until their memtable is flushed, so up to
//     kMaxWriteBuffers memtables are on disk twice (log and table file) around a flush;
//   - an L0 compaction reads up to kLevel0CompactionTrigger flushed files and writes its output
//     before deleting them, and any compaction writes at most max_compaction_bytes before
//     deleting its inputs;
//   - MANIFEST, OPTIONS and info LOG files, and slack for the filesystem's own rounding:
//     1/64 of the filesystem (at least 1 MiB).
// On a 64 MiB filesystem that is 31 MiB; on 1 TiB, about 17 GiB (1.6%).
uint64_t HeadroomFor(uint64_t filesystem_bytes) {
  const uint64_t write_buffer = WriteBufferBytesFor(filesystem_bytes);
  return write_buffer * (kMaxWriteBuffers + kLevel0CompactionTrigger + kCompactionFiles) +
         std::max<uint64_t>(kMiB, filesystem_bytes / 64);
}

// Records RocksDB's background errors (a failed flush or compaction, or a failed write), which
// RocksDB reports on its own threads: the store's loop reads the flag before every write.
class ErrorListener final : public rocksdb::EventListener {
 public:
  void OnBackgroundError(rocksdb::BackgroundErrorReason /*reason*/,
                         rocksdb::Status* error) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (message_.empty()) message_ = error->ToString();
    failed_.store(true, std::memory_order_release);
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::string message() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return message_;
  }

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mutex_;
  std::string message_;  // guarded by mutex_
};

class StatvfsProbe final : public SpaceProbe {
 public:
  explicit StatvfsProbe(std::string dir) : dir_(std::move(dir)) {}
  Result<FilesystemSpace> Measure() const override {
    struct statvfs st {};
    if (::statvfs(dir_.c_str(), &st) != 0) {
      return InternalError("statvfs " + dir_ + ": " + std::strerror(errno));
    }
    return FilesystemSpace{static_cast<uint64_t>(st.f_blocks) * st.f_frsize,
                           static_cast<uint64_t>(st.f_bavail) * st.f_frsize};
  }

 private:
  const std::string dir_;
};

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  if (s.IsNoSpace()) return OutOfSpaceError(what + ": disk full: " + s.ToString());
  return InternalError(what + ": " + s.ToString());
}

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

std::unique_ptr<SpaceProbe> MakeStatvfsProbe(std::string dir) {
  return std::make_unique<StatvfsProbe>(std::move(dir));
}

struct DiskStore::Impl {
  // Committed blocks, loaded at Open() and kept in step with every commit and removal.
  std::map<BlockId, Meta> index;
  uint64_t committed_bytes = 0;  // sum of index sizes
  uint64_t claimed_bytes = 0;    // declared sizes of writers not yet committed or abandoned
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
  std::shared_ptr<ErrorListener> listener;
  // Non-empty while the store is read-only: why.
  std::string read_only_reason;
  // Versions removed while read-only: hidden from the index, deleted once writable.
  std::vector<std::pair<BlockId, Meta>> hidden_removals;
  // Key ranges of removed versions whose bytes may still be on disk (in table files or the
  // write-ahead log) until RocksDB compacts them; reclaimed when space is short.
  std::vector<std::pair<std::string, std::string>> removed_ranges;
  // Bytes of the versions in removed_ranges: free space once reclaimed, so counted as room.
  uint64_t reclaimable_bytes = 0;
  // Generations [first, second) whose records the last start-up scan could not read (a table
  // block failed RocksDB's checksum): versions committed there are lost to corruption.
  std::vector<std::pair<uint64_t, uint64_t>> unreadable_generations;
};

// States: writing -> committed, or writing -> abandoned (failed append, failed commit or
// destroyed uncommitted). Only a writing writer holds claimed space and may own chunks on disk.
class RocksDiskWriter final : public DiskWriter {
 public:
  RocksDiskWriter(DiskStore* store, const BlockId& id, StorageLevel level, uint64_t total_size,
                  uint64_t generation, uint64_t version)
      : store_(store),
        id_(id),
        level_(level),
        total_size_(total_size),
        generation_(generation),
        version_(version),
        opening_(store->impl_->opening) {}

  ~RocksDiskWriter() override { Abandon(); }

  Status Append(std::span<const std::byte> bytes) override {
    if (state_ != State::kWriting) return InvalidArgumentError(Describe() + " is not open");
    if (bytes.size() > total_size_ - appended_) {
      Abandon();
      return InvalidArgumentError(Describe() + ": " + std::to_string(appended_ + bytes.size()) +
                                  " bytes appended, more than the declared " +
                                  std::to_string(total_size_));
    }
    appended_ += bytes.size();
    digester_.Update(bytes);
    while (!bytes.empty()) {
      // A whole chunk that is not the block's last goes straight from the caller's bytes.
      if (buffer_.empty() && bytes.size() >= kChunkBytes && !IsLastChunk()) {
        Status s = PutChunk(bytes.first(kChunkBytes));
        if (!s.ok()) return s;
        bytes = bytes.subspan(kChunkBytes);
        continue;
      }
      size_t n = std::min(kChunkBytes - buffer_.size(), bytes.size());
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.begin() + n);
      bytes = bytes.subspan(n);
      // The last chunk waits for Commit(), which writes it in one batch with the meta.
      if (buffer_.size() == kChunkBytes && !IsLastChunk()) {
        Status s = PutChunk(buffer_);
        if (!s.ok()) return s;
        buffer_.clear();
      }
    }
    return Status::Ok();
  }

  void AdoptUnitDigests(std::span<const uint64_t> digests) override {
    digester_.AdoptUnits(digests);
  }

  Status Commit() override {
    if (state_ != State::kWriting) return InvalidArgumentError(Describe() + " is not open");
    if (appended_ != total_size_) {
      Abandon();
      return InvalidArgumentError(Describe() + ": only " + std::to_string(appended_) + " of " +
                                  std::to_string(total_size_) + " bytes were written");
    }
    if (Status writable = SameOpening(); !writable.ok()) {
      Abandon();
      return writable;
    }
    DiskStore::Impl& impl = *store_->impl_;
    Meta meta{level_,
              total_size_,
              generation_,
              next_chunk_ + (buffer_.empty() ? 0 : 1),
              static_cast<uint32_t>(kChunkBytes),
              /*legacy=*/false,
              version_,
              digester_.Finish().units};
    BM_CHECK(meta.chunk_count == ChunkCount(total_size_, kChunkBytes));

    rocksdb::WriteBatch batch;
    if (!buffer_.empty()) {
      batch.Put(VersionChunkKey(generation_, next_chunk_), ToSlice(buffer_));
    }
    batch.Put(VersionKey(generation_), EncodeVersionMeta(id_, meta));
    auto old = impl.index.find(id_);
    if (old != impl.index.end()) DeleteVersion(batch, id_, old->second);
    Status s =
        store_->Written(store_->db_->Write(impl.write_options, &batch), "committing " + Describe());
    if (!s.ok()) {
      Abandon();
      return s;
    }
    if (old != impl.index.end()) {
      impl.committed_bytes -= old->second.size;
      impl.removed_ranges.push_back(VersionRange(id_, old->second));
      impl.reclaimable_bytes = SaturatingAdd(impl.reclaimable_bytes, old->second.size);
      old->second = meta;
    } else {
      impl.index.emplace(id_, meta);
    }
    store_->journal_->RecordCommitted(id_, generation_);
    impl.committed_bytes = SaturatingAdd(impl.committed_bytes, total_size_);
    impl.claimed_bytes -= total_size_;
    state_ = State::kCommitted;
    std::vector<std::byte>().swap(buffer_);
    return Status::Ok();
  }

 private:
  enum class State { kWriting, kCommitted, kAbandoned };

  // Whether the chunk being filled (index next_chunk_) is the block's last.
  bool IsLastChunk() const { return (next_chunk_ + 1) * kChunkBytes >= total_size_; }

  Status PutChunk(std::span<const std::byte> bytes) {
    Status s = SameOpening();
    if (s.ok()) {
      s = store_->Written(
          store_->db_->Put(store_->impl_->write_options, VersionChunkKey(generation_, next_chunk_),
                           ToSlice(bytes)),
          "writing " + Describe());
    }
    if (!s.ok()) {
      Abandon();
      return s;
    }
    ++next_chunk_;
    return Status::Ok();
  }

  // Gives back the claimed space and deletes the chunks written so far.
  void Abandon() {
    if (state_ != State::kWriting) return;
    state_ = State::kAbandoned;
    store_->impl_->claimed_bytes -= total_size_;
    std::vector<std::byte>().swap(buffer_);
    // A read-only store leaves them: the chunks have no meta, so the next open deletes them.
    if (next_chunk_ == 0 || !store_->Writable().ok()) return;
    Status s = store_->Written(
        store_->db_->DeleteRange(store_->impl_->write_options, store_->db_->DefaultColumnFamily(),
                                 VersionKey(generation_), VersionEnd(generation_)),
        "deleting the chunks of abandoned " + Describe());
    if (s.ok()) {
      DiskStore::Impl& impl = *store_->impl_;
      impl.removed_ranges.emplace_back(VersionKey(generation_), VersionEnd(generation_));
      impl.reclaimable_bytes = SaturatingAdd(impl.reclaimable_bytes, next_chunk_ * kChunkBytes);
    }
  }

  // Writable, and not reopened since the write began: a reopen deletes the chunks of writes in
  // progress (they have no meta yet), so such a write cannot be completed.
  Status SameOpening() const {
    BM_RETURN_IF_ERROR(store_->Writable());
    if (store_->impl_->opening != opening_) {
      return AbortedError(Describe() + " began before the disk store was reopened; retry");
    }
    return Status::Ok();
  }

  std::string Describe() const {
    return "disk write of block " + id_.ToString() + " (generation " + std::to_string(generation_) +
           ")";
  }

  DiskStore* const store_;
  const BlockId id_;
  const StorageLevel level_;
  const uint64_t total_size_;
  const uint64_t generation_;
  const uint64_t version_;
  const uint64_t opening_;  // the store's Impl::opening when the write began
  State state_ = State::kWriting;
  uint64_t appended_ = 0;
  uint64_t next_chunk_ = 0;        // chunks [0, next_chunk_) are in the database
  std::vector<std::byte> buffer_;  // bytes of chunk next_chunk_, at most kChunkBytes
  BlockDigester digester_;         // of every byte appended
};

DiskStore::DiskStore(std::string dir, DiskStoreOptions options)
    : dir_(std::move(dir)),
      limit_(options.limit_bytes),
      format_(options.format),
      probe_(options.space_probe != nullptr ? std::move(options.space_probe)
                                            : MakeStatvfsProbe(dir_)),
      env_(options.env),
      impl_(std::make_unique<Impl>()) {}

DiskStore::~DiskStore() = default;

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
  std::unique_ptr<DiskStore> store(new DiskStore(dir, std::move(options)));
  BM_ASSIGN_OR_RETURN(FilesystemSpace space, store->MeasureSpace());
  store->write_buffer_bytes_ = WriteBufferBytesFor(space.total_bytes);
  store->headroom_ = HeadroomFor(space.total_bytes);
  BM_RETURN_IF_ERROR(store->OpenDatabase());
  // Outside RocksDB's directory listing: RocksDB ignores files it did not name.
  BM_ASSIGN_OR_RETURN(
      store->journal_,
      CommitJournal::Open((std::filesystem::path(dir) / "committed-blocks.journal").string()));
  if (store->journal_->existed()) {
    store->CheckAgainstJournal(store->journal_->recorded(), store->journal_->removed(),
                               "since the last run");
  } else {
    spdlog::info("disk store: no commit journal in {} yet; starting one ({} blocks)", dir,
                 store->impl_->index.size());
    if (Status s = store->journal_->Rewrite(store->CommittedGenerations()); !s.ok()) {
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
  options.max_write_buffer_number = kMaxWriteBuffers;
  options.level0_file_num_compaction_trigger = kLevel0CompactionTrigger;
  options.target_file_size_base = write_buffer_bytes_;
  options.max_compaction_bytes = write_buffer_bytes_ * kCompactionFiles;
  options.level_compaction_dynamic_level_bytes = true;
  options.max_background_jobs = 2;
  options.keep_log_file_num = 3;
  options.max_log_file_size = std::min<uint64_t>(16 * kMiB, write_buffer_bytes_);
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
  impl_->index.clear();
  impl_->committed_bytes = 0;
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
    if (!s.ok()) {
      std::string text = s.ToString();
      if (s.IsIOError() && text.find("/LOCK") != std::string::npos) {
        return InvalidArgumentError("disk store " + dir_ +
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

// Called when seeking to VersionKey(generation) met a table block that failed its checksum.
// Finds the first generation after it whose seek reads cleanly (doubling the step, then halving
// back), leaves `it` there and returns it (UINT64_MAX: none, the damage runs to the end).
// Each probe seeks a fresh iterator: one that met an error stays failed.
Result<uint64_t> DiskStore::SeekPastCorruption(std::unique_ptr<rocksdb::Iterator>& it,
                                               uint64_t generation) {
  auto seek = [&](uint64_t probe) -> Result<bool> {
    it.reset(db_->NewIterator(impl_->read_options));
    it->Seek(VersionKey(probe));
    if (it->status().ok()) return true;
    if (it->status().IsCorruption()) return false;
    return FromRocks(it->status(), "scanning disk store versions");
  };
  uint64_t bad = generation;  // seeking here fails
  uint64_t good = UINT64_MAX;
  for (uint64_t step = 1; bad < UINT64_MAX; step = std::min<uint64_t>(step * 2, 1ull << 62)) {
    const uint64_t probe = step > UINT64_MAX - bad ? UINT64_MAX : bad + step;
    BM_ASSIGN_OR_RETURN(bool clean, seek(probe));
    if (clean) {
      good = probe;
      break;
    }
    bad = probe;
  }
  if (good == UINT64_MAX) {
    it.reset(db_->NewIterator(impl_->read_options));
    it->Seek(kVersionsEnd);
    BM_RETURN_IF_ERROR(FromRocks(it->status(), "scanning disk store versions"));
    return UINT64_MAX;
  }
  while (good - bad > 1) {
    const uint64_t middle = bad + (good - bad) / 2;
    BM_ASSIGN_OR_RETURN(bool clean, seek(middle));
    (clean ? good : bad) = middle;
  }
  BM_ASSIGN_OR_RETURN(bool clean, seek(good));
  if (!clean) return InternalError("disk store: a seek past damaged table data failed twice");
  return good;
}

Status DiskStore::LoadIndex() {
  Impl& impl = *impl_;
  rocksdb::WriteBatch garbage;
  uint64_t max_generation = 0;
  uint64_t orphan_generations = 0;
  // A commit replaces a version in one batch, so an id has one meta; should two ever be found,
  // the newer is kept.
  auto remember = [&](const BlockId& id, const Meta& meta) {
    max_generation = std::max(max_generation, meta.generation);
    auto [found, inserted] = impl.index.emplace(id, meta);
    if (!inserted) {
      const bool newer = meta.generation > found->second.generation;
      DeleteVersion(garbage, id, newer ? found->second : meta);
      if (!newer) return;
      impl.committed_bytes -= found->second.size;
      found->second = meta;
    }
    impl.committed_bytes = SaturatingAdd(impl.committed_bytes, meta.size);
  };
  {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(impl.read_options));
    for (it->Seek(kMetaPrefix); it->Valid() && it->key().starts_with(kMetaPrefix); it->Next()) {
      std::string_view key = it->key().ToStringView();
      Result<BlockId> id = BlockId::Parse(key.substr(kMetaPrefix.size()));
      std::optional<Meta> meta = DecodeLegacyMeta(it->value().ToStringView());
      if (!id.ok() || !meta.has_value()) {
        // Its chunks, if any, become orphans and go below.
        spdlog::warn("disk store: dropping unreadable metadata record '{}'", key.substr(0, 200));
        garbage.Delete(it->key());
        continue;
      }
      remember(*id, *meta);
    }
    BM_RETURN_IF_ERROR(FromRocks(it->status(), "reading disk store metadata"));

    // One seek per stored version: its first record is its meta, unless the write was cut
    // short (chunks only), and then the whole version is deleted. A seek that meets a table
    // block failing its checksum steps over the generations that block holds (see
    // SeekPastCorruption); their versions are lost, and named so by CheckAgainstJournal.
    impl.unreadable_generations.clear();
    auto seek_version = [&](uint64_t generation) -> Status {
      // From the prefix itself at first, so malformed short keys are met (and deleted) too.
      it->Seek(generation == 0 ? std::string(kVersionPrefix) : VersionKey(generation));
      if (!it->status().IsCorruption()) return Status::Ok();
      BM_ASSIGN_OR_RETURN(uint64_t readable, SeekPastCorruption(it, generation));
      spdlog::error(
          "disk store {}: table data of generations {} to {} failed RocksDB's checksum: the "
          "versions there are lost; serving the rest",
          dir_, generation, readable == UINT64_MAX ? "the end" : std::to_string(readable - 1));
      impl.unreadable_generations.emplace_back(generation, readable);
      max_generation = std::max(max_generation, readable == UINT64_MAX ? generation : readable - 1);
      // Deleting their records keeps reads away from the damaged block.
      if (readable == UINT64_MAX) {
        garbage.DeleteRange(VersionKey(generation), kVersionsEnd);
      } else {
        garbage.DeleteRange(VersionKey(generation), VersionKey(readable));
      }
      return Status::Ok();
    };
    BM_RETURN_IF_ERROR(seek_version(0));
    while (it->Valid() && it->key().starts_with(kVersionPrefix)) {
      std::string_view key = it->key().ToStringView();
      const size_t meta_key_size = kVersionPrefix.size() + 8;
      if (key.size() != meta_key_size && key.size() != meta_key_size + 8) {
        garbage.Delete(it->key());
        it->Next();
        continue;
      }
      const uint64_t generation = GetBigEndian(key.substr(kVersionPrefix.size()));
      max_generation = std::max(max_generation, generation);
      std::optional<std::pair<BlockId, Meta>> version;
      if (key.size() == meta_key_size) {
        version = DecodeVersionMeta(it->value().ToStringView());
        if (!version.has_value() || version->second.generation != generation) {
          spdlog::warn("disk store: dropping version {} with an unreadable metadata record",
                       generation);
          version.reset();
        }
      }
      if (version.has_value()) {
        remember(version->first, version->second);
      } else {
        garbage.DeleteRange(VersionKey(generation), VersionEnd(generation));
        ++orphan_generations;
      }
      if (generation == UINT64_MAX) break;
      BM_RETURN_IF_ERROR(seek_version(generation + 1));
    }
    BM_RETURN_IF_ERROR(FromRocks(it->status(), "scanning disk store versions"));

    // Legacy chunks: one seek per stored generation, live ones skipped, others deleted.
    it->Seek(kChunkPrefix);
    while (it->Valid() && it->key().starts_with(kChunkPrefix)) {
      std::string_view key = it->key().ToStringView();
      std::string_view rest = key.substr(kChunkPrefix.size());
      size_t colon = rest.find(':');
      Result<BlockId> id = colon == std::string_view::npos
                               ? Result<BlockId>(InvalidArgumentError("no ':'"))
                               : BlockId::Parse(rest.substr(0, colon));
      if (!id.ok() || rest.size() - colon - 1 != 16) {
        garbage.Delete(it->key());
        it->Next();
        continue;
      }
      uint64_t generation = GetBigEndian(rest.substr(colon + 1));
      max_generation = std::max(max_generation, generation);
      auto found = impl.index.find(*id);
      if (found == impl.index.end() || !found->second.legacy ||
          found->second.generation != generation) {
        garbage.DeleteRange(GenerationKey(*id, generation), GenerationKey(*id, generation + 1));
        ++orphan_generations;
      }
      if (generation == UINT64_MAX) break;
      it->Seek(GenerationKey(*id, generation + 1));
    }
    BM_RETURN_IF_ERROR(FromRocks(it->status(), "scanning disk store chunks"));
    if (orphan_generations > 0) {
      spdlog::info("disk store: deleting chunks of {} unfinished writes", orphan_generations);
    }
  }
  // A read-only store leaves its garbage (it belongs to no indexed version) for a later open.
  if (garbage.Count() > 0 && impl.read_only_reason.empty()) {
    BM_RETURN_IF_ERROR(
        Written(db_->Write(impl.write_options, &garbage), "deleting disk store garbage"));
  }
  impl.next_generation = std::max(impl.next_generation, max_generation + 1);
  return Status::Ok();
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
  if (fits.code() == StatusCode::kOutOfSpace && !impl_->removed_ranges.empty()) {
    // Removed blocks may still hold the space: give it back and measure again.
    ReclaimRemovedSpace();
    BM_RETURN_IF_ERROR(Writable());
    fits = fits_filesystem();
  }
  BM_RETURN_IF_ERROR(fits);
  impl_->claimed_bytes += total_size;  // no wrap: total_size fits in what is free
  const uint64_t generation = impl_->next_generation++;
  return std::unique_ptr<DiskWriter>(
      std::make_unique<RocksDiskWriter>(this, id, level, total_size, generation, version));
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
  auto found = impl_->index.find(id);
  if (found == impl_->index.end()) {
    return NotFoundError("block " + id.ToString() + " is not on disk here");
  }
  return ReadVersion(id, found->second.generation, offset, max_length, check);
}

Result<DiskRead> DiskStore::ReadGeneration(const BlockId& id, uint64_t generation, uint64_t offset,
                                           uint64_t max_length) {
  return ReadVersion(id, generation, offset, max_length, ChunkCheck::kAlways);
}

Result<DiskRead> DiskStore::ReadVersion(const BlockId& id, uint64_t generation, uint64_t offset,
                                        uint64_t max_length, ChunkCheck check) {
  auto found = impl_->index.find(id);
  if (found == impl_->index.end()) {
    return AbortedError("block " + id.ToString() + " generation " + std::to_string(generation) +
                        " was removed");
  }
  const Meta meta = found->second;  // a copy: a corrupt chunk drops the block from the index
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
    const std::string key = ChunkKeyOf(id, meta, i);
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

std::optional<BlockStatus> DiskStore::Find(const BlockId& id) const {
  auto found = impl_->index.find(id);
  if (found == impl_->index.end()) return std::nullopt;
  return BlockStatus{id,
                     found->second.level,
                     Tier::kDisk,
                     found->second.size,
                     found->second.version,
                     BlockDigestOf(found->second.unit_digests)};
}

Status DiskStore::Remove(const BlockId& id) {
  auto found = impl_->index.find(id);
  if (found == impl_->index.end()) {
    return NotFoundError("block " + id.ToString() + " is not on disk here");
  }
  const Meta meta = found->second;
  bool deleted = false;
  if (Writable().ok()) {
    rocksdb::WriteBatch batch;
    DeleteVersion(batch, id, meta);
    deleted =
        Written(db_->Write(impl_->write_options, &batch), "removing block " + id.ToString()).ok();
  }
  if (deleted) {
    impl_->removed_ranges.push_back(VersionRange(id, meta));
    impl_->reclaimable_bytes = SaturatingAdd(impl_->reclaimable_bytes, meta.size);
  } else {
    // Nothing may be written (or the write just failed, making the store read-only): hide it
    // now, delete it once writable (TryRecover). The journal line below keeps the removal
    // across a restart in between (CheckAgainstJournal).
    impl_->hidden_removals.emplace_back(id, meta);
  }
  journal_->RecordRemoved(id, meta.generation);
  impl_->committed_bytes -= meta.size;
  impl_->index.erase(found);
  return Status::Ok();
}

std::vector<BlockStatus> DiskStore::List() const {
  std::vector<BlockStatus> blocks;
  blocks.reserve(impl_->index.size());
  for (const auto& [id, meta] : impl_->index) {
    blocks.push_back(
        {id, meta.level, Tier::kDisk, meta.size, meta.version, BlockDigestOf(meta.unit_digests)});
  }
  return blocks;
}

size_t DiskStore::block_count() const { return impl_->index.size(); }

uint64_t DiskStore::used() const {
  return SaturatingAdd(impl_->committed_bytes, impl_->claimed_bytes);
}

uint64_t DiskStore::capacity() const {
  const uint64_t in_use = used();
  if (read_only()) return in_use;
  uint64_t room = 0;
  if (Result<FilesystemSpace> space = MeasureSpace(); space.ok()) {
    // Removed blocks' bytes count as room: a write that needs them reclaims them first.
    const uint64_t usable =
        SaturatingAdd(space->available_bytes > headroom_ ? space->available_bytes - headroom_ : 0,
                      impl_->reclaimable_bytes);
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

std::map<BlockId, uint64_t> DiskStore::CommittedGenerations() const {
  std::map<BlockId, uint64_t> generations;
  for (const auto& [id, meta] : impl_->index)
    generations.emplace_hint(generations.end(), id, meta.generation);
  return generations;
}

void DiskStore::DropUnserved(const BlockId& id) {
  auto found = impl_->index.find(id);
  if (found == impl_->index.end()) return;
  const Meta meta = found->second;
  impl_->committed_bytes -= meta.size;
  impl_->index.erase(found);
  if (!Writable().ok()) {
    impl_->hidden_removals.emplace_back(id, meta);
    return;
  }
  rocksdb::WriteBatch batch;
  DeleteVersion(batch, id, meta);
  if (Written(db_->Write(impl_->write_options, &batch), "removing block " + id.ToString()).ok()) {
    impl_->removed_ranges.push_back(VersionRange(id, meta));
    impl_->reclaimable_bytes = SaturatingAdd(impl_->reclaimable_bytes, meta.size);
  } else {
    impl_->hidden_removals.emplace_back(id, meta);
  }
}

Status DiskStore::DropCorrupt(const BlockId& id, const std::string& what) {
  auto found = impl_->index.find(id);
  const uint64_t generation = found != impl_->index.end() ? found->second.generation : 0;
  std::string reason = "generation " + std::to_string(generation) + " is corrupt on disk: " + what;
  spdlog::error("disk store {}: block {} lost: {}; dropped, never served", dir_, id.ToString(),
                reason);
  DropUnserved(id);
  // Removed for good: a restart does not report it lost a second time.
  journal_->RecordRemoved(id, generation);
  ++lost_count_;
  ++corrupt_count_;
  lost_.push_back({id, reason});
  return DataLossError("block " + id.ToString() + " is corrupt on this worker's disk (" + what +
                       ")");
}

Status DiskStore::ReportCorrupt(const BlockId& id, uint64_t generation, const std::string& what) {
  auto found = impl_->index.find(id);
  if (found == impl_->index.end() || found->second.generation != generation) {
    return DataLossError("block " + id.ToString() + " generation " + std::to_string(generation) +
                         " was corrupt (" + what + "); it is no longer stored");
  }
  return DropCorrupt(id, what);
}

Status DiskStore::CorruptStoredByte(const BlockId& id, uint64_t offset) {
  auto found = impl_->index.find(id);
  if (found == impl_->index.end()) {
    return NotFoundError("block " + id.ToString() + " is not on disk here");
  }
  const Meta& meta = found->second;
  if (offset >= meta.size) {
    return InvalidArgumentError("offset " + std::to_string(offset) + " is not inside block " +
                                id.ToString() + " (" + std::to_string(meta.size) + " bytes)");
  }
  BM_RETURN_IF_ERROR(Writable());
  const std::string key = ChunkKeyOf(id, meta, offset / meta.chunk_bytes);
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

void DiskStore::CheckAgainstJournal(const std::map<BlockId, uint64_t>& committed,
                                    const std::map<BlockId, uint64_t>& removed, const char* when) {
  // Removed while the store was read-only, then a restart before it could delete them.
  for (const auto& [id, generation] : removed) {
    auto found = impl_->index.find(id);
    if (found != impl_->index.end() && found->second.generation <= generation) {
      spdlog::info("disk store: block {} was removed before the restart; deleting it",
                   id.ToString());
      DropUnserved(id);
    }
  }
  std::vector<LostBlock> lost;
  std::vector<BlockId> stale;
  for (const auto& [id, generation] : committed) {
    auto found = impl_->index.find(id);
    const bool unreadable = std::any_of(
        impl_->unreadable_generations.begin(), impl_->unreadable_generations.end(),
        [&](const auto& range) { return generation >= range.first && generation < range.second; });
    if (found == impl_->index.end() && unreadable) {
      lost.push_back({id, "generation " + std::to_string(generation) +
                              " is corrupt on disk: its records failed RocksDB's checksum in "
                              "the start-up scan"});
      ++corrupt_count_;
    } else if (found == impl_->index.end()) {
      lost.push_back({id, "generation " + std::to_string(generation) +
                              " was committed but the store no longer has it (RocksDB "
                              "recovered its write-ahead log only up to a damaged or missing "
                              "record)"});
    } else if (found->second.generation < generation) {
      lost.push_back({id, "generation " + std::to_string(generation) +
                              " was committed but the store recovered only the older generation " +
                              std::to_string(found->second.generation) +
                              ", which is removed rather than served"});
      stale.push_back(id);
    }
  }
  for (const BlockId& id : stale) DropUnserved(id);
  for (const LostBlock& block : lost) {
    spdlog::error("disk store: block {} lost: {}", block.id.ToString(), block.reason);
  }
  if (lost.empty()) {
    spdlog::info("disk store {}: 0 blocks lost {} ({} committed blocks checked)", dir_, when,
                 committed.size());
  } else {
    spdlog::error("disk store {}: {} blocks lost {} ({} committed blocks checked)", dir_,
                  lost.size(), when, committed.size());
  }
  lost_count_ += lost.size();
  lost_.insert(lost_.end(), std::make_move_iterator(lost.begin()),
               std::make_move_iterator(lost.end()));
  if (Status s = journal_->Rewrite(CommittedGenerations(), HiddenRemovals()); !s.ok()) {
    spdlog::warn("disk store: cannot compact the commit journal: {}", s.ToString());
  }
}

std::vector<LostBlock> DiskStore::TakeLost() { return std::exchange(lost_, {}); }

void DiskStore::Maintain() {
  if (Writable().ok()) {
    ReclaimRemovedSpace();
  } else {
    TryRecover();
  }
  // The journal grows by a line per commit and removal; compact it when mostly dead lines.
  if (Writable().ok() && journal_->lines_since_rewrite() > 4 * impl_->index.size() + 100000) {
    if (Status s = journal_->Rewrite(CommittedGenerations(), HiddenRemovals()); !s.ok()) {
      spdlog::warn("disk store: cannot compact the commit journal: {}", s.ToString());
    }
  }
}

// A reopen rather than DB::Resume(): Resume() carries on with the open database and, after a
// failed log write, the same log writer, which is what asserts on its next write; a reopen
// replays the old log up to its last good record and writes a fresh one.
void DiskStore::TryRecover() {
  Result<FilesystemSpace> space = MeasureSpace();
  if (!space.ok() || space->available_bytes < headroom_) return;
  spdlog::info("disk store {}: {} free again: reopening the database to store blocks again", dir_,
               FormatBytes(space->available_bytes));
  // What the store served: the reopened database must hold all of it.
  const std::map<BlockId, uint64_t> served = CommittedGenerations();
  impl_->hidden_removals.clear();  // what the reopened index holds beyond `served` goes below
  db_.reset();                     // closes it; chunks still pinned keep the block cache alive
  Status opened = OpenDatabase();
  if (!opened.ok()) {
    // It opened a moment ago, in this process: failing now is not an expected condition.
    spdlog::critical("disk store {} cannot be reopened: {}", dir_, opened.ToString());
    BM_CHECK(opened.ok());
  }
  // Versions the store did not serve: removals taken while read-only, and versions whose
  // commit failed yet reached the log.
  std::vector<BlockId> unwanted;
  for (const auto& [id, meta] : impl_->index) {
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
