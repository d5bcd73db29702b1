#include "transfer/block_upload.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <vector>
#include <zmq.hpp>

#include "common/core/protocol.h"
#include "tests/support/fake_server.h"
#include "transfer/piece_source.h"
#include "transfer/worker_channels.h"

namespace bm {
namespace {

using std::chrono::milliseconds;

// A worker taking every piece: each answered uncommitted until the last, which commits (or,
// with `commit_early`, every piece commits). `refuse_first` answers the first piece of each
// upload with a transit corruption (kDataLoss), once. Counts the pieces it received.
FakeServer::Handler PutHandler(std::shared_ptr<std::atomic<int>> pieces, bool commit_early = false,
                               bool refuse_first = false) {
  auto refused = std::make_shared<bool>(false);
  return [=](IncomingMessage& in, proto::Reply::Builder reply, std::vector<zmq::message_t>&) {
    proto::PutBlock::Reader put = in.request().getPutBlock();
    ++*pieces;
    if (refuse_first && !*refused && put.getOffset() == 0) {
      *refused = true;
      SetError(reply, StatusCode::kDataLoss, "piece corrupted in transit");
      return;
    }
    proto::PutReply::Builder out = reply.initPut();
    out.setCommitted(commit_early || put.getLast());
    out.setTier(ToProto(Tier::kMemory));
  };
}

WorkerInfo Worker(const std::string& id, const std::string& address) {
  WorkerInfo worker;
  worker.id = id;
  worker.address = address;
  return worker;
}

class BlockUploadTest : public ::testing::Test {
 protected:
  std::vector<Result<PutResult>> Upload(PieceSource& source,
                                        const std::vector<const WorkerInfo*>& targets) {
    BlockUpload upload(channels_, BlockId::Rdd(1, 0), StorageLevel::kMemoryOnly, {1}, source);
    return upload.Run(targets, upload_ids_);
  }

  zmq::context_t context_;
  WorkerChannels channels_{context_, CurveKeys{}, milliseconds(2000)};
  std::mt19937_64 upload_ids_{1};
  const WorkerInfo w1_ = Worker("w1", "inproc://w1");
  const WorkerInfo w2_ = Worker("w2", "inproc://w2");
};

PieceSource SpanSource(const std::vector<std::byte>& data) {
  return PieceSource(
      PieceSource::ReadBytes(
          [&data, offset = size_t{0}](std::span<std::byte> out) mutable -> Result<size_t> {
            const size_t n = std::min(out.size(), data.size() - offset);
            std::copy_n(data.begin() + static_cast<ptrdiff_t>(offset), n, out.begin());
            offset += n;
            return n;
          }),
      data.size(), nullptr);
}

TEST_F(BlockUploadTest, SendsEveryPieceToEveryTargetAndReturnsOneResultEach) {
  const std::vector<std::byte> data = Pattern(10 << 20);
  auto pieces1 = std::make_shared<std::atomic<int>>(0);
  auto pieces2 = std::make_shared<std::atomic<int>>(0);
  FakeServer worker1(context_, "inproc://w1", PutHandler(pieces1));
  FakeServer worker2(context_, "inproc://w2", PutHandler(pieces2));
  PieceSource source = SpanSource(data);
  std::vector<Result<PutResult>> results = Upload(source, {&w1_, &w2_});
  ASSERT_EQ(results.size(), 2u);
  ASSERT_TRUE(results[0].ok()) << results[0].status().ToString();
  ASSERT_TRUE(results[1].ok()) << results[1].status().ToString();
  EXPECT_EQ(results[0]->worker_id, "w1");
  EXPECT_EQ(results[1]->size, data.size());
  EXPECT_EQ(pieces1->load(), 3);  // 4 + 4 + 2 MiB
  EXPECT_EQ(pieces2->load(), 3);
}

TEST_F(BlockUploadTest, GivesUpOnATargetThatCommitsEarlyAndFinishesTheOthers) {
  const std::vector<std::byte> data = Pattern(10 << 20);
  auto pieces1 = std::make_shared<std::atomic<int>>(0);
  auto pieces2 = std::make_shared<std::atomic<int>>(0);
  FakeServer worker1(context_, "inproc://w1", PutHandler(pieces1, /*commit_early=*/true));
  FakeServer worker2(context_, "inproc://w2", PutHandler(pieces2));
  PieceSource source = SpanSource(data);
  std::vector<Result<PutResult>> results = Upload(source, {&w1_, &w2_});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status().code(), StatusCode::kInternal);
  EXPECT_NE(results[0].status().message().find("committed early"), std::string::npos);
  EXPECT_TRUE(results[1].ok()) << results[1].status().ToString();
}

TEST_F(BlockUploadTest, AFailingSourceGivesUpEveryTargetWithItsError) {
  auto pieces = std::make_shared<std::atomic<int>>(0);
  FakeServer worker1(context_, "inproc://w1", PutHandler(pieces));
  FakeServer worker2(context_, "inproc://w2", PutHandler(pieces));
  PieceSource source(PieceSource::ReadBytes([](std::span<std::byte>) -> Result<size_t> {
                       return InternalError("disk gone");
                     }),
                     8 << 20, nullptr);
  std::vector<Result<PutResult>> results = Upload(source, {&w1_, &w2_});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status().message(), "disk gone");
  EXPECT_EQ(results[1].status().message(), "disk gone");
  EXPECT_TRUE(source.failed());
  EXPECT_EQ(pieces->load(), 0);
}

TEST_F(BlockUploadTest, APieceCorruptedInTransitIsSentAgainOnce) {
  const std::vector<std::byte> data = Pattern(6 << 20);
  auto pieces = std::make_shared<std::atomic<int>>(0);
  FakeServer worker(context_, "inproc://w1",
                    PutHandler(pieces, /*commit_early=*/false, /*refuse_first=*/true));
  PieceSource source = SpanSource(data);
  std::vector<Result<PutResult>> results = Upload(source, {&w1_});
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].ok()) << results[0].status().ToString();
  EXPECT_EQ(pieces->load(), 4);  // both pieces, then both again
}

TEST_F(BlockUploadTest, ATargetWithoutAChannelFailsAlone) {
  const std::vector<std::byte> data = Pattern(1 << 20);
  auto pieces = std::make_shared<std::atomic<int>>(0);
  FakeServer worker(context_, "inproc://w1", PutHandler(pieces));
  const WorkerInfo bad = Worker("bad", "not an address");
  PieceSource source = SpanSource(data);
  std::vector<Result<PutResult>> results = Upload(source, {&bad, &w1_});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(results[1].ok()) << results[1].status().ToString();
}

}  // namespace
}  // namespace bm
