#include "worker/disk/disk_format.h"

#include <gtest/gtest.h>

#include <string>

#include "common/core/big_endian.h"
#include "common/core/protocol.h"

namespace bm::disk {
namespace {

Meta SmallMeta() {
  Meta meta{StorageLevel::kDiskOnly, /*size=*/10, /*generation=*/42, /*chunk_count=*/1,
            static_cast<uint32_t>(kChunkBytes)};
  meta.version = 7;
  meta.unit_digests = {0x1122334455667788ull};
  return meta;
}

TEST(DiskFormatTest, VersionMetaHasTheFormatFourLayout) {
  const BlockId id = BlockId::Broadcast(5);
  const std::string encoded = EncodeVersionMeta(id, SmallMeta());
  std::string expected(1, '\x04');
  PutBigEndian(expected, 10);
  PutBigEndian(expected, 42);
  PutBigEndian(expected, 1);
  PutBigEndian(expected, kChunkBytes);
  PutBigEndian(expected, 7);
  PutBigEndian(expected, 0x1122334455667788ull);
  const std::string_view level = StorageLevelName(StorageLevel::kDiskOnly);
  expected.push_back(static_cast<char>(level.size()));
  expected += level;
  expected += id.ToString();
  EXPECT_EQ(encoded, expected);
}

TEST(DiskFormatTest, VersionMetaRoundTrips) {
  const BlockId id = BlockId::Broadcast(5);
  std::optional<std::pair<BlockId, Meta>> decoded =
      DecodeVersionMeta(EncodeVersionMeta(id, SmallMeta()));
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->first, id);
  EXPECT_EQ(decoded->second.size, 10u);
  EXPECT_EQ(decoded->second.generation, 42u);
  EXPECT_EQ(decoded->second.version, 7u);
  EXPECT_EQ(decoded->second.unit_digests, SmallMeta().unit_digests);
  EXPECT_FALSE(decoded->second.legacy);
}

TEST(DiskFormatTest, FormatTwoMetaReadsAsVersionZeroWithoutDigests) {
  const BlockId id = BlockId::Broadcast(9);
  std::string value(1, '\x02');
  PutBigEndian(value, 10);
  PutBigEndian(value, 3);
  PutBigEndian(value, 1);
  PutBigEndian(value, kChunkBytes);
  const std::string_view level = StorageLevelName(StorageLevel::kMemoryAndDisk);
  value.push_back(static_cast<char>(level.size()));
  value += level;
  value += id.ToString();
  std::optional<std::pair<BlockId, Meta>> decoded = DecodeVersionMeta(value);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->first, id);
  EXPECT_EQ(decoded->second.version, 0u);
  EXPECT_TRUE(decoded->second.unit_digests.empty());
  EXPECT_EQ(decoded->second.level, StorageLevel::kMemoryAndDisk);
}

TEST(DiskFormatTest, TruncatedOrInconsistentMetasAreRejected) {
  const std::string encoded = EncodeVersionMeta(BlockId::Broadcast(5), SmallMeta());
  for (size_t length = 0; length < encoded.size() - BlockId::Broadcast(5).ToString().size();
       ++length) {
    EXPECT_FALSE(DecodeVersionMeta(encoded.substr(0, length)).has_value()) << length;
  }
  std::string wrong_count = encoded;
  wrong_count[1 + 8 + 8 + 7] = 2;  // two chunks for 10 bytes
  EXPECT_FALSE(DecodeVersionMeta(wrong_count).has_value());
}

TEST(DiskFormatTest, VersionKeysSortMetaBeforeChunksAndBeforeTheNextGeneration) {
  EXPECT_LT(VersionKey(42), VersionChunkKey(42, 0));
  EXPECT_LT(VersionChunkKey(42, UINT64_MAX), VersionEnd(42));
  EXPECT_EQ(VersionEnd(42), VersionKey(43));
  EXPECT_EQ(VersionEnd(UINT64_MAX), std::string(kVersionsEnd));
}

