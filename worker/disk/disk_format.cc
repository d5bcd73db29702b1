#include "worker/disk/disk_format.h"

#include "blockmgr/status.h"
#include "common/core/big_endian.h"
#include "common/core/digest.h"
#include "common/core/protocol.h"

namespace bm::disk {
namespace {

// Format 3 adds the block's version token (BlockStatus::version) after the fixed fields;
// format 2 (written before versions existed) reads as version 0. Format 4 adds, after the
// token, the XXH3 digest of every chunk (chunks are digest units, common/core/digest.h); blocks of
// older formats have none and are served unverified (RocksDB's own checksums still apply).
constexpr uint8_t kVersionMetaFormatNoToken = 2;
constexpr uint8_t kVersionMetaFormatNoDigests = 3;
constexpr uint8_t kVersionMetaFormat = 4;
// Format 5 adds a flags byte after the token (kInFileFlag: the bytes are in a chunk file).
// Written only for versions in chunk files, so a store whose blocks are all in RocksDB keeps
// format 4 records, readable by workers from before chunk files.
constexpr uint8_t kVersionMetaFormatFlags = 5;
constexpr uint8_t kInFileFlag = 1;
static_assert(kChunkBytes == kDigestUnitBytes, "a stored chunk is one digest unit");
constexpr uint8_t kMetaFormat = 1;

std::string ChunkPrefix(const BlockId& id) {
  return std::string(kChunkPrefix) + id.ToString() + ":";
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

}  // namespace

std::string MetaKey(const BlockId& id) { return std::string(kMetaPrefix) + id.ToString(); }

std::string GenerationKey(const BlockId& id, uint64_t generation) {
  std::string key = ChunkPrefix(id);
  PutBigEndian(key, generation);
  return key;
}

namespace {

std::string ChunkKey(const BlockId& id, uint64_t generation, uint64_t index) {
  std::string key = GenerationKey(id, generation);
  PutBigEndian(key, index);
  return key;
}

}  // namespace

std::string VersionKey(uint64_t generation) {
  std::string key(kVersionPrefix);
  PutBigEndian(key, generation);
  return key;
}

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

std::pair<std::string, std::string> VersionRange(const BlockId& id, const Meta& meta) {
  if (!meta.legacy) return {VersionKey(meta.generation), VersionEnd(meta.generation)};
  return {GenerationKey(id, meta.generation), GenerationKey(id, meta.generation + 1)};
}

uint64_t ChunkCount(uint64_t size, uint64_t chunk_bytes) {
  return size / chunk_bytes + (size % chunk_bytes != 0 ? 1 : 0);
}

// The value at VersionKey: the meta fields, the version token, the level's name (length
// first), the block id.
std::string EncodeVersionMeta(const BlockId& id, const Meta& meta) {
  std::string out;
  out.push_back(static_cast<char>(meta.in_file ? kVersionMetaFormatFlags : kVersionMetaFormat));
  PutMetaFields(out, meta);
  PutBigEndian(out, meta.version);
  if (meta.in_file) out.push_back(static_cast<char>(kInFileFlag));
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
  if (format != kVersionMetaFormatFlags && format != kVersionMetaFormat &&
      format != kVersionMetaFormatNoDigests && format != kVersionMetaFormatNoToken) {
    return std::nullopt;
  }
  const size_t token_bytes = format == kVersionMetaFormatNoToken ? 0 : 8;
  const size_t flags_bytes = format == kVersionMetaFormatFlags ? 1 : 0;
  const size_t digests_at = kMetaFixedBytes + token_bytes + flags_bytes;
  if (in.size() < digests_at) return std::nullopt;
  const bool digested = format == kVersionMetaFormat || format == kVersionMetaFormatFlags;
  // The chunk count comes before any digest, so the digests' size is known from it.
  const uint64_t chunk_count = GetBigEndian(in.substr(17));
  if (digested && chunk_count > (in.size() - digests_at) / 8) return std::nullopt;
  const size_t digest_bytes = digested ? chunk_count * 8 : 0;
  const size_t level_at = digests_at + digest_bytes;
  if (in.size() < level_at + 1) return std::nullopt;
  const size_t level_size = static_cast<uint8_t>(in[level_at]);
  if (in.size() < level_at + 1 + level_size) return std::nullopt;
  std::optional<Meta> meta = GetMetaFields(in, in.substr(level_at + 1, level_size));
  Result<BlockId> id = BlockId::Parse(in.substr(level_at + 1 + level_size));
  if (!meta.has_value() || !id.ok()) return std::nullopt;
  if (token_bytes > 0) meta->version = GetBigEndian(in.substr(kMetaFixedBytes));
  if (flags_bytes > 0) {
    const uint8_t flags = static_cast<uint8_t>(in[kMetaFixedBytes + token_bytes]);
    if ((flags & ~kInFileFlag) != 0) return std::nullopt;  // a flag this worker does not know
    meta->in_file = (flags & kInFileFlag) != 0;
  }
  if (digest_bytes > 0) {
    meta->unit_digests.reserve(chunk_count);
    for (uint64_t i = 0; i < chunk_count; ++i) {
      meta->unit_digests.push_back(GetBigEndian(in.substr(digests_at + 8 * i)));
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

std::string EncodeChunkTrailer(const BlockId& id, const Meta& meta) {
  BM_CHECK(meta.in_file);
  std::string out = EncodeVersionMeta(id, meta);
  const uint64_t record_bytes = out.size();
  const uint64_t digest =
      DigestOf(std::span(reinterpret_cast<const std::byte*>(out.data()), out.size()));
  PutBigEndian(out, record_bytes);
  PutBigEndian(out, digest);
  PutBigEndian(out, kChunkTrailerMagic);
  return out;
}

std::optional<ChunkTrailerFooter> DecodeChunkTrailerFooter(std::string_view footer) {
  if (footer.size() != kChunkTrailerFooterBytes ||
      GetBigEndian(footer.substr(16)) != kChunkTrailerMagic) {
    return std::nullopt;
  }
  return ChunkTrailerFooter{GetBigEndian(footer), GetBigEndian(footer.substr(8))};
}

Result<std::pair<BlockId, Meta>> DecodeChunkTrailer(std::string_view record,
                                                    const ChunkTrailerFooter& footer,
                                                    uint64_t generation, uint64_t file_bytes) {
  if (record.size() != footer.record_bytes ||
      DigestOf(std::span(reinterpret_cast<const std::byte*>(record.data()), record.size())) !=
          footer.record_digest) {
    return DataLossError("its trailer does not match its digest");
  }
  std::optional<std::pair<BlockId, Meta>> version = DecodeVersionMeta(record);
  if (!version.has_value() || !version->second.in_file) {
    return DataLossError("its trailer holds no readable version record");
  }
  const Meta& meta = version->second;
  if (meta.generation != generation) {
    return DataLossError("its trailer names generation " + std::to_string(meta.generation));
  }
  if (meta.size > file_bytes ||
      file_bytes - meta.size != record.size() + kChunkTrailerFooterBytes) {
    return DataLossError("its trailer describes " + std::to_string(meta.size) +
                         " bytes of block, which do not fit a file of " +
                         std::to_string(file_bytes) + " bytes");
  }
  return std::move(*version);
}

}  // namespace bm::disk
