// Standby masters in one process, with the election played by the test (FakeLeadership): the
// standby follows the leader's journal, answers notLeader, and when elected serves the
// leader's metadata at once; a leader that loses the lead stops. The same with a real
// ZooKeeper election is tests/integration/failover_test.cc.

#include <capnp/message.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "master/master_server.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace bm {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;

class FakeLeadership final : public Leadership {
 public:
  LeadershipView Current() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return view_;
  }
  void Set(LeadershipView view) {
    std::lock_guard<std::mutex> lock(mutex_);
    view_ = std::move(view);
  }

 private:
  mutable std::mutex mutex_;
  LeadershipView view_;
};

// One master process's worth: the server on its thread, its election, a channel to it.
struct Master {
  Master(zmq::context_t& context, const Clock& clock, const std::string& id,
         const std::string& state_dir, LeadershipView view, Duration standby_timeout = 1s,
         MasterOptions options = {}) {
    leadership.Set(std::move(view));
    options.listen = "tcp://127.0.0.1:*";
    options.state_dir = state_dir;
    options.leadership = &leadership;
    options.master_id = id;
    options.standby_timeout = standby_timeout;
    Result<std::unique_ptr<MasterServer>> created = MasterServer::Create(context, options, clock);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return;
    server = std::move(created).value();
    thread = std::thread([this] { server->Run(); });
    channel = std::make_unique<RpcChannel>(context, server->endpoint(), 5000ms);
  }
  ~Master() { Stop(); }
  void Stop() {
    if (!server) return;
    server->Stop();
    if (thread.joinable()) thread.join();
  }
  void Elect(LeadershipView view) {
    leadership.Set(std::move(view));
    server->Wake();
  }
  Result<IncomingMessage> Call(capnp::MallocMessageBuilder& message) {
    return channel->Call(message);
  }
  struct InfoView {
    bool leader = false;
    uint64_t epoch = 0;
    uint64_t journal_sequence = 0;
    bool in_sync = false;
  };
  InfoView Info() {
    capnp::MallocMessageBuilder message;
    message.initRoot<proto::Request>().setMasterInfo();
    Result<IncomingMessage> reply = channel->Call(message);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    if (!reply.ok() || !reply->reply().isMaster()) return {};
    proto::MasterInfo::Reader info = reply->reply().getMaster();
    return {info.getLeader(), info.getEpoch(), info.getJournalSequence(), info.getInSync()};
  }

  FakeLeadership leadership;
  std::unique_ptr<MasterServer> server;
  std::thread thread;
  std::unique_ptr<RpcChannel> channel;
};

Result<IncomingMessage> RegisterWorker(Master& master, const std::string& id,
                                       const std::vector<std::string>& blocks) {
  capnp::MallocMessageBuilder message;
  auto request = message.initRoot<proto::Request>().initRegisterWorker();
  request.setWorkerId(id);
  request.setAddress("tcp://127.0.0.1:9");  // never dialled in these tests
  request.initStats().setMemoryCapacity(1000);
  auto list = request.initBlocks(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    list[i].setBlockId(blocks[i]);
    list[i].setSize(10 + i);
    list[i].setLevel(proto::StorageLevel::MEMORY_ONLY);
  }
  return master.Call(message);
}

Result<IncomingMessage> RegisterRdd(Master& master, uint64_t rdd_id, const std::string& name) {
  capnp::MallocMessageBuilder message;
  auto request = message.initRoot<proto::Request>().initRegisterRdd();
  request.setRddId(rdd_id);
  request.setName(name);
  request.setLevel(proto::StorageLevel::MEMORY_ONLY);
  request.setTotalPartitions(2);
  return master.Call(message);
}

// "rdd_1_0 w1" per listed block.
std::vector<std::string> ListBlocks(Master& master) {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().initListBlocks().setAll();
  Result<IncomingMessage> reply = master.Call(message);
  EXPECT_TRUE(reply.ok()) << reply.status().ToString();
  std::vector<std::string> out;
  if (!reply.ok() || !reply->reply().isBlocks()) return out;
  for (proto::BlockLocations::Reader block : reply->reply().getBlocks()) {
    std::string line = block.getBlockId();
    for (proto::Location::Reader location : block.getLocations()) {
      line += " " + std::string(location.getWorkerId().cStr());
    }
    out.push_back(line);
  }
  return out;
}

std::vector<std::string> ListRddNames(Master& master) {
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Request>().setListRdds();
  Result<IncomingMessage> reply = master.Call(message);
  std::vector<std::string> out;
  if (!reply.ok() || !reply->reply().isRdds()) return out;
  for (proto::RddInfo::Reader rdd : reply->reply().getRdds()) out.push_back(rdd.getName());
  return out;
}

