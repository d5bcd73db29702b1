#include "transfer/range_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <vector>
#include <zmq.hpp>

#include "common/core/digest.h"
#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "tests/support/fake_server.h"

namespace bm {
namespace {

using std::chrono::milliseconds;

// Serves `data` in replies of at most `max_reply` bytes, with the unit digests of `digests_of`
// (the block's true bytes when empty); `shift` moves each reply's offset.
FakeServer::Handler RangeHandler(std::vector<std::byte> data, uint64_t max_reply,
                                 std::vector<std::byte> digests_of = {}, uint64_t shift = 0) {
  const std::vector<uint64_t> units =
      UnitDigestsOf({std::span<const std::byte>(digests_of.empty() ? data : digests_of)});
  return
      [=](IncomingMessage& in, proto::Reply::Builder reply, std::vector<zmq::message_t>& payload) {
        proto::GetBlock::Reader get = in.request().getGetBlock();
        const uint64_t offset = get.getOffset();
        const uint64_t length =
            std::min<uint64_t>({get.getMaxLength(), max_reply, data.size() - offset});
        proto::GetReply::Builder out = reply.initGet();
        out.setTotalSize(data.size());
        out.setOffset(offset + shift);
        out.setLength(length);
        out.setGeneration(7);
        out.setVersion(42);
        const uint64_t first = offset / kDigestUnitBytes;
        const uint64_t end = (offset + length + kDigestUnitBytes - 1) / kDigestUnitBytes;
        auto list = out.initUnitDigests(static_cast<unsigned>(end - first));
        for (uint64_t u = first; u < end; ++u) list.set(static_cast<unsigned>(u - first), units[u]);
        for (uint64_t done = 0; done < length; done += kChunkBytes) {
          const uint64_t n = std::min<uint64_t>(kChunkBytes, length - done);
          payload.emplace_back(data.data() + offset + done, n);
        }
      };
}

class RangeReaderTest : public ::testing::Test {
 protected:
  zmq::context_t context_;
  RpcChannel channel_{context_, "inproc://w1", milliseconds(2000)};
  const BlockId id_ = BlockId::Rdd(1, 0);
};

TEST_F(RangeReaderTest, ReadsAWholeBlockIntoTheSinkRangeByRange) {
  const std::vector<std::byte> data = Pattern(40 << 20);
  FakeServer worker(context_, "inproc://w1", RangeHandler(data, kMaxPieceBytes));
  RangeReader reader(channel_, "worker w1", id_);
  std::vector<std::byte> got;
  RangeReader::Outcome read = reader.Read(
      [&](std::span<const std::byte> bytes) {
        got.insert(got.end(), bytes.begin(), bytes.end());
        return Status::Ok();
      },
      /*block_digest=*/0);
  ASSERT_TRUE(read.size.ok()) << read.size.status().ToString();
  EXPECT_EQ(*read.size, data.size());
  EXPECT_EQ(read.fault, RangeReader::Outcome::Fault::kNone);
  EXPECT_TRUE(got == data);
  EXPECT_EQ(reader.version(), 42u);
}

// Regression: a block copy must not take a range at whatever offset the worker names.
TEST_F(RangeReaderTest, RejectsARangeAtAnotherOffsetThanAskedFor) {
  const std::vector<std::byte> data = Pattern(3 << 20);
  FakeServer worker(context_, "inproc://w1", RangeHandler(data, 1 << 20, {}, /*shift=*/1));
  RangeReader reader(channel_, "worker w1", id_);
  Status next = reader.NextRange();
  EXPECT_EQ(next.code(), StatusCode::kInternal) << next.ToString();
  EXPECT_NE(next.message().find("malformed range"), std::string::npos) << next.ToString();
}

TEST_F(RangeReaderTest, ChunksOfRangesCutInsideAUnitMakeTheWholeBlock) {
  const std::vector<std::byte> data = Pattern((3 << 20) + 1000);
  FakeServer worker(context_, "inproc://w1", RangeHandler(data, (1 << 20) + (1 << 19)));
  RangeReader reader(channel_, "worker w1", id_);
  std::vector<std::byte> got;
  while (!reader.done()) {
    ASSERT_TRUE(reader.NextRange().ok());
    for (const ChunkPtr& chunk : reader.TakeReadyChunks()) {
      got.insert(got.end(), chunk->bytes().begin(), chunk->bytes().end());
    }
  }
  EXPECT_EQ(reader.total(), data.size());
  EXPECT_TRUE(got == data);
}

TEST_F(RangeReaderTest, BytesThatDoNotMatchTheirDigestsAreACorruptCopyAndNeverHandedOut) {
  const std::vector<std::byte> data = Pattern(2 << 20);
  std::vector<std::byte> good = data;
  good[100] = std::byte{0x55} ^ data[100];  // the digests are of other bytes
  FakeServer worker(context_, "inproc://w1", RangeHandler(data, kMaxPieceBytes, good));
  RangeReader reader(channel_, "worker w1", id_);
  bool emitted = false;
  RangeReader::Outcome read = reader.Read(
      [&](std::span<const std::byte>) {
        emitted = true;
        return Status::Ok();
      },
      0);
  EXPECT_EQ(read.size.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(read.fault, RangeReader::Outcome::Fault::kCorruptCopy);
  EXPECT_FALSE(read.emitted);
  EXPECT_FALSE(emitted);
}

TEST_F(RangeReaderTest, UnitDigestsThatDoNotMakeTheMastersBlockDigestAreReported) {
  const std::vector<std::byte> data = Pattern(2 << 20);
  FakeServer worker(context_, "inproc://w1", RangeHandler(data, kMaxPieceBytes));
  RangeReader reader(channel_, "worker w1", id_);
  RangeReader::Outcome read =
      reader.Read([](std::span<const std::byte>) { return Status::Ok(); }, /*block_digest=*/12345);
  EXPECT_EQ(read.size.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(read.fault, RangeReader::Outcome::Fault::kWrongBlockDigest);
  EXPECT_TRUE(read.emitted);
}

}  // namespace
}  // namespace bm
