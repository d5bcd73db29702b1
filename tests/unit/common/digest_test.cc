#include "common/digest.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/support/files.h"

namespace bm {
namespace {

TEST(DigestTest, StreamingInAnyPiecesEqualsTheWholeDigest) {
  const std::vector<std::byte> bytes = testing::RandomByteVector(3 * kDigestUnitBytes + 17, 1);
  const uint64_t whole = DigestOf(bytes);
  for (size_t piece : {size_t{1} << 10, size_t{777777}, kDigestUnitBytes, bytes.size()}) {
    StreamingDigest digest;
    for (size_t at = 0; at < bytes.size(); at += piece) {
      digest.Update(std::span(bytes).subspan(at, std::min(piece, bytes.size() - at)));
    }
    EXPECT_EQ(digest.value(), whole) << "pieces of " << piece;
  }
}

TEST(DigestTest, OneFlippedBitChangesTheDigest) {
  std::vector<std::byte> bytes = testing::RandomByteVector(kDigestUnitBytes, 2);
  const uint64_t before = DigestOf(bytes);
  bytes[kDigestUnitBytes / 2] ^= std::byte{0x04};
  EXPECT_NE(DigestOf(bytes), before);
}

TEST(DigestTest, BlockDigesterCutsUnitsAtBlockOffsetsWhateverThePieces) {
  const std::vector<std::byte> bytes = testing::RandomByteVector(2 * kDigestUnitBytes + 5, 3);
  const std::span<const std::byte> all(bytes);
  const BlockDigests expected{{DigestOf(all.subspan(0, kDigestUnitBytes)),
                               DigestOf(all.subspan(kDigestUnitBytes, kDigestUnitBytes)),
                               DigestOf(all.subspan(2 * kDigestUnitBytes))},
                              DigestOf(all)};
  for (size_t piece : {size_t{300000}, kDigestUnitBytes + 1, bytes.size()}) {
    BlockDigester digester;
    for (size_t at = 0; at < bytes.size(); at += piece) {
      digester.Update(all.subspan(at, std::min(piece, bytes.size() - at)));
    }
    EXPECT_EQ(digester.Finish(), expected) << "pieces of " << piece;
    EXPECT_EQ(digester.bytes(), bytes.size());
  }
  EXPECT_EQ(DigestUnitCount(bytes.size()), 3u);
  EXPECT_EQ(DigestUnitCount(kDigestUnitBytes), 1u);
  EXPECT_EQ(DigestUnitCount(0), 0u);
  EXPECT_EQ(BlockDigester().Finish().units.size(), 0u);
}

}  // namespace
}  // namespace bm
