// MasterClient's transitions (client/master_client.h) one by one, against fake masters on
// loopback sockets: a call answered, a standby's notLeader followed, a master that does not
// answer (or is gone) moved on from, the retries while no master leads and their bound
// (leader_wait), the extra time a call may ask for, and the decoding of the replies (batches,
// pages, wrong answers). MasterClient takes no Clock: the timeouts here are real, and short.

#include "client/master_client.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "common/core/protocol.h"
#include "common/net/transport.h"
#include "common/zookeeper/leader_directory.h"

namespace bm {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

// How a fake master answers its `nth` request (0 = its first): fills `reply`, or returns false
// to leave the request unanswered (a hung master).
using Answer =
    std::function<bool(proto::Request::Reader request, proto::Reply::Builder reply, size_t nth)>;

Answer AnswerOk() {
  return [](proto::Request::Reader, proto::Reply::Builder reply, size_t) {
    reply.setOk();
    return true;
  };
}
Answer AnswerNotLeader(std::string leader, uint64_t epoch = 0) {
  return [leader, epoch](proto::Request::Reader, proto::Reply::Builder reply, size_t) {
    proto::NotLeader::Builder not_leader = reply.initNotLeader();
    not_leader.setLeaderAddress(leader);
    not_leader.setEpoch(epoch);
    return true;
  };
}
Answer AnswerNothing() {
  return [](proto::Request::Reader, proto::Reply::Builder, size_t) { return false; };
}
Answer AnswerError(Status status) {
  return [status](proto::Request::Reader, proto::Reply::Builder reply, size_t) {
    SetError(reply.initError(), status);
    return true;
  };
}

// A master on a loopback port: answers each request with its Answer (on its own thread) and
// keeps one line per request it received ("ping", "listBlocks after=rdd_1_1 limit=2", ...).
class FakeMaster {
 public:
  explicit FakeMaster(zmq::context_t& context, Answer answer = AnswerOk())
      : socket_(context, zmq::socket_type::router), answer_(std::move(answer)) {
    ConfigureSocket(socket_);
    socket_.bind("tcp://127.0.0.1:*");
    endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FakeMaster() {
    stop_ = true;
    thread_.join();
  }

  const std::string& endpoint() const { return endpoint_; }
  void SetAnswer(Answer answer) {
    std::lock_guard lock(mutex_);
    answer_ = std::move(answer);
  }
  // Each answer leaves this long after its request came (a slow master).
  void SetDelay(milliseconds delay) {
    std::lock_guard lock(mutex_);
    delay_ = delay;
  }
  std::vector<std::string> seen() const {
    std::lock_guard lock(mutex_);
    return seen_;
  }
  size_t count() const { return seen().size(); }

 private:
  static std::string Describe(proto::Request::Reader request) {
    switch (request.which()) {
      case proto::Request::PING:
        return "ping";
      case proto::Request::MASTER_INFO:
        return "masterInfo";
      case proto::Request::LIST_WORKERS:
        return "listWorkers";
      case proto::Request::GET_LOCATIONS:
        return "getLocations " + std::to_string(request.getGetLocations().getBlockIds().size());
      case proto::Request::REMOVE_BLOCKS:
        return "removeBlocks " + std::to_string(request.getRemoveBlocks().getBlockIds().size());
      case proto::Request::LIST_RDD_PAGE:
        return "listRddPage startAt=" + std::to_string(request.getListRddPage().getStartAt());
      case proto::Request::LIST_BLOCKS: {
        proto::ListBlocks::Reader list = request.getListBlocks();
        std::string out = "listBlocks";
        if (list.isRddId()) out += " rdd=" + std::to_string(list.getRddId());
        return out + " after=" + std::string(list.getAfter().cStr()) +
               " limit=" + std::to_string(list.getLimit());
      }
      default:
        return "other";
    }
  }

  void Loop() {
    while (!stop_) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, milliseconds(5));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      Result<IncomingMessage> request = ReceiveMessage(socket_, /*has_routing_id=*/true);
      if (!request.ok()) continue;
      capnp::MallocMessageBuilder message;
      proto::Reply::Builder reply = message.initRoot<proto::Reply>();
      reply.setId(request->request().getId());
      bool answer = false;
      milliseconds delay{};
      {
        std::lock_guard lock(mutex_);
        const size_t nth = seen_.size();
        seen_.push_back(Describe(request->request()));
        answer = answer_(request->request(), reply, nth);
        delay = delay_;
      }
      if (!answer) continue;
      if (delay > milliseconds(0)) std::this_thread::sleep_for(delay);  // the slowness itself
      (void)SendMessage(socket_, &*request->routing_id(), message);
    }
  }

