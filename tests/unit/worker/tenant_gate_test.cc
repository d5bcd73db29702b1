#include "worker/tenant_gate.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/core/protocol.h"
#include "tests/unit/worker/in_memory_store.h"
#include "worker/memory_store.h"

// TenantGate's transitions (worker/tenant_gate.h) one by one. The gate asks the master through a
// real MasterLink (a concrete class, no seam to fake) whose master is a ROUTER socket on loopback
// that the test itself reads and answers: a question stays pending exactly as long as the test
// holds it, and time is a FakeClock stepped through a free record's lifetime.

namespace bm {
namespace {

using std::chrono::milliseconds;
using Admission = TenantGate::Admission;

constexpr auto kAwait = std::chrono::seconds(10);  // a bound on loopback delivery, never waited out

PeerIdentity Client(const std::string& tenant) {
  PeerIdentity peer;
  peer.role = KeyRole::kClient;
  peer.name = tenant + "-key";
  peer.tenant = tenant;
  return peer;
}

DatasetAccess OwnedBy(const std::string& owner, std::vector<std::string> readers = {},
                      uint64_t generation = 1, uint64_t quota = 0) {
  return DatasetAccess{.owner = owner,
                       .readers = std::move(readers),
                       .generation = generation,
                       .owner_memory_quota = quota};
}
const DatasetAccess kFree{};

// A client request as the worker received it; its id tells resumed requests apart.
IncomingMessage Message(uint64_t id) {
  capnp::MallocMessageBuilder builder;
  builder.initRoot<proto::Request>().setId(id);
  return IncomingMessage(std::nullopt, capnp::messageToFlatArray(builder), {});
}

uint64_t IdOf(TenantGate::Resumed& resumed) { return resumed.message.request().getId(); }

// A checkAccess as the master received it.
struct Question {
  zmq::message_t routing;
  uint64_t id = 0;
  std::string dataset;
  std::string tenant;
  bool claim = false;
  uint64_t reserve_bytes = 0;
  proto::StorageLevel level = proto::StorageLevel::MEMORY_ONLY;
  std::string block;
  uint32_t copies = 0;
  uint64_t version = 0;
};

class TenantGateTest : public ::testing::Test {
 protected:
  TenantGateTest()
      : master_(context_, zmq::socket_type::router),
        blocks_(std::make_unique<MemoryStore>(1 << 20),
                std::make_unique<testing::InMemoryStore>(1 << 20)) {
    ConfigureSocket(master_);
    master_.bind("tcp://127.0.0.1:*");
    MasterLinkOptions options;
    options.master_address = master_.get(zmq::sockopt::last_endpoint);
    options.worker_id = "w1";
    options.advertised_address = "tcp://127.0.0.1:1";
    // No timer is run after registering: nothing is sent but the gate's questions.
    options.request_timeout = std::chrono::hours(1);
    link_ = std::make_unique<MasterLink>(context_, options, blocks_, clock_);
    gate_ = std::make_unique<TenantGate>(*link_, shares_, clock_);
  }

