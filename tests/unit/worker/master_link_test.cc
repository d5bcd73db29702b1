#include "worker/master_link.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "tests/unit/worker/block_manager_sync.h"
#include "tests/unit/worker/fake_master.h"
#include "tests/unit/worker/in_memory_store.h"
#include "worker/memory_store.h"

// MasterLink's transitions (worker/master_link.h) one by one, against a fake master on a
// loopback socket and a clock that moves only when told: every timeout and back-off is stepped
// through instead of waited for.

namespace bm {
namespace {

using std::chrono::milliseconds;
using testing::FakeMaster;
using testing::SeenRequest;

constexpr milliseconds kHeartbeat{100};  // the fake master's interval
constexpr milliseconds kBackoff{100};

class MasterLinkTest : public ::testing::Test {
 protected:
  MasterLinkTest()
      : master_(context_),
        blocks_(std::make_unique<MemoryStore>(1 << 20),
                std::make_unique<testing::InMemoryStore>(1 << 20)) {}

  MasterLink& Link(const std::string& address) {
    MasterLinkOptions options;
    options.master_address = address;
    options.worker_id = "w1";
    options.advertised_address = "tcp://127.0.0.1:1";
    options.request_timeout = std::chrono::seconds(1);
    options.backoff_initial = kBackoff;
    options.backoff_max = milliseconds(400);
    link_ = std::make_unique<MasterLink>(context_, options, blocks_, clock_);
    return *link_;
  }
  MasterLink& Link() { return Link(master_.endpoint()); }

  // Reads the master's replies until `done()` holds; false after a generous bound.
  template <typename Done>
  bool Pump(Done done) {
    const auto give_up = std::chrono::steady_clock::now() + testing::kFakeMasterAwait;
    while (!done()) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      zmq::pollitem_t item{link_->socket().handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, milliseconds(10));
      link_->OnReadable();
    }
    return true;
  }

  bool Registered() {
    link_->OnTimer();
    return Pump([&] { return link_->registered(); });
  }

  // Waits until `master` has seen `count` requests of `kind`.
  static bool Seen(FakeMaster& master, SeenRequest::Kind kind, size_t count) {
    return master.WaitFor([&](const std::vector<SeenRequest>& seen) {
      return static_cast<size_t>(std::count_if(
                 seen.begin(), seen.end(), [&](const auto& r) { return r.kind == kind; })) >= count;
    });
  }

  void PutBlock(const std::string& name) {
    Result<BlockId> id = BlockId::Parse(name);
    ASSERT_TRUE(id.ok());
    const std::vector<std::byte> bytes(64, std::byte{7});
    Result<BlockManager::UploadId> upload =
        blocks_.BeginPut(*id, StorageLevel::kMemoryOnly, bytes.size());
    ASSERT_TRUE(upload.ok()) << upload.status().ToString();
    ASSERT_TRUE(testing::AppendPut(blocks_, *upload, {MakeChunk(bytes)}).ok());
    ASSERT_TRUE(testing::CommitPut(blocks_, *upload).ok());
  }

  zmq::context_t context_;
  FakeClock clock_;
  FakeMaster master_;
  BlockManager blocks_;
  std::unique_ptr<MasterLink> link_;
};

TEST_F(MasterLinkTest, RegistersWithEveryBlockThenHeartbeatsAtTheMastersInterval) {
  PutBlock("rdd_1_0");
  MasterLink& link = Link();
  EXPECT_FALSE(link.registered());
  ASSERT_TRUE(Registered());
  ASSERT_TRUE(Seen(master_, SeenRequest::kRegister, 1));
  const std::vector<SeenRequest> seen = master_.Requests();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].worker_id, "w1");
  EXPECT_TRUE(seen[0].Has("rdd_1_0"));

  // Not due yet: nothing goes. Then one heartbeat per interval.
  clock_.Advance(kHeartbeat - milliseconds(1));
  link.OnTimer();
  clock_.Advance(milliseconds(1));
  link.OnTimer();
  ASSERT_TRUE(Seen(master_, SeenRequest::kHeartbeat, 1));
  clock_.Advance(kHeartbeat);
  link.OnTimer();
  ASSERT_TRUE(Seen(master_, SeenRequest::kHeartbeat, 2));
  // Exactly two: the early OnTimer sent none (the DEALER keeps order, so it would be seen).
  EXPECT_EQ(master_.CountOf(SeenRequest::kHeartbeat), 2u);
  EXPECT_EQ(master_.CountOf(SeenRequest::kRegister), 1u);
}