  zmq::socket_t socket_;  // used by thread_ only after construction
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  Answer answer_;                  // guarded by mutex_
  milliseconds delay_{};           // guarded by mutex_
  std::vector<std::string> seen_;  // guarded by mutex_
  std::thread thread_;
};

// A loopback address nothing listens on (a port bound, then let go).
std::string ClosedLoopbackAddress(zmq::context_t& context) {
  zmq::socket_t socket(context, zmq::socket_type::router);
  ConfigureSocket(socket);
  socket.bind("tcp://127.0.0.1:*");
  return socket.get(zmq::sockopt::last_endpoint);
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

milliseconds Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
}

class MasterClientTest : public ::testing::Test {
 protected:
  std::unique_ptr<MasterClient> Connect(const std::string& addresses, milliseconds timeout = 2000ms,
                                        milliseconds leader_wait = 5s,
                                        Result<std::shared_ptr<const LeaderDirectory>> directory =
                                            std::shared_ptr<const LeaderDirectory>()) {
    return std::make_unique<MasterClient>(context_, addresses, timeout, ChannelSecurity{},
                                          leader_wait, std::move(directory));
  }

  zmq::context_t context_{1};
};

// ---- One master ----

TEST_F(MasterClientTest, ACallIsSentToTheOneMasterGivenAndItsAnswerReturned) {
  FakeMaster master(context_);
  auto client = Connect(master.endpoint());
  EXPECT_TRUE(client->Ping().ok());
  EXPECT_TRUE(client->Ping().ok());
  EXPECT_EQ(master.seen(), (std::vector<std::string>{"ping", "ping"}));
}

TEST_F(MasterClientTest, KeysThatCouldNotBeReadFailEveryCallWithTheirErrorAndSendNothing) {
  FakeMaster master(context_);
  MasterClient client(context_, master.endpoint(), 2000ms,
                      Result<ChannelSecurity>(PermissionDeniedError("no key file master.key")));
  Status pinged = client.Ping();
  EXPECT_EQ(pinged.code(), StatusCode::kPermissionDenied) << pinged.ToString();
  EXPECT_TRUE(Contains(pinged.message(), "no key file master.key")) << pinged.ToString();
  EXPECT_EQ(client.Workers().status().code(), StatusCode::kPermissionDenied);
  // masterInfo too is asked with the keys: every master is listed with the error.
  std::vector<MasterInfo> masters = client.Masters();
  ASSERT_EQ(masters.size(), 1u);
  EXPECT_EQ(masters[0].address, master.endpoint());
  EXPECT_TRUE(Contains(masters[0].error, "no key file master.key")) << masters[0].error;
  EXPECT_EQ(master.count(), 0u);
}

TEST_F(MasterClientTest, AnAddressListWithAnEmptyEntryFailsEveryCallAsInvalid) {
  auto client = Connect("tcp://127.0.0.1:7700,,tcp://127.0.0.1:7701");
  Status pinged = client->Ping();
  EXPECT_EQ(pinged.code(), StatusCode::kInvalidArgument) << pinged.ToString();
  EXPECT_TRUE(Contains(pinged.message(), "empty entry")) << pinged.ToString();
  std::vector<MasterInfo> masters = client->Masters();
  ASSERT_EQ(masters.size(), 1u);
  EXPECT_TRUE(Contains(masters[0].error, "empty entry")) << masters[0].error;
}