  void SetUp() override {
    link_->OnTimer();
    std::optional<IncomingMessage> registration = Receive();
    ASSERT_TRUE(registration.has_value());
    ASSERT_TRUE(registration->request().isRegisterWorker());
    Reply(
        *registration->routing_id(), registration->request().getId(),
        [](proto::Reply::Builder reply) { reply.initRegistered().setHeartbeatIntervalMs(60'000); });
    const auto give_up = std::chrono::steady_clock::now() + kAwait;
    while (!link_->registered() && std::chrono::steady_clock::now() < give_up) PollLink();
    ASSERT_TRUE(link_->registered());
  }

  // The master's side.
  std::optional<IncomingMessage> Receive() {
    zmq::pollitem_t item{master_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, kAwait) == 0) return std::nullopt;
    Result<IncomingMessage> received = ReceiveMessage(master_, /*has_routing_id=*/true);
    if (!received.ok()) return std::nullopt;
    return std::move(received).value();
  }
  template <typename Fill>
  void Reply(const zmq::message_t& routing, uint64_t id, Fill fill) {
    capnp::MallocMessageBuilder builder;
    proto::Reply::Builder reply = builder.initRoot<proto::Reply>();
    reply.setId(id);
    fill(reply);
    ASSERT_TRUE(SendMessage(master_, &routing, builder).ok());
  }
  // The next request the master received, which must be a checkAccess.
  std::optional<Question> NextQuestion() {
    std::optional<IncomingMessage> received = Receive();
    if (!received.has_value() || !received->request().isCheckAccess()) return std::nullopt;
    proto::CheckAccess::Reader check = received->request().getCheckAccess();
    const zmq::message_t& routing = *received->routing_id();
    return Question{.routing = zmq::message_t(routing.data(), routing.size()),
                    .id = received->request().getId(),
                    .dataset = check.getDataset(),
                    .tenant = check.getTenant(),
                    .claim = check.getClaim(),
                    .reserve_bytes = check.getReserveBytes(),
                    .level = check.getLevel(),
                    .block = check.getBlockId(),
                    .copies = check.getCopies(),
                    .version = check.getVersion()};
  }
  void Grant(const Question& question, const DatasetAccess& access, uint64_t reservation = 0) {
    Reply(question.routing, question.id, [&](proto::Reply::Builder reply) {
      proto::AccessReply::Builder answer = reply.initAccess();
      proto::DatasetAccessRecord::Builder record = answer.initAccess();
      record.setDataset(question.dataset);
      record.setOwner(access.owner);
      auto readers = record.initReaders(static_cast<unsigned>(access.readers.size()));
      for (size_t i = 0; i < access.readers.size(); ++i) {
        readers.set(static_cast<unsigned>(i), access.readers[i]);
      }
      record.setGeneration(access.generation);
      record.setOwnerMemoryQuota(access.owner_memory_quota);
      answer.setReservation(reservation);
    });
  }
  void Refuse(const Question& question, const Status& why) {
    Reply(question.routing, question.id,
          [&](proto::Reply::Builder reply) { SetError(reply.initError(), why); });
  }

  // The worker's side.
  void PollLink() {
    zmq::pollitem_t item{link_->socket().handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, milliseconds(10));
    link_->OnReadable();
  }
  // Reads the master's answers until `count` parked requests are resumed (fewer after kAwait).
  std::vector<TenantGate::Resumed> Resume(size_t count) {
    std::vector<TenantGate::Resumed> resumed;
    const auto give_up = std::chrono::steady_clock::now() + kAwait;
    while (resumed.size() < count && std::chrono::steady_clock::now() < give_up) {
      PollLink();
      for (TenantGate::Resumed& r : gate_->TakeResumed()) resumed.push_back(std::move(r));
    }
    return resumed;
  }

  Result<Admission> Read(const std::string& tenant, const std::vector<std::string>& datasets,
                         uint64_t id = 1) {
    IncomingMessage message = Message(id);
    return gate_->AdmitRead(Client(tenant), datasets, message);
  }
  Result<Admission> Put(const std::string& tenant, const TenantGate::PutInfo& put,
                        uint64_t id = 1) {
    IncomingMessage message = Message(id);
    return gate_->AdmitPut(Client(tenant), put, message);
  }
  static TenantGate::PutInfo Piece(uint64_t offset, const std::string& upload = "client-a/1") {
    return TenantGate::PutInfo{.upload = upload,
                               .block = BlockId::Rdd(5, 3),
                               .offset = offset,
                               .total_size = 4096,
                               .level = StorageLevel::kMemoryAndDisk,
                               .version = 77,
                               .copies = 2};
  }

  // Makes `dataset`'s record `access` the way the worker learns it first: a read parked on a
  // question the master answers.
  void Learn(const std::string& dataset, const DatasetAccess& access) {
    Result<Admission> parked = Read("asker", {dataset}, 1000);
    ASSERT_TRUE(parked.ok() && parked->parked);
    std::optional<Question> question = NextQuestion();
    ASSERT_TRUE(question.has_value());
    ASSERT_EQ(question->dataset, dataset);
    Grant(*question, access);
    ASSERT_EQ(Resume(1).size(), 1u);
  }

  // No question went to the master since the last one it took: a question about a dataset of
  // the probe's own is the next it receives (the link's one DEALER keeps order).
  void ExpectNothingAsked() {
    Result<Admission> probe = Read("probe", {"rdd_999"}, 999);
    ASSERT_TRUE(probe.ok() && probe->parked);
    std::optional<Question> next = NextQuestion();
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(next->dataset, "rdd_999");
  }

  static bool Denied(const Result<Admission>& admission) {
    return admission.status().code() == StatusCode::kPermissionDenied;
  }
  static bool AdmittedNow(const Result<Admission>& admission) {
    return admission.ok() && !admission->parked;
  }

  zmq::context_t context_;
  FakeClock clock_;
  zmq::socket_t master_;
  BlockManager blocks_;
  GuaranteedShares shares_;
  std::unique_ptr<MasterLink> link_;
  std::unique_ptr<TenantGate> gate_;
};

// ---- reads ----

TEST_F(TenantGateTest, AReadOfADatasetNotHeardOfIsParkedWhileTheMasterIsAsked) {
  Result<Admission> admission = Read("bob", {"rdd_5"});
  ASSERT_TRUE(admission.ok()) << admission.status().ToString();
  EXPECT_TRUE(admission->parked);
  EXPECT_EQ(gate_->parked(), 1u);

  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  EXPECT_EQ(question->dataset, "rdd_5");
  EXPECT_EQ(question->tenant, "bob");
  EXPECT_FALSE(question->claim);
  EXPECT_EQ(question->reserve_bytes, 0u);
  EXPECT_TRUE(gate_->TakeResumed().empty());  // nothing answered yet
}

TEST_F(TenantGateTest, TheMastersAnswerResumesTheParkedReadToBeServedAgain) {
  ASSERT_TRUE(Read("bob", {"rdd_5"}, 42).ok());
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  Grant(*question, OwnedBy("bob"));

  std::vector<TenantGate::Resumed> resumed = Resume(1);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(IdOf(resumed[0]), 42u);
  EXPECT_TRUE(resumed[0].failed.ok());
  EXPECT_EQ(gate_->parked(), 0u);
  // Served again, it is admitted from the record the answer left.
  EXPECT_TRUE(AdmittedNow(Read("bob", {"rdd_5"}, 42)));
}

TEST_F(TenantGateTest, AQuestionAskedTwiceWhileTheFirstIsPendingGoesToTheMasterOnce) {
  ASSERT_TRUE(Read("bob", {"rdd_5"}, 1).ok());
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  // Another tenant's read of the same dataset waits for the same answer.
  Result<Admission> second = Read("carol", {"rdd_5"}, 2);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->parked);
  EXPECT_EQ(gate_->parked(), 2u);
  ExpectNothingAsked();

  Grant(*question, OwnedBy("bob", {"carol"}));
  std::vector<TenantGate::Resumed> resumed = Resume(2);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(IdOf(resumed[0]), 1u);  // in arrival order
  EXPECT_EQ(IdOf(resumed[1]), 2u);
  EXPECT_TRUE(resumed[0].failed.ok());
  EXPECT_TRUE(resumed[1].failed.ok());
  EXPECT_EQ(gate_->parked(), 1u);  // the probe's, still unanswered
}

TEST_F(TenantGateTest, AResumedReadIsCheckedAgainstTheAnswerWhenAdmittedAgain) {
  ASSERT_TRUE(Read("bob", {"rdd_5"}).ok());
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  Grant(*question, OwnedBy("alice"));
  std::vector<TenantGate::Resumed> resumed = Resume(1);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_TRUE(resumed[0].failed.ok());  // the answer is not the refusal: the record is
  EXPECT_TRUE(Denied(Read("bob", {"rdd_5"})));
}

TEST_F(TenantGateTest, AReadOfADatasetTheTenantOwnsIsAdmittedFromTheRecordWithoutAsking) {
  Learn("rdd_5", OwnedBy("bob"));
  Result<Admission> admission = Read("bob", {"rdd_5"});
  ASSERT_TRUE(admission.ok());
  EXPECT_FALSE(admission->parked);
  EXPECT_EQ(admission->reservation, 0u);
  EXPECT_EQ(gate_->parked(), 0u);
  ExpectNothingAsked();
}

TEST_F(TenantGateTest, AReadOfADatasetSharedWithTheTenantIsAdmitted) {
  Learn("rdd_5", OwnedBy("alice", {"bob"}));
  EXPECT_TRUE(AdmittedNow(Read("bob", {"rdd_5"})));
}

TEST_F(TenantGateTest, AReadOfAnotherTenantsDatasetIsRefusedWithoutAsking) {
  Learn("rdd_5", OwnedBy("alice", {"carol"}));
  Result<Admission> admission = Read("bob", {"rdd_5"});
  EXPECT_TRUE(Denied(admission)) << admission.status().ToString();
  EXPECT_EQ(gate_->parked(), 0u);
  ExpectNothingAsked();
}

TEST_F(TenantGateTest, AReadOfAFreeDatasetIsAdmitted) {
  Learn("rdd_5", kFree);
  EXPECT_TRUE(AdmittedNow(Read("bob", {"rdd_5"})));
}

TEST_F(TenantGateTest, AReadOfSeveralDatasetsIsParkedOnTheFirstNotHeardOfAndAsksOnlyAboutIt) {
  Learn("rdd_1", OwnedBy("bob"));
  ASSERT_TRUE(Read("bob", {"rdd_1", "rdd_2", "rdd_3"}).ok());
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  EXPECT_EQ(question->dataset, "rdd_2");
  ExpectNothingAsked();

  Grant(*question, OwnedBy("bob"));
  ASSERT_EQ(Resume(1).size(), 1u);
  // Served again: now it parks on the next one.
  Result<Admission> again = Read("bob", {"rdd_1", "rdd_2", "rdd_3"});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->parked);
  std::optional<Question> next = NextQuestion();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->dataset, "rdd_3");
}

TEST_F(TenantGateTest, AReadRefusedOnAnEarlierDatasetIsNeitherParkedNorAskedAboutALaterOne) {
  Learn("rdd_1", OwnedBy("alice"));
  EXPECT_TRUE(Denied(Read("bob", {"rdd_1", "rdd_2"})));
  EXPECT_EQ(gate_->parked(), 0u);
  ExpectNothingAsked();
}

TEST_F(TenantGateTest, TheMastersRefusalIsHandedToEveryReadParkedOnTheQuestion) {
  ASSERT_TRUE(Read("bob", {"rdd_5"}, 1).ok());
  ASSERT_TRUE(Read("bob", {"rdd_5"}, 2).ok());
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  Refuse(*question, UnavailableError("the master is starting up"));

  std::vector<TenantGate::Resumed> resumed = Resume(2);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(IdOf(resumed[0]), 1u);
  EXPECT_EQ(IdOf(resumed[1]), 2u);
  EXPECT_EQ(resumed[0].failed.code(), StatusCode::kUnavailable);
  EXPECT_EQ(resumed[1].failed.code(), StatusCode::kUnavailable);
  EXPECT_EQ(gate_->parked(), 0u);
  // No record came of it: the next read asks again.
  Result<Admission> again = Read("bob", {"rdd_5"}, 3);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->parked);
  std::optional<Question> next = NextQuestion();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->dataset, "rdd_5");
}

