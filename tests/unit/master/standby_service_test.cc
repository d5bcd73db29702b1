#include "master/standby_service.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace bm {
namespace {

using namespace std::chrono_literals;

// The election as the test plays it.
class ScriptedElection final : public Leadership {
 public:
  LeadershipView Current() const override { return view; }
  LeadershipView view;
};

LeadershipView View(bool leader, uint64_t epoch, std::string leader_id = "",
                    std::string leader_address = "") {
  LeadershipView view;
  view.leader = leader;
  view.epoch = epoch;
  view.leader_id = std::move(leader_id);
  view.leader_address = std::move(leader_address);
  return view;
}

std::string Text(capnp::Text::Reader text) { return std::string(text.cStr(), text.size()); }

class StandbyServiceTest : public ::testing::Test {
 protected:
  StandbyServiceTest() {
    options_.master_id = "m2";
    options_.leadership = &election_;
    Result<std::unique_ptr<MasterJournal>> opened = MasterJournal::Open(state_.Sub("journal"));
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    journal_ = std::move(opened).value();
  }

  // The service, leading `epoch` (as the loop makes it once it loaded the journal).
  std::unique_ptr<StandbyService> Leader(uint64_t epoch) {
    election_.view = View(true, epoch);
    auto service = std::make_unique<StandbyService>(clock_, context_, options_, journal_.get());
    EXPECT_EQ(service->Follow(), epoch);
    service->StopFollowing(epoch);
    service->Lead(epoch);
    return service;
  }

  // A standby's fetch from `from` in `epoch`; the replies it got at once.
  std::vector<StandbyReply> Fetch(StandbyService& service, const std::string& standby,
                                  uint64_t epoch, uint64_t from, uint32_t wait_ms,
                                  Status* status = nullptr) {
    capnp::MallocMessageBuilder message;
    proto::FetchJournal::Builder fetch = message.initRoot<proto::FetchJournal>();
    fetch.setStandbyId(standby);
    fetch.setEpoch(epoch);
    fetch.setFromSequence(from);
    fetch.setWaitMs(wait_ms);
    std::vector<StandbyReply> replies;
    Status fetched = service.FetchJournal(fetch.asReader(), client_, ++request_id_, replies);
    if (status != nullptr) *status = fetched;
    EXPECT_TRUE(status != nullptr || fetched.ok()) << fetched.ToString();
    return replies;
  }

  void WriteRecord() {
    ASSERT_TRUE(journal_->RecordQuota("t" + std::to_string(++records_), TenantQuota{1, 2}).ok());
  }

  static proto::JournalBatches::Reader Batches(const StandbyReply& reply) {
    return reply.message->getRoot<proto::Reply>().asReader().getJournal();
  }