TEST_F(MasterClientTest, AnAddressZeroMqCannotUseFailsTheCallAtOnceWithoutTryingTheNext) {
  FakeMaster next(context_);
  auto client = Connect("nonsense://x," + next.endpoint());
  Status pinged = client->Ping();
  EXPECT_EQ(pinged.code(), StatusCode::kInvalidArgument) << pinged.ToString();
  EXPECT_TRUE(Contains(pinged.message(), "cannot connect to 'nonsense://x'")) << pinged.ToString();
  EXPECT_EQ(next.count(), 0u);
}

TEST_F(MasterClientTest, WithOneMasterOneThatDoesNotAnswerFailsTheCallAtOnceWithoutRetrying) {
  FakeMaster master(context_, AnswerNothing());
  auto client = Connect(master.endpoint(), /*timeout=*/100ms, /*leader_wait=*/10s);
  const auto start = std::chrono::steady_clock::now();
  Status pinged = client->Ping();
  EXPECT_EQ(pinged.code(), StatusCode::kUnavailable) << pinged.ToString();
  EXPECT_TRUE(Contains(pinged.message(), "master unreachable")) << pinged.ToString();
  EXPECT_EQ(master.count(), 1u);
  EXPECT_LT(Since(start), 5s);  // leader_wait is not waited out
}

TEST_F(MasterClientTest, AnErrorAnswerIsTheCallsResultAndNoOtherMasterIsAsked) {
  FakeMaster first(context_, AnswerError(NotFoundError("no such rdd 9")));
  FakeMaster second(context_);
  auto client = Connect(first.endpoint() + "," + second.endpoint());
  Status removed = client->RegisterRdd(9, "nine", StorageLevel::kMemoryOnly, 1);
  EXPECT_EQ(removed.code(), StatusCode::kNotFound) << removed.ToString();
  EXPECT_TRUE(Contains(removed.message(), "no such rdd 9")) << removed.ToString();
  EXPECT_EQ(first.count(), 1u);
  EXPECT_EQ(second.count(), 0u);
}

TEST_F(MasterClientTest, ARemovalsExtraTimeLetsInASlowAnswerThatTimesOutAPing) {
  FakeMaster master(context_,
                    [](proto::Request::Reader request, proto::Reply::Builder reply, size_t) {
                      if (request.isRemoveBlocks()) {
                        reply.setRemoved(request.getRemoveBlocks().getBlockIds().size());
                      } else {
                        reply.setOk();
                      }
                      return true;
                    });
  master.SetDelay(300ms);
  auto client = Connect(master.endpoint(), /*timeout=*/100ms);
  Status pinged = client->Ping();
  EXPECT_EQ(pinged.code(), StatusCode::kUnavailable) << pinged.ToString();
  EXPECT_TRUE(Contains(pinged.message(), "within 100 ms")) << pinged.ToString();
  // A removal waits for the workers: it has seconds more than the 100 ms.
  Result<uint64_t> removed = client->Remove({BlockId::Rdd(1, 0), BlockId::Rdd(1, 1)});
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 2u);
  EXPECT_EQ(master.seen(), (std::vector<std::string>{"ping", "removeBlocks 2"}));
}

// ---- Standbys and notLeader ----

TEST_F(MasterClientTest, ANotLeaderAnswerSendsTheCallToTheLeaderItNames) {
  FakeMaster leader(context_);
  FakeMaster standby(context_, AnswerNotLeader(leader.endpoint(), 4));
  auto client = Connect(standby.endpoint());  // the leader is not among the addresses given
  EXPECT_TRUE(client->Ping().ok());
  EXPECT_EQ(standby.seen(), std::vector<std::string>{"ping"});
  EXPECT_EQ(leader.seen(), std::vector<std::string>{"ping"});
}

TEST_F(MasterClientTest, CallsAfterARedirectGoStraightToTheLeaderFound) {
  FakeMaster leader(context_);
  FakeMaster standby(context_, AnswerNotLeader(leader.endpoint(), 4));
  auto client = Connect(standby.endpoint());
  ASSERT_TRUE(client->Ping().ok());
  EXPECT_TRUE(client->Ping().ok());
  EXPECT_TRUE(client->Ping().ok());
  EXPECT_EQ(standby.count(), 1u);
  EXPECT_EQ(leader.count(), 3u);
}

