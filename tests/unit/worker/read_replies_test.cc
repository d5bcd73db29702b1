#include "worker/read_replies.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <cstring>

#include "common/core/digest.h"
#include "common/core/protocol.h"

namespace bm {
namespace {

ChunkPtr Filled(size_t size, uint8_t value) {
  return std::make_shared<VectorChunk>(std::vector<std::byte>(size, std::byte{value}));
}

BlockRead ReadOf(std::vector<ChunkPtr> chunks, uint64_t offset, uint64_t total_size) {
  BlockRead read{total_size,       offset, /*generation=*/7, Tier::kDisk, StorageLevel::kDiskOnly,
                 std::move(chunks)};
  return read;
}

TEST(FillGetReplyTest, SharesStoredChunksCutAtChunkBytes) {
  const ChunkPtr big = Filled(kChunkBytes + 100, 1);
  BlockRead read = ReadOf({big}, 0, kChunkBytes + 100);
  capnp::MallocMessageBuilder reply;
  auto get = reply.initRoot<proto::GetReply>();
  std::vector<zmq::message_t> frames = FillGetReply(get, kMaxPieceBytes, read);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].size(), kChunkBytes);
  EXPECT_EQ(frames[1].size(), 100u);
  // No copy: the frame points into the stored chunk.
  EXPECT_EQ(frames[0].data(), static_cast<const void*>(big->bytes().data()));
  EXPECT_EQ(get.getLength(), kChunkBytes + 100);
  EXPECT_EQ(get.getTotalSize(), kChunkBytes + 100);
  EXPECT_EQ(get.getGeneration(), 7u);
}

TEST(FillGetReplyTest, AnswersAtMostTheLimit) {
  BlockRead read = ReadOf({Filled(1000, 1)}, 0, 1000);
  capnp::MallocMessageBuilder reply;
  auto get = reply.initRoot<proto::GetReply>();
  std::vector<zmq::message_t> frames = FillGetReply(get, 300, read);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].size(), 300u);
  EXPECT_EQ(get.getLength(), 300u);
}

TEST(FillGetReplyTest, ManyTinyChunksAreCutAtFrameLimitOnAUnitBoundary) {
  // Chunks of a quarter unit: kMaxPayloadFrames of them end mid-unit unless that is a multiple
  // of four; the reply ends at the last whole unit they reach.
  const size_t tiny = kDigestUnitBytes / 4 + 1;
  std::vector<ChunkPtr> chunks;
  for (size_t i = 0; i < kMaxPayloadFrames + 8; ++i) chunks.push_back(Filled(tiny, 2));
  const uint64_t total = tiny * chunks.size();
  BlockRead read = ReadOf(chunks, 0, total);
  capnp::MallocMessageBuilder reply;
  auto get = reply.initRoot<proto::GetReply>();
  std::vector<zmq::message_t> frames = FillGetReply(get, kMaxPieceBytes, read);
  EXPECT_LE(frames.size(), kMaxPayloadFrames);
  EXPECT_EQ(get.getLength() % kDigestUnitBytes, 0u);
  EXPECT_GT(get.getLength(), 0u);
}

TEST(FillGetManyReplyTest, PacksSmallBlocksIntoOneFrameAndMarksMissingOnes) {
  std::vector<std::optional<BlockStatus>> statuses;
  std::vector<std::optional<BlockRead>> reads;
  for (uint8_t i = 0; i < 3; ++i) {
    statuses.push_back(
        BlockStatus{BlockId::Broadcast(i), StorageLevel::kMemoryOnly, Tier::kMemory, 4096, 0});
    reads.push_back(ReadOf({Filled(4096, i)}, 0, 4096));
  }
  statuses.push_back(std::nullopt);
  reads.push_back(std::nullopt);
  capnp::MallocMessageBuilder reply;
  auto root = reply.initRoot<proto::Reply>();
  auto entries = root.initBlocksRead(4);
  std::vector<zmq::message_t> frames = FillGetManyReply(entries, statuses, reads);
  ASSERT_EQ(frames.size(), 1u);
  ASSERT_EQ(frames[0].size(), 3u * 4096);
  for (unsigned i = 0; i < 3; ++i) {
    EXPECT_EQ(entries[i].getState(), proto::MultiGetEntry::State::INCLUDED);
    EXPECT_EQ(static_cast<const uint8_t*>(frames[0].data())[i * 4096], i);
  }
  EXPECT_EQ(entries[3].getState(), proto::MultiGetEntry::State::NOT_FOUND);
}

TEST(FillGetManyReplyTest, LeavesOutBlocksPastThePieceLimit) {
  std::vector<std::optional<BlockStatus>> statuses;
  std::vector<std::optional<BlockRead>> reads;
  const uint64_t size = kMaxPieceBytes / 2 + 1;
  for (uint8_t i = 0; i < 2; ++i) {
    statuses.push_back(
        BlockStatus{BlockId::Broadcast(i), StorageLevel::kMemoryOnly, Tier::kMemory, size, 0});
    reads.push_back(ReadOf({Filled(size, i)}, 0, size));
  }
  capnp::MallocMessageBuilder reply;
  auto entries = reply.initRoot<proto::Reply>().initBlocksRead(2);
  std::vector<zmq::message_t> frames = FillGetManyReply(entries, statuses, reads);
  EXPECT_EQ(entries[0].getState(), proto::MultiGetEntry::State::INCLUDED);
  EXPECT_EQ(entries[1].getState(), proto::MultiGetEntry::State::NOT_INCLUDED);
  EXPECT_EQ(entries[1].getTotalSize(), size);
}

}  // namespace
}  // namespace bm