// Waits until `standby` reports it holds every record `leader` wrote.
bool AwaitInSync(Master& leader, Master& standby, Duration within = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    const uint64_t written = leader.Info().journal_sequence;
    const Master::InfoView info = standby.Info();
    if (info.in_sync && info.journal_sequence == written) return true;
    std::this_thread::sleep_for(5ms);  // polling the standby's progress
  }
  return false;
}

class StandbyMasterTest : public ::testing::Test {
 protected:
  void SetUp() override { spdlog::set_level(spdlog::level::warn); }
  zmq::context_t context_{1};
  SteadyClock clock_;
  testing::TempDir state_;
};

TEST_F(StandbyMasterTest, AStandbyAnswersNotLeaderAndOnceElectedServesTheLeadersMetadata) {
  Master a(context_, clock_, "a", state_.Sub("a"), {.leader = true, .epoch = 1});
  Master b(context_, clock_, "b", state_.Sub("b"),
           {.epoch = 1, .leader_id = "a", .leader_address = a.server->endpoint()});
  ASSERT_TRUE(RegisterWorker(a, "w1", {"rdd_1_0", "rdd_1_1"}).ok());
  ASSERT_TRUE(RegisterWorker(a, "w2", {"rdd_2_0"}).ok());
  ASSERT_TRUE(RegisterRdd(a, 1, "ones").ok());
  const std::vector<std::string> before = ListBlocks(a);
  ASSERT_THAT(before, ElementsAre("rdd_1_0 w1", "rdd_1_1 w1", "rdd_2_0 w2"));
  ASSERT_TRUE(AwaitInSync(a, b));

  // The standby sends callers to the leader.
  capnp::MallocMessageBuilder lookup;
  lookup.initRoot<proto::Request>().initGetLocations().initBlockIds(1).set(0, "rdd_1_0");
  Result<IncomingMessage> redirected = b.Call(lookup);
  ASSERT_TRUE(redirected.ok()) << redirected.status().ToString();
  ASSERT_TRUE(redirected->reply().isNotLeader());
  EXPECT_EQ(std::string(redirected->reply().getNotLeader().getLeaderAddress().cStr()),
            a.server->endpoint());
  EXPECT_EQ(redirected->reply().getNotLeader().getEpoch(), 1u);

  // The election moves on: a stops at once, b leads with a's metadata.
  a.Elect({.epoch = 2, .leader_id = "b", .leader_address = b.server->endpoint()});
  a.thread.join();
  EXPECT_TRUE(a.server->demoted());
  const auto elected = std::chrono::steady_clock::now();
  b.Elect({.leader = true, .epoch = 2, .leader_id = "b", .leader_address = b.server->endpoint()});
  std::vector<std::string> after;
  while (after.empty() && std::chrono::steady_clock::now() - elected < 5s) after = ListBlocks(b);
  const auto took = std::chrono::steady_clock::now() - elected;
  std::printf("the standby answered as leader %.1f ms after its election\n",
              std::chrono::duration<double, std::milli>(took).count());
  EXPECT_EQ(after, before);
  EXPECT_LT(took, 1s);  // the "about a second", with the old leader silent, not gone
  EXPECT_THAT(ListRddNames(b), ::testing::Contains("ones"));
  const Master::InfoView info = b.Info();
  EXPECT_TRUE(info.leader);
  EXPECT_EQ(info.epoch, 2u);
  // Its workers register again with it, and hear its epoch.
  Result<IncomingMessage> registered = RegisterWorker(b, "w1", {"rdd_1_0", "rdd_1_1"});
  ASSERT_TRUE(registered.ok()) << registered.status().ToString();
  EXPECT_EQ(registered->reply().getRegistered().getEpoch(), 2u);
}

// The snapshot is larger than a page (here pages of two 4 KiB batches), so it comes in
// several.
TEST_F(StandbyMasterTest, AStandbyThatJoinsLateRebuildsFromASnapshotInPagesAndFollowsOn) {
  MasterOptions small_pages;
  small_pages.snapshot_batch_bytes = 4096;
  small_pages.snapshot_page_batches = 2;
  Master a(context_, clock_, "a", state_.Sub("a"), {.leader = true, .epoch = 4}, 1s, small_pages);
  for (int w = 0; w < 20; ++w) {
    std::vector<std::string> blocks;
    for (int p = 0; p < 50; ++p)
      blocks.push_back("rdd_" + std::to_string(w) + "_" + std::to_string(p));
    ASSERT_TRUE(RegisterWorker(a, "w" + std::to_string(w), blocks).ok());
  }
  Master b(context_, clock_, "b", state_.Sub("b"),
           {.epoch = 4, .leader_id = "a", .leader_address = a.server->endpoint()});
  ASSERT_TRUE(AwaitInSync(a, b));
  ASSERT_TRUE(RegisterRdd(a, 3, "late").ok());  // after the snapshot: a fetched record
  ASSERT_TRUE(AwaitInSync(a, b));
  const std::vector<std::string> before = ListBlocks(a);
  EXPECT_EQ(before.size(), 1000u);
  a.Elect({.epoch = 5, .leader_id = "b", .leader_address = b.server->endpoint()});
  b.Elect({.leader = true, .epoch = 5, .leader_id = "b", .leader_address = b.server->endpoint()});
  std::vector<std::string> after;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (after.empty() && std::chrono::steady_clock::now() < deadline) after = ListBlocks(b);
  EXPECT_EQ(after, before);
  EXPECT_THAT(ListRddNames(b), ::testing::Contains("late"));
}