TEST_F(MasterClientTest, AStandbyThatKnowsNoLeaderYetIsAskedAgainUntilItNamesOne) {
  FakeMaster leader(context_);
  const std::string leader_address = leader.endpoint();
  FakeMaster standby(
      context_, [leader_address](proto::Request::Reader, proto::Reply::Builder reply, size_t nth) {
        // An election under way: no leader known for its first two answers.
        reply.initNotLeader().setLeaderAddress(nth < 2 ? "" : leader_address);
        return true;
      });
  auto client = Connect(standby.endpoint(), 2000ms, /*leader_wait=*/5s);
  EXPECT_TRUE(client->Ping().ok());
  EXPECT_EQ(standby.count(), 3u);
  EXPECT_EQ(leader.count(), 1u);
}

TEST_F(MasterClientTest, WhileNoMasterLeadsACallFailsUnavailableOnceLeaderWaitIsOver) {
  FakeMaster standby(context_, AnswerNotLeader(""));
  constexpr milliseconds kLeaderWait{300};
  auto client = Connect(standby.endpoint(), 2000ms, kLeaderWait);
  const auto start = std::chrono::steady_clock::now();
  Status pinged = client->Ping();
  const milliseconds took = Since(start);
  EXPECT_EQ(pinged.code(), StatusCode::kUnavailable) << pinged.ToString();
  EXPECT_TRUE(
      Contains(pinged.message(), "no master leads among " + standby.endpoint() + " after 300 ms"))
      << pinged.ToString();
  EXPECT_TRUE(Contains(pinged.message(), "is a standby and knows no leader yet"))
      << pinged.ToString();
  EXPECT_GE(standby.count(), 2u);  // asked again, not given up after the first answer
  // Gives up when less than the 50 ms pause between rounds is left.
  EXPECT_GE(took, kLeaderWait - 50ms);
}

TEST_F(MasterClientTest, ANotLeaderAnswerNamingTheMasterItselfMovesOnToTheNextMaster) {
  FakeMaster stale(context_);
  stale.SetAnswer(AnswerNotLeader(stale.endpoint(), 2));  // says it leads, yet answers notLeader
  FakeMaster leader(context_);
  auto client = Connect(stale.endpoint() + "," + leader.endpoint());
  EXPECT_TRUE(client->Ping().ok());
  EXPECT_EQ(stale.count(), 1u);
  EXPECT_EQ(leader.count(), 1u);
}

TEST_F(MasterClientTest, AfterARedirectALeaderThatDoesNotAnswerIsRetriedUntilLeaderWait) {
  FakeMaster leader(context_, AnswerNothing());
  FakeMaster standby(context_, AnswerNotLeader(leader.endpoint(), 3));
  // One address given: without the redirect a failure would be returned at once.
  auto client = Connect(standby.endpoint(), /*timeout=*/200ms, /*leader_wait=*/900ms);
  Status pinged = client->Ping();
  EXPECT_EQ(pinged.code(), StatusCode::kUnavailable) << pinged.ToString();
  // The leader named is added to the masters tried.
  EXPECT_TRUE(Contains(pinged.message(),
                       "no master leads among " + standby.endpoint() + "," + leader.endpoint()))
      << pinged.ToString();
  EXPECT_GE(leader.count(), 2u);
  EXPECT_GE(standby.count(), 2u);
}

// ---- Several masters: moving on from one that does not answer ----

TEST_F(MasterClientTest, AMasterThatDoesNotAnswerIsLeftForTheNextAndLaterCallsStayThere) {
  FakeMaster hung(context_, AnswerNothing());
  FakeMaster leader(context_);
  auto client = Connect(hung.endpoint() + "," + leader.endpoint(), /*timeout=*/250ms);
  EXPECT_TRUE(client->Ping().ok());
  EXPECT_TRUE(client->Ping().ok());
  EXPECT_EQ(hung.count(), 1u);
  EXPECT_EQ(leader.count(), 2u);
}

