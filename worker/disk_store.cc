#include "worker/disk_store.h"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/cache.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "common/big_endian.h"
#include "common/byte_size.h"
#include "common/protocol.h"

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
// format 2 (written before versions existed) reads as version 0.
constexpr uint8_t kVersionMetaFormatNoToken = 2;
constexpr uint8_t kVersionMetaFormat = 3;
constexpr std::string_view kMetaPrefix = "m:";
constexpr std::string_view kChunkPrefix = "c:";
constexpr uint8_t kMetaFormat = 1;

struct Meta {
  StorageLevel level;
  uint64_t size;
  uint64_t generation;
  uint64_t chunk_count;
  uint32_t chunk_bytes;
  bool legacy = false;  // records under the id ("m:", "c:"), not under the generation
  uint64_t version = 0;  // which put wrote it (BlockStatus::version); 0 = unknown
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
  const std::string_view level = StorageLevelName(meta.level);
  out.push_back(static_cast<char>(level.size()));
  out += level;
  out += id.ToString();
  return out;
}

std::optional<std::pair<BlockId, Meta>> DecodeVersionMeta(std::string_view in) {
  if (in.empty()) return std::nullopt;
  const uint8_t format = static_cast<uint8_t>(in[0]);
  if (format != kVersionMetaFormat && format != kVersionMetaFormatNoToken) return std::nullopt;
  const size_t token_bytes = format == kVersionMetaFormat ? 8 : 0;
  const size_t level_at = kMetaFixedBytes + token_bytes;
  if (in.size() < level_at + 1) return std::nullopt;
  const size_t level_size = static_cast<uint8_t>(in[level_at]);
  if (in.size() < level_at + 1 + level_size) return std::nullopt;
  std::optional<Meta> meta = GetMetaFields(in, in.substr(level_at + 1, level_size));
  Result<BlockId> id = BlockId::Parse(in.substr(level_at + 1 + level_size));
  if (!meta.has_value() || !id.ok()) return std::nullopt;
  if (token_bytes > 0) meta->version = GetBigEndian(in.substr(kMetaFixedBytes));
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

struct DiskStore::Impl {
  // Committed blocks, loaded at Open() and kept in step with every commit and removal.
  std::map<BlockId, Meta> index;
  uint64_t committed_bytes = 0;  // sum of index sizes
  uint64_t claimed_bytes = 0;    // declared sizes of writers not yet committed or abandoned
  uint64_t next_generation = 1;
  rocksdb::WriteOptions write_options;  // WAL on, not synced: survives a process kill
  rocksdb::ReadOptions read_options;
  // The database's block cache, shared with the chunks pinned into it (see PinnedChunk).
  std::shared_ptr<rocksdb::Cache> block_cache;
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
        version_(version) {}

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

  Status Commit() override {
    if (state_ != State::kWriting) return InvalidArgumentError(Describe() + " is not open");
    if (appended_ != total_size_) {
      Abandon();
      return InvalidArgumentError(Describe() + ": only " + std::to_string(appended_) + " of " +
                                  std::to_string(total_size_) + " bytes were written");
    }
    DiskStore::Impl& impl = *store_->impl_;
    Meta meta{level_, total_size_, generation_, next_chunk_ + (buffer_.empty() ? 0 : 1),
              static_cast<uint32_t>(kChunkBytes), /*legacy=*/false, version_};
    BM_CHECK(meta.chunk_count == ChunkCount(total_size_, kChunkBytes));

    rocksdb::WriteBatch batch;
    if (!buffer_.empty()) {
      batch.Put(VersionChunkKey(generation_, next_chunk_), ToSlice(buffer_));
    }
    batch.Put(VersionKey(generation_), EncodeVersionMeta(id_, meta));
    auto old = impl.index.find(id_);
    if (old != impl.index.end()) DeleteVersion(batch, id_, old->second);
    Status s =
        FromRocks(store_->db_->Write(impl.write_options, &batch), "committing " + Describe());
    if (!s.ok()) {
      Abandon();
      return s;
    }
    if (old != impl.index.end()) {
      impl.committed_bytes -= old->second.size;
      old->second = meta;
    } else {
      impl.index.emplace(id_, meta);
    }
    impl.committed_bytes += total_size_;
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
    Status s = FromRocks(store_->db_->Put(store_->impl_->write_options,
                                          VersionChunkKey(generation_, next_chunk_), ToSlice(bytes)),
                         "writing " + Describe());
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
    if (next_chunk_ == 0) return;
    rocksdb::Status s = store_->db_->DeleteRange(
        store_->impl_->write_options, store_->db_->DefaultColumnFamily(),
        VersionKey(generation_), VersionEnd(generation_));
    if (!s.ok()) {
      // The chunks have no meta, so the next Open() deletes them.
      spdlog::warn("disk store: could not delete the chunks of abandoned {}: {}", Describe(),
                   s.ToString());
    }
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
  State state_ = State::kWriting;
  uint64_t appended_ = 0;
  uint64_t next_chunk_ = 0;        // chunks [0, next_chunk_) are in the database
  std::vector<std::byte> buffer_;  // bytes of chunk next_chunk_, at most kChunkBytes
};

DiskStore::DiskStore(std::unique_ptr<rocksdb::DB> db, uint64_t limit)
    : db_(std::move(db)), limit_(limit), impl_(std::make_unique<Impl>()) {}

DiskStore::~DiskStore() = default;

Result<std::unique_ptr<DiskStore>> DiskStore::Open(const std::string& dir, uint64_t limit_bytes,
                                                   DiskValueFormat format) {
  if (dir.empty()) return InvalidArgumentError("disk store directory is empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return InvalidArgumentError("cannot create disk store directory " + dir + ": " + ec.message());
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return InvalidArgumentError("disk store path " + dir + " is not a directory");
  }

  rocksdb::Options options;
  options.create_if_missing = true;
  // Block bytes are usually already compressed or serialized compactly; metadata is tiny.
  options.compression = rocksdb::kNoCompression;
  if (format == DiskValueFormat::kBlobFiles) {
    // Chunks in blob files: compactions move only small keys and pointers instead of rewriting
    // every block's bytes at each level, but every read is a file read of its own.
    options.enable_blob_files = true;
    options.min_blob_size = 4 * kKiB;
    options.blob_file_size = 256 * kMiB;
    options.enable_blob_garbage_collection = true;
    options.blob_garbage_collection_force_threshold = 0.5;
  }
  // RocksDB's default size, made explicit so chunks pinned into it can keep it alive.
  std::shared_ptr<rocksdb::Cache> block_cache = rocksdb::NewLRUCache(32 * kMiB);
  rocksdb::BlockBasedTableOptions table_options;
  table_options.block_cache = block_cache;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table_options));
  options.write_buffer_size = 64 * kMiB;
  options.max_write_buffer_number = 3;
  options.target_file_size_base = 64 * kMiB;
  options.level_compaction_dynamic_level_bytes = true;
  options.max_background_jobs = 2;
  options.keep_log_file_num = 3;
  options.max_log_file_size = 16 * kMiB;

  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) {
    std::string text = s.ToString();
    if (s.IsIOError() && text.find("lock") != std::string::npos) {
      return InvalidArgumentError("disk store " + dir +
                                  " is in use by another process (is another worker using this "
                                  "directory?): " +
                                  text);
    }
    return InternalError("cannot open disk store " + dir + ": " + text);
  }
  std::unique_ptr<DiskStore> store(new DiskStore(std::unique_ptr<rocksdb::DB>(raw), limit_bytes));
  store->impl_->block_cache = std::move(block_cache);
  RETURN_IF_ERROR(store->LoadIndex());
  return store;
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
    impl.committed_bytes += meta.size;
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
    RETURN_IF_ERROR(FromRocks(it->status(), "reading disk store metadata"));

    // One seek per stored version: its first record is its meta, unless the write was cut
    // short (chunks only), and then the whole version is deleted.
    it->Seek(kVersionPrefix);
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
      it->Seek(VersionKey(generation + 1));
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "scanning disk store versions"));

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
    RETURN_IF_ERROR(FromRocks(it->status(), "scanning disk store chunks"));
    if (orphan_generations > 0) {
      spdlog::info("disk store: deleting chunks of {} unfinished writes", orphan_generations);
    }
  }
  if (garbage.Count() > 0) {
    RETURN_IF_ERROR(
        FromRocks(db_->Write(impl.write_options, &garbage), "deleting disk store garbage"));
  }
  impl.next_generation = max_generation + 1;
  return Status::Ok();
}

