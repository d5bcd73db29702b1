#include "worker/own_block_reads.h"

#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "tests/support/files.h"
#include "tests/unit/worker/reads_loop.h"

namespace bm {
namespace {

TEST(OwnBlockReadsTest, AnotherThreadReadsADiskBlockRangeThroughTheLoop) {
  testing::ReadsLoop loop;
  const std::vector<std::byte> bytes = testing::RandomByteVector(10000, 1);
  const BlockId id = BlockId::Broadcast(1);
  ASSERT_TRUE(loop.Put(id, StorageLevel::kDiskOnly, bytes).ok());
  std::optional<Result<BlockRead>> read;
  std::thread reader([&] { read = loop.reads().Read(id, 100, 5000); });
  loop.ServeReads(1);
  reader.join();
  ASSERT_TRUE(read.has_value() && read->ok()) << read->status().ToString();
  EXPECT_EQ((*read)->tier, Tier::kDisk);
  EXPECT_EQ((*read)->offset, 100u);
  EXPECT_EQ((*read)->total_size, 10000u);
  BlockData data;
  for (const ChunkPtr& chunk : (*read)->chunks) data.Append(chunk);
  EXPECT_EQ(data.Flatten(), std::vector<std::byte>(bytes.begin() + 100, bytes.begin() + 5100));
}

TEST(OwnBlockReadsTest, AMissingBlockIsNotFound) {
  testing::ReadsLoop loop;
  std::optional<Result<BlockRead>> read;
  std::thread reader([&] { read = loop.reads().Read(BlockId::Broadcast(9), 0, 10); });
  loop.ServeReads(1);
  reader.join();
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->status().code(), StatusCode::kNotFound);
}

TEST(OwnBlockReadsTest, CloseAnswersAWaitingReaderAndLaterReadsWithAborted) {
  testing::ReadsLoop loop;
  std::optional<Result<BlockRead>> read;
  std::thread reader([&] { read = loop.reads().Read(BlockId::Broadcast(1), 0, 10); });
  loop.AwaitQueued();
  loop.reads().Close();  // the loop stops with the read still queued
  reader.join();
  ASSERT_TRUE(read.has_value());
  EXPECT_EQ(read->status().code(), StatusCode::kAborted);
  EXPECT_EQ(loop.reads().Read(BlockId::Broadcast(1), 0, 10).status().code(), StatusCode::kAborted);
}

}  // namespace
}  // namespace bm