TEST_F(MasterClientTest, AMasterNothingListensAtIsLeftForTheNext) {
  FakeMaster leader(context_);
  auto client =
      Connect(ClosedLoopbackAddress(context_) + "," + leader.endpoint(), /*timeout=*/250ms);
  EXPECT_TRUE(client->Ping().ok());
  EXPECT_EQ(leader.count(), 1u);
}

TEST_F(MasterClientTest, WhenTheLeaderIsGoneTheNextCallFindsTheMasterThatNowLeads) {
  auto old_leader = std::make_unique<FakeMaster>(context_);
  FakeMaster standby(context_, AnswerNotLeader(old_leader->endpoint(), 1));
  auto client = Connect(old_leader->endpoint() + "," + standby.endpoint(), /*timeout=*/250ms);
  ASSERT_TRUE(client->Ping().ok());
  ASSERT_EQ(old_leader->count(), 1u);
  // Failover: the old leader's process is gone, the standby leads.
  old_leader.reset();
  standby.SetAnswer(AnswerOk());
  EXPECT_TRUE(client->Ping().ok());
  EXPECT_EQ(standby.count(), 1u);
}

TEST_F(MasterClientTest, WhenNoMasterGivenAnswersTheCallFailsNamingThemAll) {
  FakeMaster a(context_, AnswerNothing());
  FakeMaster b(context_, AnswerNothing());
  const std::string list = a.endpoint() + "," + b.endpoint();
  auto client = Connect(list, /*timeout=*/50ms, /*leader_wait=*/400ms);
  Status pinged = client->Ping();
  EXPECT_EQ(pinged.code(), StatusCode::kUnavailable) << pinged.ToString();
  EXPECT_TRUE(Contains(pinged.message(), "no master leads among " + list + " after 400 ms"))
      << pinged.ToString();
  EXPECT_TRUE(Contains(pinged.message(), "no reply from")) << pinged.ToString();
  EXPECT_GE(a.count(), 2u);  // round the list more than once
  EXPECT_GE(b.count(), 1u);
}

// ---- ZooKeeper (a directory that never reaches ZooKeeper: none runs at its address) ----

std::shared_ptr<const LeaderDirectory> UnreachableDirectory(zmq::context_t& context) {
  const std::string address = ClosedLoopbackAddress(context);  // tcp://127.0.0.1:PORT
  Result<std::unique_ptr<LeaderDirectory>> directory =
      LeaderDirectory::Start(address.substr(std::string("tcp://").size()), 2000ms);
  EXPECT_TRUE(directory.ok()) << directory.status().ToString();
  if (!directory.ok()) return nullptr;
  return std::shared_ptr<const LeaderDirectory>(std::move(directory).value());
}

TEST_F(MasterClientTest, AZooKeeperAddressThatCouldNotBeUsedFailsEveryCallWithItsError) {
  FakeMaster master(context_);
  auto client = Connect(master.endpoint(), 2000ms, 5s,
                        Result<std::shared_ptr<const LeaderDirectory>>(
                            InvalidArgumentError("malformed ZooKeeper address 'zk:'")));
  Status pinged = client->Ping();
  EXPECT_EQ(pinged.code(), StatusCode::kInvalidArgument) << pinged.ToString();
  EXPECT_TRUE(Contains(pinged.message(), "malformed ZooKeeper address")) << pinged.ToString();
  EXPECT_EQ(master.count(), 0u);
}

TEST_F(MasterClientTest, WithZooKeeperAndNoAddressACallWaitsLeaderWaitForALeaderThenFails) {
  std::shared_ptr<const LeaderDirectory> directory = UnreachableDirectory(context_);
  ASSERT_NE(directory, nullptr);
  auto client = Connect("", 2000ms, /*leader_wait=*/200ms, directory);
  const auto start = std::chrono::steady_clock::now();
  Status pinged = client->Ping();
  EXPECT_GE(Since(start), 200ms);
  EXPECT_EQ(pinged.code(), StatusCode::kUnavailable) << pinged.ToString();
  EXPECT_TRUE(Contains(pinged.message(), "no leader known through ZooKeeper within 200 ms"))
      << pinged.ToString();
}