Result<std::unique_ptr<DiskWriter>> DiskStore::BeginWrite(const BlockId& id, StorageLevel level,
                                                          uint64_t total_size, uint64_t version) {
  const uint64_t in_use = used();
  if (limit_ != 0 && (in_use > limit_ || total_size > limit_ - in_use)) {
    return OutOfSpaceError("block " + id.ToString() + " of " + FormatBytes(total_size) +
                           " does not fit on disk: " + FormatBytes(in_use) + " of the " +
                           FormatBytes(limit_) + " limit in use");
  }
  impl_->claimed_bytes += total_size;
  const uint64_t generation = impl_->next_generation++;
  return std::unique_ptr<DiskWriter>(
      std::make_unique<RocksDiskWriter>(this, id, level, total_size, generation, version));
}

Status DiskStore::Write(const BlockId& id, StorageLevel level, const BlockData& data,
                        uint64_t version) {
  ASSIGN_OR_RETURN(std::unique_ptr<DiskWriter> writer, BeginWrite(id, level, data.size, version));
  for (const ChunkPtr& chunk : data.chunks) RETURN_IF_ERROR(writer->Append(chunk->bytes()));
  return writer->Commit();
}

Result<DiskRead> DiskStore::Read(const BlockId& id, uint64_t offset, uint64_t max_length) {
  auto found = impl_->index.find(id);
  if (found == impl_->index.end()) {
    return NotFoundError("block " + id.ToString() + " is not on disk here");
  }
  return ReadGeneration(id, found->second.generation, offset, max_length);
}