TEST_F(TenantGateTest, AnOwnedDatasetsRecordIsKeptHoweverLongAgoItCame) {
  Learn("rdd_5", OwnedBy("bob"));
  clock_.Advance(std::chrono::hours(24));
  EXPECT_TRUE(AdmittedNow(Read("bob", {"rdd_5"})));
  ExpectNothingAsked();
}

TEST_F(TenantGateTest, AFreeDatasetsRecordLapsesAfterItsLifetimeAndTheMasterIsAskedAgain) {
  Learn("rdd_5", kFree);
  clock_.Advance(TenantGate::kFreeRecordLifetime - milliseconds(1));
  EXPECT_TRUE(AdmittedNow(Read("bob", {"rdd_5"})));

  clock_.Advance(milliseconds(1));
  Result<Admission> lapsed = Read("bob", {"rdd_5"});
  ASSERT_TRUE(lapsed.ok());
  EXPECT_TRUE(lapsed->parked);
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  EXPECT_EQ(question->dataset, "rdd_5");
}

TEST_F(TenantGateTest, ForgettingAllRecordsMakesEveryDatasetBeAskedAgain) {
  Learn("rdd_5", OwnedBy("bob"));
  gate_->ForgetAll();
  Result<Admission> admission = Read("bob", {"rdd_5"});
  ASSERT_TRUE(admission.ok());
  EXPECT_TRUE(admission->parked);
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  EXPECT_EQ(question->dataset, "rdd_5");
}