TEST_F(MasterClientTest, WithZooKeeperEvenTheOneMasterGivenIsRetriedUntilLeaderWait) {
  std::shared_ptr<const LeaderDirectory> directory = UnreachableDirectory(context_);
  ASSERT_NE(directory, nullptr);
  FakeMaster master(context_, AnswerNothing());
  auto client = Connect(master.endpoint(), /*timeout=*/50ms, /*leader_wait=*/400ms, directory);
  Status pinged = client->Ping();
  EXPECT_EQ(pinged.code(), StatusCode::kUnavailable) << pinged.ToString();
  EXPECT_TRUE(Contains(pinged.message(), "no master leads among " + master.endpoint()))
      << pinged.ToString();
  EXPECT_GE(master.count(), 2u);  // without ZooKeeper: exactly 1
}

// ---- masterInfo from every master ----

TEST_F(MasterClientTest, MastersAsksEachAddressAndTheLeaderANamedOneNames) {
  FakeMaster leader(context_, [](proto::Request::Reader, proto::Reply::Builder reply, size_t) {
    proto::MasterInfo::Builder info = reply.initMaster();
    info.setId("m1");
    info.setLeader(true);
    info.setEpoch(5);
    info.setJournalSequence(42);
    return true;
  });
  const std::string leader_address = leader.endpoint();
  FakeMaster standby(context_,
                     [leader_address](proto::Request::Reader, proto::Reply::Builder reply, size_t) {
                       proto::MasterInfo::Builder info = reply.initMaster();
                       info.setId("m2");
                       info.setEpoch(5);
                       info.setLeaderAddress(leader_address);
                       info.setJournalSequence(40);
                       info.setInSync(true);
                       return true;
                     });
  FakeMaster hung(context_, AnswerNothing());
  auto client = Connect(standby.endpoint() + "," + hung.endpoint(), /*timeout=*/250ms);
  std::vector<MasterInfo> masters = client->Masters();
  ASSERT_EQ(masters.size(), 3u);
  EXPECT_EQ(masters[0].address, standby.endpoint());
  EXPECT_EQ(masters[0].id, "m2");
  EXPECT_FALSE(masters[0].leader);
  EXPECT_EQ(masters[0].leader_address, leader.endpoint());
  EXPECT_EQ(masters[0].journal_sequence, 40u);
  EXPECT_TRUE(masters[0].in_sync);
  EXPECT_TRUE(masters[0].error.empty()) << masters[0].error;
  EXPECT_EQ(masters[1].address, hung.endpoint());
  EXPECT_TRUE(Contains(masters[1].error, "no reply from")) << masters[1].error;
  // Not given, but named by the standby: asked too.
  EXPECT_EQ(masters[2].address, leader.endpoint());
  EXPECT_EQ(masters[2].id, "m1");
  EXPECT_TRUE(masters[2].leader);
  EXPECT_EQ(masters[2].epoch, 5u);
  EXPECT_EQ(leader.seen(), std::vector<std::string>{"masterInfo"});
}

TEST_F(MasterClientTest, MastersReportsAnAnswerOfTheWrongKindAsThatMastersError) {
  FakeMaster master(context_);  // answers ok
  auto client = Connect(master.endpoint());
  std::vector<MasterInfo> masters = client->Masters();
  ASSERT_EQ(masters.size(), 1u);
  EXPECT_TRUE(Contains(masters[0].error, "other than 'master'")) << masters[0].error;
}

// ---- Replies decoded ----