TEST(DiskFormatTest, LegacyChunkKeysLiveUnderTheBlockId) {
  Meta meta = SmallMeta();
  meta.legacy = true;
  const BlockId id = BlockId::Broadcast(5);
  const std::string key = ChunkKeyOf(id, meta, 3);
  EXPECT_EQ(key.substr(0, 2), "c:");
  EXPECT_GE(key, GenerationKey(id, 42));
  EXPECT_LT(key, GenerationKey(id, 43));
  EXPECT_EQ(ChunkKeyOf(id, SmallMeta(), 3), VersionChunkKey(42, 3));
}

// A chunk file of `meta.size` bytes of block followed by the trailer: what DecodeChunkTrailer
// is given, as ChunkFiles reads it (the record, the footer, the file's size).
struct TrailedFile {
  std::string record;
  std::string footer;
  uint64_t file_bytes;
};

TrailedFile Trailed(const BlockId& id, const Meta& meta) {
  const std::string trailer = EncodeChunkTrailer(id, meta);
  return {trailer.substr(0, trailer.size() - kChunkTrailerFooterBytes),
          trailer.substr(trailer.size() - kChunkTrailerFooterBytes), meta.size + trailer.size()};
}

Meta InFileMeta() {
  Meta meta = SmallMeta();
  meta.in_file = true;
  return meta;
}

TEST(DiskFormatTest, AChunkTrailerIsTheMetaRecordWithItsLengthDigestAndMagic) {
  const BlockId id = BlockId::Broadcast(5);
  const TrailedFile file = Trailed(id, InFileMeta());
  EXPECT_EQ(file.record, EncodeVersionMeta(id, InFileMeta()));
  std::optional<ChunkTrailerFooter> footer = DecodeChunkTrailerFooter(file.footer);
  ASSERT_TRUE(footer.has_value());
  EXPECT_EQ(footer->record_bytes, file.record.size());
  EXPECT_EQ(GetBigEndian(std::string_view(file.footer).substr(16)), kChunkTrailerMagic);
  Result<std::pair<BlockId, Meta>> decoded =
      DecodeChunkTrailer(file.record, *footer, 42, file.file_bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->first, id);
  EXPECT_EQ(decoded->second.size, 10u);
  EXPECT_EQ(decoded->second.version, 7u);
  EXPECT_EQ(decoded->second.unit_digests, InFileMeta().unit_digests);
  EXPECT_TRUE(decoded->second.in_file);
}

TEST(DiskFormatTest, AFileWithoutTheMagicHasNoTrailer) {
  EXPECT_FALSE(DecodeChunkTrailerFooter(std::string(kChunkTrailerFooterBytes, 'x')).has_value());
  EXPECT_FALSE(DecodeChunkTrailerFooter("short").has_value());
}

TEST(DiskFormatTest, ADamagedOrMisplacedChunkTrailerIsRejected) {
  const BlockId id = BlockId::Broadcast(5);
  const TrailedFile file = Trailed(id, InFileMeta());
  const ChunkTrailerFooter footer = *DecodeChunkTrailerFooter(file.footer);
  for (size_t at = 0; at < file.record.size(); ++at) {
    std::string damaged = file.record;
    damaged[at] = static_cast<char>(damaged[at] ^ 0x10);
    EXPECT_EQ(DecodeChunkTrailer(damaged, footer, 42, file.file_bytes).status().code(),
              StatusCode::kDataLoss)
        << "byte " << at;
  }
  EXPECT_FALSE(DecodeChunkTrailer(file.record, footer, 43, file.file_bytes).ok())
      << "the file's name is another generation";
  EXPECT_FALSE(DecodeChunkTrailer(file.record, footer, 42, file.file_bytes + 1).ok())
      << "bytes between the block and the trailer";
  ChunkTrailerFooter wrong_digest = footer;
  ++wrong_digest.record_digest;
  EXPECT_FALSE(DecodeChunkTrailer(file.record, wrong_digest, 42, file.file_bytes).ok());
}

}  // namespace
}  // namespace bm::disk