TEST_F(StandbyMasterTest, AnAcknowledgementWaitsForTheInSyncStandbyUntilItFallsSilent) {
  Master a(context_, clock_, "a", state_.Sub("a"), {.leader = true, .epoch = 1},
           /*standby_timeout=*/300ms);
  auto b = std::make_unique<Master>(
      context_, clock_, "b", state_.Sub("b"),
      LeadershipView{.epoch = 1, .leader_id = "a", .leader_address = a.server->endpoint()});
  ASSERT_TRUE(RegisterRdd(a, 1, "first").ok());
  ASSERT_TRUE(AwaitInSync(a, *b));
  // With b in sync, an acknowledgement comes once b holds the record: promptly.
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(RegisterRdd(a, 2, "second").ok());
  const auto in_sync_ack = std::chrono::steady_clock::now() - start;
  // b goes away: the next acknowledgement waits for b to be declared out of sync, then goes.
  b.reset();
  start = std::chrono::steady_clock::now();
  ASSERT_TRUE(RegisterRdd(a, 3, "third").ok());
  const auto held_ack = std::chrono::steady_clock::now() - start;
  std::printf("acknowledged in %.2f ms with the standby in sync; %.0f ms after it stopped\n",
              std::chrono::duration<double, std::milli>(in_sync_ack).count(),
              std::chrono::duration<double, std::milli>(held_ack).count());
  EXPECT_LT(in_sync_ack, 300ms);
  EXPECT_LT(held_ack, 3s);
  // Nobody in sync now: acknowledgements go at once.
  start = std::chrono::steady_clock::now();
  ASSERT_TRUE(RegisterRdd(a, 4, "fourth").ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 300ms);
}

TEST_F(StandbyMasterTest, AMasterInAnElectionNeedsAStateDir) {
  FakeLeadership leadership;
  MasterOptions options;
  options.listen = "tcp://127.0.0.1:*";
  options.leadership = &leadership;
  Result<std::unique_ptr<MasterServer>> created = MasterServer::Create(context_, options, clock_);
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(created.status().message().find("--state-dir"), std::string::npos);
}

}  // namespace
}  // namespace bm

namespace bm {
namespace {

Result<IncomingMessage> Acquire(Master& master, const std::string& block, const std::string& who) {
  capnp::MallocMessageBuilder message;
  auto request = message.initRoot<proto::Request>().initAcquireCompute();
  request.setBlockId(block);
  request.setHolder(who);
  request.setLeaseMs(5000);
  request.setWaitMs(200);
  return master.Call(message);
}

Status Renew(Master& master, const std::string& block, uint64_t token) {
  capnp::MallocMessageBuilder message;
  auto request = message.initRoot<proto::Request>().initRenewCompute();
  request.setBlockId(block);
  request.setToken(token);
  return master.Call(message).status();
}

TEST_F(StandbyMasterTest, AComputeLeaseOutlivesAFailoverSoTheBlockIsComputedOnce) {
  Master a(context_, clock_, "a", state_.Sub("a"), {.leader = true, .epoch = 1});
  Master b(context_, clock_, "b", state_.Sub("b"),
           {.epoch = 1, .leader_id = "a", .leader_address = a.server->endpoint()});
  ASSERT_TRUE(AwaitInSync(a, b));
  Result<IncomingMessage> granted = Acquire(a, "rdd_9_0", "first");
  ASSERT_TRUE(granted.ok()) << granted.status().ToString();
  ASSERT_TRUE(granted->reply().getCompute().isGranted());
  const uint64_t token = granted->reply().getCompute().getGranted();

  a.Elect({.epoch = 2, .leader_id = "b", .leader_address = b.server->endpoint()});
  b.Elect({.leader = true, .epoch = 2, .leader_id = "b", .leader_address = b.server->endpoint()});
  ASSERT_TRUE(testing::WaitFor([&] { return b.Info().leader; }, 5000ms));
  // The holder goes on renewing with the new leader; a second caller waits for it rather than
  // computing the block again.
  EXPECT_TRUE(Renew(b, "rdd_9_0", token).ok());
  Result<IncomingMessage> second = Acquire(b, "rdd_9_0", "second");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE(second->reply().getCompute().isBusy());
  EXPECT_EQ(std::string(second->reply().getCompute().getBusy().getHolder().cStr()), "first");
}

}  // namespace
}  // namespace bm