TEST_F(TenantGateTest, AReadOrPutWhileTheWorkerIsNotRegisteredFailsUnavailableAndIsNotParked) {
  // A link of its own that never registers (its timer is never run).
  MasterLinkOptions options;
  options.master_address = "tcp://127.0.0.1:1";
  options.worker_id = "w2";
  options.advertised_address = "tcp://127.0.0.1:2";
  MasterLink unregistered(context_, options, blocks_, clock_);
  TenantGate gate(unregistered, shares_, clock_);
  const TenantGate::PutInfo first{.upload = "u", .block = BlockId::Rdd(5, 0), .total_size = 16};

  for (int attempt = 0; attempt < 2; ++attempt) {  // the failed one left no question behind
    IncomingMessage read = Message(1);
    EXPECT_EQ(gate.AdmitRead(Client("bob"), {"rdd_5"}, read).status().code(),
              StatusCode::kUnavailable);
    IncomingMessage put = Message(2);
    EXPECT_EQ(gate.AdmitPut(Client("bob"), first, put).status().code(), StatusCode::kUnavailable);
  }
  // A later piece of the failed put does not wait behind a question that was never sent.
  TenantGate::PutInfo later_piece = first;
  later_piece.offset = 8;
  IncomingMessage later = Message(3);
  Result<Admission> piece = gate.AdmitPut(Client("bob"), later_piece, later);
  ASSERT_TRUE(piece.ok());
  EXPECT_FALSE(piece->parked);
  EXPECT_EQ(gate.parked(), 0u);
}