Result<DiskRead> DiskStore::ReadGeneration(const BlockId& id, uint64_t generation, uint64_t offset,
                                           uint64_t max_length) {
  auto found = impl_->index.find(id);
  if (found == impl_->index.end()) {
    return AbortedError("block " + id.ToString() + " generation " + std::to_string(generation) +
                        " was removed");
  }
  const Meta& meta = found->second;
  if (meta.generation != generation) {
    return AbortedError("block " + id.ToString() + " generation " + std::to_string(generation) +
                        " was replaced by generation " + std::to_string(meta.generation));
  }
  if (offset > meta.size) {
    return InvalidArgumentError("offset " + std::to_string(offset) + " is past the end of block " +
                                id.ToString() + " (" + std::to_string(meta.size) + " bytes)");
  }
  DiskRead read{meta.size, meta.generation, meta.level, {}};
  const uint64_t length = std::min(max_length, meta.size - offset);
  if (length == 0) return read;

  const uint64_t end = offset + length;
  const uint64_t first = offset / meta.chunk_bytes;
  const uint64_t last = (end - 1) / meta.chunk_bytes;
  // No snapshot is needed to read the chunks as of one moment: a version's chunks never change
  // once written, and only this thread deletes them (the store is not thread-safe). Taking one
  // per read also made RocksDB rewrite every table file that reached the bottom level
  // ("BottommostFiles" compactions, run when the oldest snapshot moves past a file).
  const rocksdb::ReadOptions& options = impl_->read_options;
  Status status;
  for (uint64_t i = first; i <= last && status.ok(); ++i) {
    auto chunk = std::make_shared<PinnedChunk>(impl_->block_cache);
    rocksdb::PinnableSlice& value = chunk->value();
    rocksdb::Status s =
        db_->Get(options, db_->DefaultColumnFamily(), ChunkKeyOf(id, meta, i), &value);
    if (s.IsNotFound()) {
      status = AbortedError("chunk " + std::to_string(i) + " of block " + id.ToString() +
                            " generation " + std::to_string(generation) + " is gone");
      break;
    }
    status = FromRocks(s, "reading block " + id.ToString());
    if (!status.ok()) break;
    const uint64_t chunk_start = i * meta.chunk_bytes;
    const uint64_t expected = std::min<uint64_t>(meta.chunk_bytes, meta.size - chunk_start);
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
  return read;
}

std::optional<BlockStatus> DiskStore::Find(const BlockId& id) const {
  auto found = impl_->index.find(id);
  if (found == impl_->index.end()) return std::nullopt;
  return BlockStatus{id, found->second.level, Tier::kDisk, found->second.size,
                     found->second.version};
}

Status DiskStore::Remove(const BlockId& id) {
  auto found = impl_->index.find(id);
  if (found == impl_->index.end()) {
    return NotFoundError("block " + id.ToString() + " is not on disk here");
  }
  const Meta& meta = found->second;
  rocksdb::WriteBatch batch;
  DeleteVersion(batch, id, meta);
  RETURN_IF_ERROR(
      FromRocks(db_->Write(impl_->write_options, &batch), "removing block " + id.ToString()));
  impl_->committed_bytes -= meta.size;
  impl_->index.erase(found);
  return Status::Ok();
}

std::vector<BlockStatus> DiskStore::List() const {
  std::vector<BlockStatus> blocks;
  blocks.reserve(impl_->index.size());
  for (const auto& [id, meta] : impl_->index) {
    blocks.push_back({id, meta.level, Tier::kDisk, meta.size, meta.version});
  }
  return blocks;
}

size_t DiskStore::block_count() const { return impl_->index.size(); }

uint64_t DiskStore::used() const { return impl_->committed_bytes + impl_->claimed_bytes; }

uint64_t DiskStore::next_generation() const { return impl_->next_generation; }

void DiskStore::AdvanceGenerationTo(uint64_t generation) {
  impl_->next_generation = std::max(impl_->next_generation, generation);
}

}  // namespace bm
