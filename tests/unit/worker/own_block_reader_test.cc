#include "worker/own_block_reader.h"

#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "common/core/protocol.h"
#include "tests/support/files.h"
#include "tests/unit/worker/reads_loop.h"

namespace bm {
namespace {

// Reads the whole block on a thread of its own while the test's thread plays the loop.
struct Copy {
  Status status;
  std::vector<std::byte> bytes;
  uint64_t total = 0;
};

Copy ReadAll(testing::ReadsLoop& loop, const BlockId& id, int ranges) {
  Copy copy;
  std::thread copier([&] {
    OwnBlockReader reader(loop.reads(), id);
    copy.status = reader.Start();
    if (!copy.status.ok()) return;
    copy.total = reader.total();
    BlockData data;
    while (true) {
      Result<ChunkPtr> chunk = reader.NextChunk();
      if (!chunk.ok()) {
        copy.status = chunk.status();
        return;
      }
      if (*chunk == nullptr) break;
      data.Append(*chunk);
    }
    copy.bytes = data.Flatten();
  });
  loop.ServeReads(ranges);
  copier.join();
  return copy;
}

TEST(OwnBlockReaderTest, HandsOutEveryByteOfABlockSpanningTwoRanges) {
  testing::ReadsLoop loop;
  const std::vector<std::byte> bytes = testing::RandomByteVector(kMaxPieceBytes + 4000, 2);
  const BlockId id = BlockId::Broadcast(1);
  ASSERT_TRUE(loop.Put(id, StorageLevel::kDiskOnly, bytes).ok());
  Copy copy = ReadAll(loop, id, 2);
  ASSERT_TRUE(copy.status.ok()) << copy.status.ToString();
  EXPECT_EQ(copy.total, bytes.size());
  EXPECT_EQ(copy.bytes, bytes);
}

TEST(OwnBlockReaderTest, AnEmptyBlockHasNoChunks) {
  testing::ReadsLoop loop;
  const BlockId id = BlockId::Broadcast(1);
  ASSERT_TRUE(loop.Put(id, StorageLevel::kDiskOnly, {}).ok());
  Copy copy = ReadAll(loop, id, 1);
  ASSERT_TRUE(copy.status.ok()) << copy.status.ToString();
  EXPECT_EQ(copy.total, 0u);
  EXPECT_TRUE(copy.bytes.empty());
}

TEST(OwnBlockReaderTest, ACorruptDiskCopyFailsWithDataLoss) {
  testing::ReadsLoop loop;
  const std::vector<std::byte> bytes = testing::RandomByteVector(3 * kChunkBytes, 3);
  const BlockId id = BlockId::Broadcast(1);
  ASSERT_TRUE(loop.Put(id, StorageLevel::kDiskOnly, bytes).ok());
  std::optional<Status> corrupted;
  loop.manager().CorruptStoredByte(id, Tier::kDisk, kChunkBytes + 5,
                                   [&](Status s) { corrupted = std::move(s); });
  testing::Settle(loop.manager());
  ASSERT_TRUE(corrupted.has_value() && corrupted->ok());
  Copy copy = ReadAll(loop, id, 1);
  EXPECT_EQ(copy.status.code(), StatusCode::kDataLoss) << copy.status.ToString();
}

}  // namespace
}  // namespace bm
