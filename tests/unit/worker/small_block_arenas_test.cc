#include "worker/small_block_arenas.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "common/core/digest.h"

namespace bm {
namespace {

// A whole memory block of `size` bytes, as BlockManager::ReadInMemory gives it.
BlockRead WholeBlock(uint64_t size, Tier tier = Tier::kMemory) {
  std::vector<std::byte> bytes(size, std::byte{7});
  const uint64_t digest = DigestOf(bytes);
  return BlockRead{.total_size = size,
                   .offset = 0,
                   .generation = 3,
                   .tier = tier,
                   .level = StorageLevel::kMemoryOnly,
                   .chunks = {MakeChunk(bytes)},
                   .version = 9,
                   .unit_digests = {digest}};
}

std::unique_ptr<BlockArenaReader> ReaderOf(const BlockArenaWriter* writer) {
  Result<std::unique_ptr<BlockArenaReader>> reader =
      BlockArenaReader::Map(OwnedFd(dup(writer->read_only_fd())), writer->file_bytes());
  EXPECT_TRUE(reader.ok()) << reader.status().ToString();
  return reader.ok() ? std::move(reader).value() : nullptr;
}

TEST(SmallBlockArenasTest, OneArenaPerScopeUpToTheLimitAndNoneWhenOff) {
  SmallBlockArenas off({.bytes = 0});
  EXPECT_EQ(off.For("all"), nullptr);
  SmallBlockArenas arenas({.bytes = 1 << 20, .max_block_bytes = 64 << 10, .max_arenas = 2});
  const BlockArenaWriter* all = arenas.For("all");
  ASSERT_NE(all, nullptr);
  EXPECT_EQ(arenas.For("all"), all);
  EXPECT_NE(arenas.For("tenant a"), nullptr);
  EXPECT_EQ(arenas.For("tenant b"), nullptr);  // past the limit
  EXPECT_EQ(arenas.arenas(), 2u);
}

TEST(SmallBlockArenasTest, OnlyWholeSmallMemoryBlocksWithADigestGoInAndAChangeTakesThemOut) {
  SmallBlockArenas arenas({.bytes = 1 << 20, .max_block_bytes = 64 << 10});
  const BlockArenaWriter* all = arenas.For("all");
  const BlockArenaWriter* tenant = arenas.For("tenant a");
  ASSERT_NE(all, nullptr);
  ASSERT_NE(tenant, nullptr);
  auto reader = ReaderOf(all);
  ASSERT_TRUE(reader);

  arenas.Offer("all", BlockId::Rdd(1, 0), WholeBlock(4096));
  std::optional<ArenaBlock> found = reader->Find(BlockId::Rdd(1, 0));
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->facts.version, 9u);
  EXPECT_EQ(found->facts.generation, 3u);
  EXPECT_TRUE(arenas.Holds("all", BlockId::Rdd(1, 0)));
  EXPECT_FALSE(arenas.Holds("tenant a", BlockId::Rdd(1, 0)));  // offered to one scope only

  arenas.Offer("all", BlockId::Rdd(1, 1), WholeBlock((64 << 10) + 1));  // too big
  arenas.Offer("all", BlockId::Rdd(1, 2), WholeBlock(4096, Tier::kDisk));
  BlockRead undigested = WholeBlock(4096);
  undigested.unit_digests.clear();
  arenas.Offer("all", BlockId::Rdd(1, 3), undigested);
  BlockRead range = WholeBlock(4096);
  range.offset = 1;
  arenas.Offer("all", BlockId::Rdd(1, 4), range);
  arenas.Offer("nobody", BlockId::Rdd(1, 5), WholeBlock(4096));  // no arena made for it
  for (uint64_t partition = 1; partition <= 5; ++partition) {
    EXPECT_FALSE(reader->Find(BlockId::Rdd(1, partition)).has_value()) << partition;
  }
  EXPECT_EQ(arenas.blocks(), 1u);

  arenas.Offer("tenant a", BlockId::Rdd(1, 0), WholeBlock(4096));
  EXPECT_EQ(arenas.blocks(), 2u);
  arenas.Forget(BlockId::Rdd(1, 0));  // out of every arena
  EXPECT_FALSE(reader->Find(BlockId::Rdd(1, 0)).has_value());
  EXPECT_EQ(arenas.blocks(), 0u);
}

}  // namespace
}  // namespace bm