// ---- datasetAccess updates ----

TEST_F(TenantGateTest, ADatasetAccessUpdateAloneMakesADatasetKnown) {
  gate_->Update("rdd_5", OwnedBy("bob"));
  EXPECT_TRUE(AdmittedNow(Read("bob", {"rdd_5"})));
  EXPECT_TRUE(Denied(Read("carol", {"rdd_5"})));
  ExpectNothingAsked();
}

TEST_F(TenantGateTest, ANewerDatasetAccessUpdateReplacesTheRecordHeld) {
  Learn("rdd_5", OwnedBy("alice", {}, 1));
  EXPECT_TRUE(Denied(Read("bob", {"rdd_5"})));
  gate_->Update("rdd_5", OwnedBy("alice", {"bob"}, 2));  // shared
  EXPECT_TRUE(AdmittedNow(Read("bob", {"rdd_5"})));
  gate_->Update("rdd_5", OwnedBy("alice", {}, 3));  // unshared
  EXPECT_TRUE(Denied(Read("bob", {"rdd_5"})));
}

TEST_F(TenantGateTest, AnUpdateOlderThanTheRecordHeldIsIgnored) {
  gate_->Update("rdd_5", OwnedBy("alice", {"bob"}, 5));
  gate_->Update("rdd_5", OwnedBy("alice", {}, 4));
  EXPECT_TRUE(AdmittedNow(Read("bob", {"rdd_5"})));
}