// Answers getLocations with one entry per id asked (`drop` fewer), each on worker w1.
Answer AnswerLocations(size_t drop = 0) {
  return [drop](proto::Request::Reader request, proto::Reply::Builder reply, size_t) {
    capnp::List<capnp::Text>::Reader ids = request.getGetLocations().getBlockIds();
    auto list = reply.initLocations(ids.size() - drop);
    for (size_t i = 0; i < list.size(); ++i) {
      list[i].setBlockId(ids[i]);
      list[i].setLevel(proto::StorageLevel::MEMORY_ONLY);
      list[i].setDigest(1000 + i);
      proto::Location::Builder location = list[i].initLocations(1)[0];
      location.setWorkerId("w1");
      location.setAddress("tcp://127.0.0.1:9");
      location.setSize(64);
    }
    return true;
  };
}

TEST_F(MasterClientTest, LocationsAreAskedInBatchesOfTenThousandIdsAndJoinedInOrder) {
  FakeMaster master(context_, AnswerLocations());
  auto client = Connect(master.endpoint());
  std::vector<BlockId> ids;
  for (uint64_t i = 0; i < 10001; ++i) ids.push_back(BlockId::Rdd(1, i));
  Result<std::vector<BlockLocations>> locations = client->Locations(ids);
  ASSERT_TRUE(locations.ok()) << locations.status().ToString();
  EXPECT_EQ(master.seen(), (std::vector<std::string>{"getLocations 10000", "getLocations 1"}));
  ASSERT_EQ(locations->size(), 10001u);
  EXPECT_EQ(locations->back().block, BlockId::Rdd(1, 10000));
  ASSERT_EQ(locations->front().locations.size(), 1u);
  EXPECT_EQ(locations->front().locations[0].worker_id, "w1");
  // Each copy carries the block's digest.
  EXPECT_EQ(locations->front().locations[0].block_digest, 1000u);
}

TEST_F(MasterClientTest, AnAnswerWithFewerLocationsThanIdsAskedIsAnInternalError) {
  FakeMaster master(context_, AnswerLocations(/*drop=*/1));
  auto client = Connect(master.endpoint());
  Result<std::vector<BlockLocations>> locations =
      client->Locations({BlockId::Rdd(1, 0), BlockId::Rdd(1, 1)});
  EXPECT_EQ(locations.status().code(), StatusCode::kInternal) << locations.status().ToString();
  EXPECT_TRUE(Contains(locations.status().message(), "master answered 1 entries for 2 blocks"))
      << locations.status().ToString();
}

TEST_F(MasterClientTest, AnAnswerOfTheWrongKindIsAnInternalErrorNamingTheKindExpected) {
  FakeMaster master(context_);  // answers ok to everything
  auto client = Connect(master.endpoint());
  Result<std::vector<WorkerInfo>> workers = client->Workers();
  EXPECT_EQ(workers.status().code(), StatusCode::kInternal);
  EXPECT_TRUE(Contains(workers.status().message(), "other than 'workers'"))
      << workers.status().ToString();
  Result<uint64_t> removed = client->RemoveRdd(3);
  EXPECT_TRUE(Contains(removed.status().message(), "other than 'removed'"))
      << removed.status().ToString();
}

TEST_F(MasterClientTest, CallsAnsweredWithABareOkFailOnAnyOtherAnswer) {
  FakeMaster master(context_, [](proto::Request::Reader, proto::Reply::Builder reply, size_t) {
    reply.setRemoved(1);
    return true;
  });
  auto client = Connect(master.endpoint());
  Status decommissioned = client->Decommission("w1");
  EXPECT_EQ(decommissioned.code(), StatusCode::kInternal) << decommissioned.ToString();
  EXPECT_TRUE(Contains(decommissioned.message(), "other than 'ok'")) << decommissioned.ToString();
}

