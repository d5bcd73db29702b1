#include "master/worker_requests.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace bm {
namespace {

using ::testing::ElementsAre;

class WorkerRequestsTest : public ::testing::Test {
 protected:
  proto::RegisterWorker::Builder Registration() {
    proto::RegisterWorker::Builder request = message_.initRoot<proto::RegisterWorker>();
    request.setWorkerId("w1");
    request.setAddress("tcp://127.0.0.1:7001");
    request.setHost("h1");
    request.setRack("r1");
    return request;
  }
  // A worker's reply as the master's link receives it.
  static IncomingMessage Received(capnp::MallocMessageBuilder& reply) {
    return IncomingMessage(std::nullopt, capnp::messageToFlatArray(reply), {});
  }

  // Held by pointer: its destructor may throw, which a test fixture's may not.
  std::unique_ptr<capnp::MallocMessageBuilder> owned_ =
      std::make_unique<capnp::MallocMessageBuilder>();
  capnp::MallocMessageBuilder& message_ = *owned_;
};

TEST_F(WorkerRequestsTest, RegistrationMarksItsFreshBlocks) {
  proto::RegisterWorker::Builder request = Registration();
  auto blocks = request.initBlocks(2);
  blocks[0].setBlockId(BlockId::Rdd(1, 0).ToString());
  blocks[0].setVersion(7);
  blocks[1].setBlockId(BlockId::Rdd(1, 1).ToString());
  blocks[1].setVersion(8);
  request.initFreshBlocks(1).set(0, BlockId::Rdd(1, 1).ToString());
  request.setStartedNow(true);
  request.setFollowUpBlocks(5);
  request.initShuffles(1).set(0, 12);
  Result<WorkerRegistration> worker = DecodeRegistration(request.asReader());
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  EXPECT_EQ(worker->id, "w1");
  EXPECT_EQ(worker->labels.host, "h1");
  EXPECT_EQ(worker->labels.rack, "r1");
  ASSERT_EQ(worker->blocks.size(), 2u);
  EXPECT_FALSE(worker->blocks[0].fresh);
  EXPECT_TRUE(worker->blocks[1].fresh);
  EXPECT_EQ(worker->blocks[1].version, 8u);
  EXPECT_TRUE(worker->started_now);
  EXPECT_EQ(worker->follow_ups, 5u);
  EXPECT_THAT(worker->shuffles, ElementsAre(12u));
}

TEST_F(WorkerRequestsTest, RegistrationAtAnUnsupportedAddressIsRefused) {
  Registration().setAddress("udp://127.0.0.1:7001");
  EXPECT_EQ(
      DecodeRegistration(message_.getRoot<proto::RegisterWorker>().asReader()).status().code(),
      StatusCode::kInvalidArgument);
}

TEST_F(WorkerRequestsTest, RegistrationWithoutAnIdIsRefused) {
  Registration().setWorkerId("");
  EXPECT_FALSE(DecodeRegistration(message_.getRoot<proto::RegisterWorker>().asReader()).ok());
}

TEST_F(WorkerRequestsTest, RegisteredReplyAsksForHeartbeatsAtAQuarterOfTheTimeoutWithAFloor) {
  proto::RegisterReply::Builder out = message_.initRoot<proto::RegisterReply>();
  EncodeRegistered(std::chrono::seconds(4), 3, out);
  EXPECT_EQ(out.getHeartbeatIntervalMs(), 1000u);
  EXPECT_EQ(out.getEpoch(), 3u);
  EncodeRegistered(std::chrono::milliseconds(100), 3, out);
  EXPECT_EQ(out.getHeartbeatIntervalMs(), 50u);
}

TEST_F(WorkerRequestsTest, RemovedReplyIsAwaited) {
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(9);
  root.setRemoved(1);
  IncomingMessage received = Received(reply);
  Result<WorkerReply> decoded = DecodeWorkerReply(received);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->id, 9u);
  EXPECT_TRUE(decoded->removed);
  EXPECT_FALSE(decoded->unawaited());
}

TEST_F(WorkerRequestsTest, CorruptVerifyAnswerIsASentenceWithTheWorkersMessage) {
  capnp::MallocMessageBuilder reply;
  proto::Reply::Builder root = reply.initRoot<proto::Reply>();
  root.setId(4);
  proto::VerifyReply::Builder verified = root.initVerified();
  verified.setState(proto::VerifyReply::State::CORRUPT);
  verified.setMessage("unit 3 differs");
  IncomingMessage received = Received(reply);
  Result<WorkerReply> decoded = DecodeWorkerReply(received);
  ASSERT_TRUE(decoded.ok());
  ASSERT_TRUE(decoded->verified.has_value());
  EXPECT_EQ(*decoded->verified, "corrupt, dropped: unit 3 differs");
}

TEST_F(WorkerRequestsTest, ReplyThatIsNoCommandsAnswerIsAFailure) {
  capnp::MallocMessageBuilder odd;
  proto::Reply::Builder root = odd.initRoot<proto::Reply>();
  root.setId(5);
  root.setOk();
  IncomingMessage received = Received(odd);
  Result<WorkerReply> unexpected = DecodeWorkerReply(received);
  ASSERT_TRUE(unexpected.ok());
  EXPECT_EQ(unexpected->id, 5u);
  EXPECT_EQ(unexpected->failure.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(unexpected->unawaited());
}

}  // namespace
}  // namespace bm