TEST_F(TenantGateTest, AnAnswerOlderThanAnUpdateHeardWhileItWasPendingIsIgnoredQuotaIncluded) {
  const BlockId victim = BlockId::Rdd(5, 0);
  const BlockId for_other = BlockId::Rdd(9, 0);
  ASSERT_TRUE(Read("bob", {"rdd_5"}).ok());
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  gate_->Update("rdd_5", OwnedBy("alice", {"bob"}, 5, /*quota=*/1 << 20));
  Grant(*question, OwnedBy("alice", {}, 4, /*quota=*/0));
  ASSERT_EQ(Resume(1).size(), 1u);

  EXPECT_TRUE(AdmittedNow(Read("bob", {"rdd_5"})));   // still shared, as generation 5 says
  EXPECT_FALSE(shares_.MayEvict(victim, for_other));  // still guaranteed
}

TEST_F(TenantGateTest, EveryOwnerHeardOfIsToldToTheGuaranteedShares) {
  const BlockId answered = BlockId::Rdd(5, 0);
  const BlockId updated = BlockId::Rdd(6, 0);
  const BlockId unknown = BlockId::Rdd(9, 0);
  ASSERT_TRUE(shares_.MayEvict(answered, unknown));
  ASSERT_TRUE(shares_.MayEvict(updated, unknown));

  Learn("rdd_5", OwnedBy("alice", {}, 1, /*quota=*/1 << 20));
  gate_->Update("rdd_6", OwnedBy("carol", {}, 1, /*quota=*/1 << 20));
  EXPECT_FALSE(shares_.MayEvict(answered, unknown));
  EXPECT_FALSE(shares_.MayEvict(updated, unknown));
  EXPECT_TRUE(shares_.MayEvict(answered, BlockId::Rdd(5, 1)));  // its owner's own put
}

// ---- same-host reads: CheckKnown ----

TEST_F(TenantGateTest, CheckKnownAnswersAbortedForADatasetNotHeardOfAndAsksNothing) {
  Status status = gate_->CheckKnown(Client("bob"), "rdd_5", DatasetOp::kRead);
  EXPECT_EQ(status.code(), StatusCode::kAborted);
  EXPECT_EQ(gate_->parked(), 0u);
  ExpectNothingAsked();
}

