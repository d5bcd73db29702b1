#include "master/worker_commands.h"

#include <capnp/serialize.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "common/core/protocol.h"

namespace bm {
namespace {

using ::testing::ElementsAre;

// Keeps what would go to each worker; workers not in `linked` have no link.
class FakeWorkerSender final : public WorkerSender {
 public:
  struct Sent {
    std::string worker_id;
    kj::Array<capnp::word> words;
    proto::Request::Reader request() {
      reader.emplace(words.asPtr());
      return reader->getRoot<proto::Request>();
    }
    std::optional<capnp::FlatArrayMessageReader> reader{};
  };

  Status Send(std::string_view worker_id, capnp::MessageBuilder& message) override {
    if (!linked.contains(std::string(worker_id))) return NotFoundError("no link");
    sent.push_back(Sent{std::string(worker_id), capnp::messageToFlatArray(message)});
    return Status::Ok();
  }

  std::set<std::string> linked{"w1", "w2"};
  std::vector<Sent> sent;
};

class WorkerCommandsTest : public ::testing::Test {
 protected:
  FakeWorkerSender sender_;
};

TEST_F(WorkerCommandsTest, RemoveBlocksNamesVersionsOnlyWhenTheCommandHasThem) {
  ASSERT_TRUE(SendRemoveBlocks(sender_, {.request_id = 5,
                                         .worker_id = "w1",
                                         .blocks = {BlockId::Rdd(1, 0), BlockId::Rdd(1, 1)}})
                  .ok());
  ASSERT_TRUE(
      SendRemoveBlocks(
          sender_,
          {.request_id = 6, .worker_id = "w2", .blocks = {BlockId::Rdd(2, 0)}, .versions = {99}})
          .ok());
  ASSERT_EQ(sender_.sent.size(), 2u);
  EXPECT_EQ(sender_.sent[0].worker_id, "w1");
  proto::Request::Reader first = sender_.sent[0].request();
  EXPECT_EQ(first.getId(), 5u);
  ASSERT_TRUE(first.isRemoveBlocks());
  ASSERT_EQ(first.getRemoveBlocks().getBlockIds().size(), 2u);
  EXPECT_EQ(std::string(first.getRemoveBlocks().getBlockIds()[1].cStr()), "rdd_1_1");
  EXPECT_EQ(first.getRemoveBlocks().getVersions().size(), 0u);
  proto::Request::Reader second = sender_.sent[1].request();
  ASSERT_EQ(second.getRemoveBlocks().getVersions().size(), 1u);
  EXPECT_EQ(second.getRemoveBlocks().getVersions()[0], 99u);
}

TEST_F(WorkerCommandsTest, ReplicateBlockGoesToTheSourceWithTargetsAndTheirKeys) {
  ReplicationPlanner::CopyCommand command{
      .block = BlockId::Rdd(3, 4),
      .level = StorageLevel::kMemoryAndDisk2,
      .source = "w2",
      .targets = {WorkerRecord{.id = "w3", .address = "tcp://127.0.0.1:9003"}}};
  ASSERT_TRUE(SendReplicateBlock(sender_, 11, command, {"key-of-w3"}).ok());
  ASSERT_EQ(sender_.sent.size(), 1u);
  EXPECT_EQ(sender_.sent[0].worker_id, "w2");
  proto::Request::Reader request = sender_.sent[0].request();
  EXPECT_EQ(request.getId(), 11u);
  ASSERT_TRUE(request.isReplicateBlock());
  EXPECT_EQ(std::string(request.getReplicateBlock().getBlockId().cStr()), "rdd_3_4");
  EXPECT_EQ(FromProto(request.getReplicateBlock().getLevel()), StorageLevel::kMemoryAndDisk2);
  ASSERT_EQ(request.getReplicateBlock().getTargets().size(), 1u);
  auto target = request.getReplicateBlock().getTargets()[0];
  EXPECT_EQ(std::string(target.getWorkerId().cStr()), "w3");
  EXPECT_EQ(std::string(target.getAddress().cStr()), "tcp://127.0.0.1:9003");
  EXPECT_EQ(std::string(target.getPublicKey().cStr()), "key-of-w3");
}

TEST_F(WorkerCommandsTest, VerifyBlockSaysTheCopyWasReportedBad) {
  ASSERT_TRUE(SendVerifyBlock(sender_, "w1", 12, BlockId::Rdd(5, 6)).ok());
  proto::Request::Reader request = sender_.sent.at(0).request();
  EXPECT_EQ(request.getId(), 12u);
  ASSERT_TRUE(request.isVerifyBlock());
  EXPECT_EQ(std::string(request.getVerifyBlock().getBlockId().cStr()), "rdd_5_6");
  EXPECT_TRUE(request.getVerifyBlock().getReportedBad());
}

TEST_F(WorkerCommandsTest, DecommissionAndShutdownGoToTheirWorker) {
  ASSERT_TRUE(SendDecommission(sender_, "w1").ok());
  ASSERT_TRUE(SendShutdown(sender_, "w2").ok());
  EXPECT_TRUE(sender_.sent.at(0).request().isDecommission());
  EXPECT_EQ(sender_.sent.at(1).worker_id, "w2");
  EXPECT_TRUE(sender_.sent.at(1).request().isShutdown());
}

TEST_F(WorkerCommandsTest, WorkerWithoutALinkIsNotFound) {
  EXPECT_EQ(SendShutdown(sender_, "gone").code(), StatusCode::kNotFound);
  EXPECT_TRUE(sender_.sent.empty());
}

}  // namespace
}  // namespace bm
