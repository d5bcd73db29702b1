#include "common/core/range_verifier.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/core/digest.h"
#include "tests/support/files.h"

namespace bm {
namespace {

std::vector<uint64_t> UnitDigests(std::span<const std::byte> bytes) {
  BlockDigester digester;
  digester.Update(bytes);
  return digester.Finish().units;
}

// Feeds `bytes` as ranges cut at `cuts` (offsets), each range's digests as a worker sends them
// (those of the units it overlaps), and collects what the verifier hands out. Returns the bad
// unit, if any was found.
std::optional<uint64_t> ReadInRanges(std::span<const std::byte> bytes,
                                     const std::vector<uint64_t>& digests,
                                     std::vector<uint64_t> cuts, std::vector<std::byte>* out) {
  RangeVerifier verifier(bytes.size());
  cuts.push_back(bytes.size());
  uint64_t offset = 0;
  for (uint64_t cut : cuts) {
    const uint64_t length = cut - offset;
    const uint64_t first = offset / kDigestUnitBytes;
    const uint64_t last = length == 0 ? first : (cut - 1) / kDigestUnitBytes;
    std::span<const uint64_t> sent(digests.data() + first, last - first + 1);
    // Two pieces, as frames would split a range.
    std::span<const std::byte> range = bytes.subspan(offset, length);
    std::vector<std::span<const std::byte>> pieces = {range.first(length / 2),
                                                      range.subspan(length / 2)};
    if (std::optional<uint64_t> bad = verifier.Add(offset, length, pieces, sent)) return bad;
    for (std::span<const std::byte> piece : verifier.ready()) {
      out->insert(out->end(), piece.begin(), piece.end());
    }
    EXPECT_EQ(verifier.verified_end(), out->size());
    offset = cut;
  }
  return std::nullopt;
}

TEST(RangeVerifierTest, RangesCutInsideUnitsHandOutEveryByteOnce) {
  const std::vector<std::byte> bytes = testing::RandomByteVector(3 * kDigestUnitBytes + 4321, 7);
  const std::vector<uint64_t> digests = UnitDigests(bytes);
  for (const std::vector<uint64_t>& cuts :
       {std::vector<uint64_t>{}, std::vector<uint64_t>{kDigestUnitBytes, 2 * kDigestUnitBytes},
        std::vector<uint64_t>{256 << 10, 512 << 10, kDigestUnitBytes + 5,
                              3 * kDigestUnitBytes + 1}}) {
    std::vector<std::byte> out;
    EXPECT_EQ(ReadInRanges(bytes, digests, cuts, &out), std::nullopt);
    EXPECT_EQ(out, bytes);
  }
}

// A unit split over two ranges, neither holding it whole, is still checked: its bad byte is
// found, and none of its bytes were handed out before.
TEST(RangeVerifierTest, AUnitSplitAcrossRangesIsChecked) {
  std::vector<std::byte> bytes = testing::RandomByteVector(2 * kDigestUnitBytes, 8);
  const std::vector<uint64_t> digests = UnitDigests(bytes);
  bytes[100] ^= std::byte{1};  // in unit 0, before the first cut
  std::vector<std::byte> out;
  EXPECT_EQ(ReadInRanges(bytes, digests, {256 << 10, 600 << 10}, &out), std::optional<uint64_t>(0));
  EXPECT_TRUE(out.empty());

  // The same in the block's last, short unit.
  std::vector<std::byte> tail = testing::RandomByteVector(kDigestUnitBytes + 1000, 9);
  const std::vector<uint64_t> tail_digests = UnitDigests(tail);
  tail[kDigestUnitBytes + 10] ^= std::byte{1};
  out.clear();
  EXPECT_EQ(ReadInRanges(tail, tail_digests, {kDigestUnitBytes + 500}, &out),
            std::optional<uint64_t>(1));
  EXPECT_EQ(out.size(), kDigestUnitBytes);
}

TEST(RangeVerifierTest, ABlockWithoutDigestsPassesAsItComes) {
  const std::vector<std::byte> bytes = testing::RandomByteVector(kDigestUnitBytes + 10, 10);
  RangeVerifier verifier(bytes.size());
  std::vector<std::span<const std::byte>> pieces = {std::span(bytes).first(100)};
  EXPECT_EQ(verifier.Add(0, 100, pieces, {}), std::nullopt);
  ASSERT_EQ(verifier.ready().size(), 1u);
  EXPECT_EQ(verifier.ready()[0].size(), 100u);
}

}  // namespace
}  // namespace bm
