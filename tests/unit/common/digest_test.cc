#include "common/core/digest.h"

#include <gtest/gtest.h>
#include <xxhash.h>

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

// The digests are XXH3-64 exactly, whichever build of it the CPU gets (AVX2 or SSE2): stored
// digests are checked on other machines. Debian's libxxhash is the reference.
TEST(DigestTest, IsXxh3AsTheSystemLibraryComputesIt) {
  EXPECT_EQ(DigestOf({}), 0x2D06800538D394C2ULL);
  for (size_t size : {size_t{1}, size_t{240}, size_t{1000}, kDigestUnitBytes + 17}) {
    const std::vector<std::byte> bytes = testing::RandomByteVector(size, size);
    const uint64_t reference = XXH3_64bits(bytes.data(), bytes.size());
    EXPECT_EQ(DigestOf(bytes), reference) << size;
    StreamingDigest streaming;
    streaming.Update(std::span(bytes).first(size / 3));
    streaming.Update(std::span(bytes).subspan(size / 3));
    EXPECT_EQ(streaming.value(), reference) << size;
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
  const std::vector<uint64_t> units{DigestOf(all.subspan(0, kDigestUnitBytes)),
                                    DigestOf(all.subspan(kDigestUnitBytes, kDigestUnitBytes)),
                                    DigestOf(all.subspan(2 * kDigestUnitBytes))};
  const BlockDigests expected{units, BlockDigestOf(units)};
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

TEST(DigestTest, UnitDigestsOfCutsUnitsWhateverTheSpans) {
  const std::vector<std::byte> bytes = testing::RandomByteVector(2 * kDigestUnitBytes + 5, 4);
  const std::span<const std::byte> all(bytes);
  const std::vector<uint64_t> expected{DigestOf(all.subspan(0, kDigestUnitBytes)),
                                       DigestOf(all.subspan(kDigestUnitBytes, kDigestUnitBytes)),
                                       DigestOf(all.subspan(2 * kDigestUnitBytes))};
  EXPECT_EQ(UnitDigestsOf({all}), expected);
  EXPECT_EQ(UnitDigestsOf({all.subspan(0, 7), all.subspan(7, kDigestUnitBytes + 3),
                           all.subspan(kDigestUnitBytes + 10)}),
            expected);
  EXPECT_TRUE(UnitDigestsOf({}).empty());
}

TEST(DigestTest, AdoptedUnitsAreTakenAsGivenAndTheRestHashed) {
  const std::vector<std::byte> bytes = testing::RandomByteVector(3 * kDigestUnitBytes + 9, 5);
  const std::span<const std::byte> all(bytes);
  BlockDigester reference;
  reference.Update(all);
  const std::vector<uint64_t> units = reference.Finish().units;
  ASSERT_EQ(units.size(), 4u);

  // Units 1 and 3 (the partial last one) adopted; a wrong adopted digest shows that the bytes
  // were not hashed again.
  BlockDigester digester;
  digester.Update(all.subspan(0, kDigestUnitBytes));
  digester.AdoptUnits(std::vector<uint64_t>{units[1]});
  digester.Update(all.subspan(kDigestUnitBytes, kDigestUnitBytes / 2));
  digester.Update(all.subspan(kDigestUnitBytes + kDigestUnitBytes / 2, kDigestUnitBytes / 2));
  digester.Update(all.subspan(2 * kDigestUnitBytes, kDigestUnitBytes));
  digester.AdoptUnits(std::vector<uint64_t>{42});
  digester.Update(all.subspan(3 * kDigestUnitBytes));
  const BlockDigests got = digester.Finish();
  EXPECT_EQ(got.units, (std::vector<uint64_t>{units[0], units[1], units[2], 42}));
  EXPECT_EQ(got.block, BlockDigestOf(got.units));
  EXPECT_EQ(digester.bytes(), bytes.size());
}

TEST(DigestTest, TheBlockDigestCoversEveryUnitInOrder) {
  const std::vector<uint64_t> units{1, 2, 3};
  const uint64_t digest = BlockDigestOf(units);
  EXPECT_NE(digest, BlockDigestOf(std::vector<uint64_t>{1, 3, 2}));
  EXPECT_NE(digest, BlockDigestOf(std::vector<uint64_t>{1, 2}));
  EXPECT_NE(digest, BlockDigestOf(std::vector<uint64_t>{1, 2, 3 ^ (uint64_t{1} << 63)}));
  EXPECT_EQ(BlockDigestOf({}), 0u);
}

}  // namespace
}  // namespace bm

namespace bm {
namespace {

std::vector<uint64_t> UnitDigests(std::span<const std::byte> block) {
  BlockDigester digester;
  digester.Update(block);
  return digester.Finish().units;
}

TEST(FirstBadUnitTest, FindsTheUnitHoldingAFlippedByteWhateverTheFrames) {
  std::vector<std::byte> block = testing::RandomByteVector(3 * kDigestUnitBytes + 100, 4);
  const std::vector<uint64_t> units = UnitDigests(block);
  const std::span<const std::byte> all(block);
  std::vector<std::span<const std::byte>> frames;
  for (size_t at = 0; at < block.size(); at += 300000) {
    frames.push_back(all.subspan(at, std::min<size_t>(300000, block.size() - at)));
  }
  EXPECT_EQ(FirstBadUnit(frames, 0, block.size(), block.size(), units), std::nullopt);
  block[2 * kDigestUnitBytes + 7] ^= std::byte{1};
  EXPECT_EQ(FirstBadUnit(frames, 0, block.size(), block.size(), units), 2u);
  // A range starting at unit 2 gets the digests from unit 2 on.
  const std::vector<std::span<const std::byte>> tail = {all.subspan(2 * kDigestUnitBytes)};
  EXPECT_EQ(FirstBadUnit(tail, 2 * kDigestUnitBytes, block.size() - 2 * kDigestUnitBytes,
                         block.size(), std::span(units).subspan(2)),
            2u);
  // Without digests (a block stored before them) nothing is checked.
  EXPECT_EQ(FirstBadUnit(frames, 0, block.size(), block.size(), {}), std::nullopt);
  // A range that holds the bad unit only in part skips it.
  const std::vector<std::span<const std::byte>> part = {
      all.subspan(kDigestUnitBytes, kDigestUnitBytes + 100)};
  EXPECT_EQ(FirstBadUnit(part, kDigestUnitBytes, kDigestUnitBytes + 100, block.size(),
                         std::span(units).subspan(1)),
            std::nullopt);
}

TEST(DigestTest, HexIsSixteenLowercaseDigits) {
  EXPECT_EQ(DigestHex(0), "0000000000000000");
  EXPECT_EQ(DigestHex(0x0123456789abcdefULL), "0123456789abcdef");
  EXPECT_EQ(DigestHex(UINT64_MAX), "ffffffffffffffff");
}

}  // namespace
}  // namespace bm