// Answers listBlocks pages from rdd_1_0 .. rdd_1_4, `limit` at a time after `after`.
Answer AnswerBlockPages() {
  return [](proto::Request::Reader request, proto::Reply::Builder reply, size_t) {
    std::vector<std::string> all;
    for (int i = 0; i < 5; ++i) all.push_back(BlockId::Rdd(1, i).ToString());
    proto::ListBlocks::Reader list = request.getListBlocks();
    const std::string after = list.getAfter();
    size_t first = 0;
    while (first < all.size() && !after.empty() && all[first] <= after) ++first;
    const size_t n = std::min<size_t>(list.getLimit(), all.size() - first);
    proto::BlockPage::Builder page = reply.initBlockPage();
    auto blocks = page.initBlocks(n);
    for (size_t i = 0; i < n; ++i) blocks[i].setBlockId(all[first + i]);
    page.setMore(first + n < all.size());
    return true;
  };
}

TEST_F(MasterClientTest, BlockPagesAreAskedAfterTheLastBlockSeenUntilNoMoreFollow) {
  FakeMaster master(context_, AnswerBlockPages());
  auto client = Connect(master.endpoint());
  std::vector<size_t> page_sizes;
  Status listed = client->ForEachBlockPage(
      uint64_t{1},
      [&](const std::vector<BlockLocations>& page) {
        page_sizes.push_back(page.size());
        return Status::Ok();
      },
      /*page_size=*/2);
  ASSERT_TRUE(listed.ok()) << listed.ToString();
  EXPECT_EQ(page_sizes, (std::vector<size_t>{2, 2, 1}));
  EXPECT_EQ(master.seen(),
            (std::vector<std::string>{
                "listBlocks rdd=1 after= limit=2",
                "listBlocks rdd=1 after=" + BlockId::Rdd(1, 1).ToString() + " limit=2",
                "listBlocks rdd=1 after=" + BlockId::Rdd(1, 3).ToString() + " limit=2"}));
}

TEST_F(MasterClientTest, AVisitorsErrorStopsTheBlockPagingWithThatError) {
  FakeMaster master(context_, AnswerBlockPages());
  auto client = Connect(master.endpoint());
  Status listed = client->ForEachBlockPage(
      std::nullopt, [](const std::vector<BlockLocations>&) { return AbortedError("enough"); },
      /*page_size=*/0);  // asks for at least one
  EXPECT_EQ(listed.code(), StatusCode::kAborted) << listed.ToString();
  EXPECT_EQ(master.seen(), std::vector<std::string>{"listBlocks after= limit=1"});
}

// Answers listRddPage with the pages `pages` (one per request, in order; RDD ids).
Answer AnswerRddPages(std::vector<std::vector<uint64_t>> pages) {
  return [pages](proto::Request::Reader, proto::Reply::Builder reply, size_t nth) {
    const std::vector<uint64_t>& ids = pages.at(nth);
    proto::RddPage::Builder page = reply.initRddPage();
    auto rdds = page.initRdds(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) rdds[i].setRddId(ids[i]);
    page.setMore(nth + 1 < pages.size());
    return true;
  };
}

TEST_F(MasterClientTest, RddPagesAreAskedFromTheIdAfterTheLastUntilNoMoreFollow) {
  FakeMaster master(context_, AnswerRddPages({{1, 4}, {7}, {}}));
  auto client = Connect(master.endpoint());
  Result<std::vector<RddInfo>> rdds = client->Rdds();
  ASSERT_TRUE(rdds.ok()) << rdds.status().ToString();
  ASSERT_EQ(rdds->size(), 3u);
  EXPECT_EQ((*rdds)[2].rdd_id, 7u);
  EXPECT_EQ(master.seen(),
            (std::vector<std::string>{"listRddPage startAt=0", "listRddPage startAt=5",
                                      "listRddPage startAt=8"}));
}

TEST_F(MasterClientTest, RddPagesThatGoBackwardsAreAnInternalError) {
  FakeMaster master(context_, AnswerRddPages({{5}, {2}, {9}}));
  auto client = Connect(master.endpoint());
  Result<std::vector<RddInfo>> rdds = client->Rdds();
  EXPECT_EQ(rdds.status().code(), StatusCode::kInternal) << rdds.status().ToString();
  EXPECT_TRUE(Contains(rdds.status().message(), "went backwards")) << rdds.status().ToString();
  EXPECT_EQ(master.count(), 2u);
}

}  // namespace
}  // namespace bm