TEST_F(TenantGateTest, CheckKnownChecksEachOpAgainstTheRecordHeld) {
  Learn("rdd_5", OwnedBy("alice", {"bob"}));
  EXPECT_TRUE(gate_->CheckKnown(Client("bob"), "rdd_5", DatasetOp::kRead).ok());
  EXPECT_EQ(gate_->CheckKnown(Client("bob"), "rdd_5", DatasetOp::kWrite).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(gate_->CheckKnown(Client("bob"), "rdd_5", DatasetOp::kRemove).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(gate_->CheckKnown(Client("carol"), "rdd_5", DatasetOp::kRead).code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(gate_->CheckKnown(Client("alice"), "rdd_5", DatasetOp::kRemove).ok());
}

TEST_F(TenantGateTest, CheckKnownTreatsALapsedFreeRecordAsNotHeardOf) {
  Learn("rdd_5", kFree);
  EXPECT_TRUE(gate_->CheckKnown(Client("bob"), "rdd_5", DatasetOp::kWrite).ok());
  clock_.Advance(TenantGate::kFreeRecordLifetime);
  EXPECT_EQ(gate_->CheckKnown(Client("bob"), "rdd_5", DatasetOp::kRead).code(),
            StatusCode::kAborted);
}

// ---- puts ----

TEST_F(TenantGateTest, APutsFirstPieceIsParkedAndAsksTheMasterToClaimAndReserveForAllItsCopies) {
  Result<Admission> admission = Put("bob", Piece(0));
  ASSERT_TRUE(admission.ok()) << admission.status().ToString();
  EXPECT_TRUE(admission->parked);
  EXPECT_EQ(gate_->parked(), 1u);

  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  EXPECT_EQ(question->dataset, "rdd_5");
  EXPECT_EQ(question->tenant, "bob");
  EXPECT_TRUE(question->claim);
  EXPECT_EQ(question->reserve_bytes, 4096u);
  EXPECT_EQ(question->level, proto::StorageLevel::MEMORY_AND_DISK);
  EXPECT_EQ(question->block, "rdd_5_3");
  EXPECT_EQ(question->copies, 2u);
  EXPECT_EQ(question->version, 77u);
}

TEST_F(TenantGateTest, TheFirstPieceServedAgainCarriesTheMastersReservation) {
  ASSERT_TRUE(Put("bob", Piece(0), 7).ok());
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  Grant(*question, OwnedBy("bob"), /*reservation=*/8192);

  std::vector<TenantGate::Resumed> resumed = Resume(1);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(IdOf(resumed[0]), 7u);
  EXPECT_TRUE(resumed[0].failed.ok());
  Result<Admission> again = Put("bob", Piece(0), 7);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(again->parked);
  EXPECT_EQ(again->reservation, 8192u);
  // The answer's record serves reads too.
  EXPECT_TRUE(AdmittedNow(Read("bob", {"rdd_5"})));
  EXPECT_TRUE(Denied(Read("carol", {"rdd_5"})));
}

TEST_F(TenantGateTest, LaterPiecesWaitBehindTheFirstPiecesQuestionAndResumeInArrivalOrder) {
  ASSERT_TRUE(Put("bob", Piece(0), 1).ok());
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  for (uint64_t id : {2, 3}) {
    Result<Admission> later = Put("bob", Piece(1024 * (id - 1)), id);
    ASSERT_TRUE(later.ok());
    EXPECT_TRUE(later->parked);
  }
  EXPECT_EQ(gate_->parked(), 3u);
  ExpectNothingAsked();

  Grant(*question, OwnedBy("bob"), /*reservation=*/4096);
  std::vector<TenantGate::Resumed> resumed = Resume(3);
  ASSERT_EQ(resumed.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(IdOf(resumed[i]), i + 1);
    EXPECT_TRUE(resumed[i].failed.ok());
  }
  // Served again: the first piece takes the reservation, the later ones pass.
  Result<Admission> first = Put("bob", Piece(0), 1);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->reservation, 4096u);
  Result<Admission> later = Put("bob", Piece(1024), 2);
  ASSERT_TRUE(later.ok());
  EXPECT_FALSE(later->parked);
  EXPECT_EQ(later->reservation, 0u);
}

TEST_F(TenantGateTest, APieceAfterTheFirstWithNoQuestionOutPassesWithoutAsking) {
  Result<Admission> admission = Put("bob", Piece(1024));
  ASSERT_TRUE(admission.ok());
  EXPECT_FALSE(admission->parked);
  EXPECT_EQ(admission->reservation, 0u);
  ExpectNothingAsked();
}

TEST_F(TenantGateTest, TheMastersRefusalFailsTheFirstPieceWhenItIsServedAgain) {
  ASSERT_TRUE(Put("bob", Piece(0), 1).ok());
  ASSERT_TRUE(Put("bob", Piece(1024), 2).ok());
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  Refuse(*question, OutOfSpaceError("quota exceeded"));

  // Both come back to be served again; the refusal is the first piece's admission.
  std::vector<TenantGate::Resumed> resumed = Resume(2);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_TRUE(resumed[0].failed.ok());
  EXPECT_TRUE(resumed[1].failed.ok());
  Result<Admission> first = Put("bob", Piece(0), 1);
  EXPECT_TRUE(IsQuotaExceeded(first.status())) << first.status().ToString();
}

TEST_F(TenantGateTest, AGrantNamingAnotherOwnerFailsTheFirstPieceAndTheRecordIsKept) {
  ASSERT_TRUE(Put("bob", Piece(0)).ok());
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  Grant(*question, OwnedBy("alice"));  // claimed by alice's put on another worker first
  ASSERT_EQ(Resume(1).size(), 1u);

  EXPECT_TRUE(Denied(Put("bob", Piece(0))));
  EXPECT_TRUE(Denied(Read("bob", {"rdd_5"})));
  EXPECT_TRUE(AdmittedNow(Read("alice", {"rdd_5"})));
}

TEST_F(TenantGateTest, APutIntoAnotherTenantsKnownDatasetIsRefusedWithoutAsking) {
  Learn("rdd_5", OwnedBy("alice"));
  EXPECT_TRUE(Denied(Put("bob", Piece(0))));
  EXPECT_EQ(gate_->parked(), 0u);
  ExpectNothingAsked();
}

TEST_F(TenantGateTest, APutByATenantTheDatasetIsSharedWithReadOnlyIsRefused) {
  Learn("rdd_5", OwnedBy("alice", {"bob"}));
  Result<Admission> admission = Put("bob", Piece(0));
  EXPECT_TRUE(Denied(admission));
  EXPECT_NE(admission.status().message().find("read-only"), std::string::npos)
      << admission.status().ToString();
}

TEST_F(TenantGateTest, APutIntoADatasetTheTenantOwnsStillAsksForItsReservation) {
  Learn("rdd_5", OwnedBy("bob"));
  Result<Admission> admission = Put("bob", Piece(0));
  ASSERT_TRUE(admission.ok());
  EXPECT_TRUE(admission->parked);
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  EXPECT_TRUE(question->claim);
  EXPECT_EQ(question->reserve_bytes, 4096u);
}

TEST_F(TenantGateTest, APutIntoADatasetKnownToBeFreeStillAsksToClaimIt) {
  Learn("rdd_5", kFree);
  Result<Admission> admission = Put("bob", Piece(0));
  ASSERT_TRUE(admission.ok());
  EXPECT_TRUE(admission->parked);
  std::optional<Question> question = NextQuestion();
  ASSERT_TRUE(question.has_value());
  EXPECT_EQ(question->dataset, "rdd_5");
  EXPECT_TRUE(question->claim);
}

TEST_F(TenantGateTest, AReadAndAPutOfOneDatasetEachAskTheirOwnQuestion) {
  ASSERT_TRUE(Read("bob", {"rdd_5"}, 1).ok());
  std::optional<Question> read_question = NextQuestion();
  ASSERT_TRUE(read_question.has_value());
  ASSERT_TRUE(Put("bob", Piece(0), 2).ok());
  std::optional<Question> put_question = NextQuestion();
  ASSERT_TRUE(put_question.has_value());
  EXPECT_FALSE(read_question->claim);
  EXPECT_TRUE(put_question->claim);
  EXPECT_EQ(put_question->dataset, read_question->dataset);

  // The put's answer resumes the put only.
  Grant(*put_question, OwnedBy("bob"), 4096);
  std::vector<TenantGate::Resumed> resumed = Resume(1);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(IdOf(resumed[0]), 2u);
  EXPECT_EQ(gate_->parked(), 1u);
  Grant(*read_question, OwnedBy("bob"));
  resumed = Resume(1);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(IdOf(resumed[0]), 1u);
  EXPECT_EQ(gate_->parked(), 0u);
}

TEST_F(TenantGateTest, TwoUploadsIntoOneDatasetEachAskTheirOwnQuestion) {
  ASSERT_TRUE(Put("bob", Piece(0, "client-a/1"), 1).ok());
  ASSERT_TRUE(Put("bob", Piece(0, "client-b/1"), 2).ok());
  std::optional<Question> first = NextQuestion();
  std::optional<Question> second = NextQuestion();
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(second.has_value());
  Grant(*second, OwnedBy("bob"), 100);
  Grant(*first, OwnedBy("bob"), 200);
  ASSERT_EQ(Resume(2).size(), 2u);
  Result<Admission> a = Put("bob", Piece(0, "client-a/1"), 1);
  Result<Admission> b = Put("bob", Piece(0, "client-b/1"), 2);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->reservation, 200u);
  EXPECT_EQ(b->reservation, 100u);
}

}  // namespace
}  // namespace bm