  FakeClock clock_;
  zmq::context_t context_;
  ScriptedElection election_;
  MasterOptions options_;
  testing::TempDir state_;
  std::unique_ptr<MasterJournal> journal_;
  const zmq::message_t client_{std::string_view("client")};
  uint64_t request_id_ = 0;
  int records_ = 0;
};

TEST_F(StandbyServiceTest, WithoutAnElectionItLeadsFromTheStartAndHoldsNothing) {
  options_.leadership = nullptr;
  StandbyService service(clock_, context_, options_, nullptr);
  EXPECT_TRUE(service.leading());
  EXPECT_EQ(service.Follow(), std::nullopt);
  EXPECT_EQ(service.journal_head(), 0u);
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Reply>().setOk();
  EXPECT_FALSE(service.Hold(client_, message, 1));
  Status status;
  Fetch(service, "s1", 0, 0, 0, &status);
  EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
}

TEST_F(StandbyServiceTest, StandbyAnswersNotLeaderNamingTheLeader) {
  election_.view = View(false, 3, "m1", "tcp://a:1");
  StandbyService service(clock_, context_, options_, nullptr);
  EXPECT_EQ(service.Follow(), std::nullopt);
  EXPECT_FALSE(service.leading());
  capnp::MallocMessageBuilder message;
  service.AnswerNotLeader(message.initRoot<proto::Reply>());
  proto::NotLeader::Reader not_leader = message.getRoot<proto::Reply>().asReader().getNotLeader();
  EXPECT_EQ(Text(not_leader.getLeaderAddress()), "tcp://a:1");
  EXPECT_EQ(Text(not_leader.getLeaderId()), "m1");
  EXPECT_EQ(not_leader.getEpoch(), 3u);
  EXPECT_FALSE(service.StatusRole("tcp://me:2").leader);
}

TEST_F(StandbyServiceTest, ElectedStandbyLeadsItsEpochUntilItLosesTheLead) {
  std::unique_ptr<StandbyService> service = Leader(4);
  EXPECT_TRUE(service->leading());
  EXPECT_EQ(service->epoch(), 4u);
  const MasterRole role = service->StatusRole("tcp://me:2");
  EXPECT_TRUE(role.leader);
  EXPECT_EQ(role.leader_address, "tcp://me:2");
  EXPECT_EQ(role.elections_won, 1u);
  EXPECT_FALSE(service->demoted());

  election_.view = View(false, 5, "m0", "tcp://other:1");
  EXPECT_EQ(service->Follow(), std::nullopt);
  EXPECT_TRUE(service->demoted());
}

TEST_F(StandbyServiceTest, ParkedFetchIsAnsweredWhenRecordsCome) {
  std::unique_ptr<StandbyService> service = Leader(4);
  EXPECT_TRUE(Fetch(*service, "s1", 4, 0, 500).empty()) << "nothing to send yet: parked";
  EXPECT_TRUE(service->Serve().empty());
  WriteRecord();
  EXPECT_EQ(service->journal_head(), 1u);
  std::vector<StandbyReply> replies = service->Serve();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].message->getRoot<proto::Reply>().getId(), request_id_);
  EXPECT_EQ(Batches(replies[0]).getEpoch(), 4u);
  EXPECT_EQ(Batches(replies[0]).getFirstSequence(), 0u);
  EXPECT_EQ(Batches(replies[0]).getBatchBytes().size(), 1u);
  EXPECT_FALSE(replies[0].frames.empty()) << "the batch travels as payload";
}

TEST_F(StandbyServiceTest, ParkedFetchIsAnsweredEmptyWhenItsWaitEnds) {
  std::unique_ptr<StandbyService> service = Leader(4);
  EXPECT_TRUE(Fetch(*service, "s1", 4, 0, 300).empty());
  EXPECT_EQ(service->NextWake(), clock_.Now() + 300ms);
  clock_.Advance(300ms);
  std::vector<StandbyReply> replies = service->Serve();
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(Batches(replies[0]).getBatchBytes().size(), 0u);
}

TEST_F(StandbyServiceTest, AcknowledgementWaitsUntilTheInSyncStandbyHoldsItsRecords) {
  std::unique_ptr<StandbyService> service = Leader(4);
  ASSERT_EQ(Fetch(*service, "s1", 4, 0, 0).size(), 1u) << "s1 is in sync: it holds everything";
  WriteRecord();
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Reply>().setId(77);
  ASSERT_TRUE(service->Hold(client_, message, service->journal_head()));
  EXPECT_TRUE(service->Serve().empty()) << "s1 has not fetched the record yet";

  ASSERT_EQ(Fetch(*service, "s1", 4, 1, 0).size(), 1u) << "confirms record 0";
  std::vector<StandbyReply> released = service->Serve();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].message->getRoot<proto::Reply>().getId(), 77u);
  EXPECT_EQ(std::string_view(static_cast<const char*>(released[0].client.data()),
                             released[0].client.size()),
            "client");
}

TEST_F(StandbyServiceTest, SilentStandbyStopsHoldingAcknowledgements) {
  options_.standby_timeout = 1s;
  std::unique_ptr<StandbyService> service = Leader(4);
  ASSERT_EQ(Fetch(*service, "s1", 4, 0, 0).size(), 1u);
  WriteRecord();
  capnp::MallocMessageBuilder message;
  message.initRoot<proto::Reply>().setId(78);
  ASSERT_TRUE(service->Hold(client_, message, service->journal_head()));
  clock_.Advance(1s);
  EXPECT_EQ(service->Serve().size(), 1u) << "s1 is out of sync: nothing waits for it";
}

}  // namespace
}  // namespace bm