TEST_F(MasterLinkTest, AChangeCountsAsKnownOnlyOnceTheMasterAnswersItsReport) {
  MasterLink& link = Link();
  ASSERT_TRUE(Registered());
  master_.HoldReports(true);
  PutBlock("rdd_2_0");
  const uint64_t latest = link.CollectChanges();
  ASSERT_GT(latest, 0u);
  ASSERT_TRUE(master_.WaitFor([](const std::vector<SeenRequest>& seen) {
    return std::any_of(seen.begin(), seen.end(), [](const SeenRequest& r) {
      return r.kind == SeenRequest::kReport && r.Has("rdd_2_0");
    });
  }));
  EXPECT_LT(link.acked_seq(), latest);
  EXPECT_EQ(link.queued_changes(), 1u);

  master_.ReleaseHeldReports();
  ASSERT_TRUE(Pump([&] { return link.acked_seq() >= latest; }));
  EXPECT_EQ(link.queued_changes(), 0u);
}

TEST_F(MasterLinkTest, AnUnknownWorkerAnswerRegistersAgainAtOnceWithEveryBlock) {
  PutBlock("rdd_3_0");
  MasterLink& link = Link();
  ASSERT_TRUE(Registered());
  master_.ForgetWorkers();  // as a restarted master
  clock_.Advance(kHeartbeat);
  link.OnTimer();
  ASSERT_TRUE(Seen(master_, SeenRequest::kHeartbeat, 1));
  // No time passes: the unknownWorker answer itself sends the registration.
  ASSERT_TRUE(Pump([&] { return master_.CountOf(SeenRequest::kRegister) == 2; }));
  ASSERT_TRUE(Pump([&] { return link.registered() && link.registrations() == 2; }));
}

TEST_F(MasterLinkTest, AnUnansweredHeartbeatLosesTheMasterAndRegistrationFollowsTheBackOff) {
  MasterLink& link = Link();
  ASSERT_TRUE(Registered());
  master_.SetSilent(true);
  clock_.Advance(kHeartbeat);
  link.OnTimer();
  ASSERT_TRUE(Seen(master_, SeenRequest::kHeartbeat, 1));
  // A heartbeat may go unanswered for the missed heartbeats' span or the request timeout,
  // whichever is longer (1 s here).
  clock_.Advance(milliseconds(999));
  link.OnTimer();
  EXPECT_TRUE(link.registered());
  clock_.Advance(milliseconds(2));
  link.OnTimer();
  EXPECT_FALSE(link.registered());

  master_.SetSilent(false);
  EXPECT_EQ(link.NextDeadline(), clock_.Now() + kBackoff);
  clock_.Advance(kBackoff);
  ASSERT_TRUE(Registered());
  EXPECT_EQ(link.registrations(), 2u);
}

TEST_F(MasterLinkTest, RefusedRegistrationsBackOffDoublingUpToTheMaximum) {
  master_.RefuseRegistrations(true);
  MasterLink& link = Link();
  for (milliseconds expected : {kBackoff, 2 * kBackoff, 4 * kBackoff, 4 * kBackoff}) {
    link.OnTimer();
    const TimePoint now = clock_.Now();
    // The refusal is in once the next attempt is set from it (until then the registration's
    // own reply timeout, 1 s, is the next deadline).
    ASSERT_TRUE(Pump([&] { return link.NextDeadline() == now + expected; }))
        << "expected the next attempt " << expected.count() << " ms on";
    EXPECT_FALSE(link.registered());
    clock_.Advance(expected);
  }
  master_.RefuseRegistrations(false);
  ASSERT_TRUE(Registered());
  // Registered: the back-off starts over for the next loss.
  master_.SetSilent(true);
  clock_.Advance(kHeartbeat);
  link.OnTimer();
  clock_.Advance(std::chrono::seconds(1));
  link.OnTimer();
  ASSERT_FALSE(link.registered());
  EXPECT_EQ(link.NextDeadline(), clock_.Now() + kBackoff);
}

TEST_F(MasterLinkTest, AStandbysNotLeaderAnswerSendsTheRegistrationToTheLeaderAtOnce) {
  FakeMaster leader(context_);
  master_.ActAsStandbyOf(leader.endpoint());
  PutBlock("rdd_4_0");
  MasterLink& link = Link(master_.endpoint() + "," + leader.endpoint());
  link.OnTimer();
  ASSERT_TRUE(Seen(master_, SeenRequest::kRegister, 1));
  ASSERT_TRUE(Pump([&] { return link.master_address() == leader.endpoint(); }));
  // No back-off: the leader is known.
  EXPECT_EQ(link.NextDeadline(), clock_.Now());
  ASSERT_TRUE(Registered());
  ASSERT_TRUE(Seen(leader, SeenRequest::kRegister, 1));
  EXPECT_EQ(master_.CountOf(SeenRequest::kRegister), 1u);
}

}  // namespace
}  // namespace bm
