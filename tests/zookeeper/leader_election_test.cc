#include "master/leader_election.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/zookeeper/leader_directory.h"
#include "common/zookeeper/zookeeper_session.h"
#include "tests/support/files.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/zookeeper/zookeeper_test_fixture.h"

namespace bm::testing {
namespace {

using std::chrono::milliseconds;

// A candidate in this process, counting how often it said its snapshot changed.
struct Candidate {
  std::string id;
  std::atomic<int> changes{0};
  std::unique_ptr<LeaderElection> election;

  ElectionSnapshot Current() const { return election->Current(); }
  ElectionRole role() const { return Current().role; }
};

class LeaderElectionTest : public ZooKeeperTest {
 protected:
  std::unique_ptr<Candidate> StartCandidate(const std::string& id,
                                            milliseconds session_timeout = kSessionTimeout) {
    auto candidate = std::make_unique<Candidate>();
    candidate->id = id;
    Candidate* raw = candidate.get();
    Result<std::unique_ptr<LeaderElection>> election = LeaderElection::Start(
        {connect_, id, AddressOf(id), session_timeout}, [raw] { ++raw->changes; });
    if (!election.ok()) throw std::runtime_error(election.status().ToString());
    candidate->election = std::move(election).value();
    return candidate;
  }

  static std::string AddressOf(const std::string& id) { return "tcp://" + id + ".test:7700"; }

  // Candidate "a", once it leads, and "b", once it stands by.
  std::pair<std::unique_ptr<Candidate>, std::unique_ptr<Candidate>> StartLeaderAndStandby() {
    auto a = StartCandidate("a");
    EXPECT_TRUE(WaitForRole(*a, ElectionRole::kLeader, milliseconds(10000)));
    auto b = StartCandidate("b");
    EXPECT_TRUE(WaitForRole(*b, ElectionRole::kStandby, milliseconds(10000)));
    return {std::move(a), std::move(b)};
  }

  static bool WaitForRole(const Candidate& candidate, ElectionRole role, milliseconds timeout) {
    return WaitFor([&] { return candidate.role() == role; }, timeout);
  }
};

// Waits until exactly one of `candidates` leads in an epoch above `above_epoch` and every other
// one is a standby naming it; returns the leader's index, or -1 at the timeout.
int WaitForSettledLeader(const std::vector<Candidate*>& candidates, uint64_t above_epoch,
                         milliseconds timeout) {
  int leader = -1;
  bool settled = WaitFor(
      [&] {
        std::vector<ElectionSnapshot> now;
        for (const Candidate* c : candidates) now.push_back(c->Current());
        leader = -1;
        for (size_t i = 0; i < now.size(); ++i) {
          if (now[i].role != ElectionRole::kLeader) continue;
          if (leader >= 0 || now[i].epoch <= above_epoch) return false;
          leader = static_cast<int>(i);
        }
        if (leader < 0) return false;
        for (size_t i = 0; i < now.size(); ++i) {
          if (static_cast<int>(i) == leader) continue;
          if (now[i].role != ElectionRole::kStandby || now[i].epoch != now[leader].epoch ||
              now[i].leader_id != candidates[leader]->id) {
            return false;
          }
        }
        return true;
      },
      timeout);
  return settled ? leader : -1;
}

TEST_F(LeaderElectionTest, FirstCandidateLeadsWithEpochOne) {
  auto a = StartCandidate("a");
  ASSERT_TRUE(WaitForRole(*a, ElectionRole::kLeader, milliseconds(10000)));
  ElectionSnapshot snapshot = a->Current();
  EXPECT_EQ(snapshot.epoch, 1u);
  EXPECT_EQ(snapshot.leader_id, "a");
  EXPECT_EQ(snapshot.leader_address, AddressOf("a"));
  EXPECT_EQ(snapshot.elections_won, 1u);
  EXPECT_GT(a->changes.load(), 0);

  // What the leader znode says, as a tool reads it.
  Result<LeaderRecord> record = LeaderDirectory::ReadOnce(connect_, milliseconds(5000));
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(*record, (LeaderRecord{"a", AddressOf("a"), 1}));
}

// A session of 1.5 s gives a lease of 1 s: the first renewal must come before the election's
// thread sleeps its full second. bm-master once slept through it and dropped the lead every
// second (FailoverTest caught it every time; here it depends on which events wake the thread).
TEST_F(LeaderElectionTest, ALeaderWithAShortSessionKeepsLeading) {
  auto a = StartCandidate("a", milliseconds(1500));
  ASSERT_TRUE(WaitForRole(*a, ElectionRole::kLeader, milliseconds(10000)));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_EQ(a->role(), ElectionRole::kLeader);
    std::this_thread::sleep_for(milliseconds(20));  // sampling the role over three seconds
  }
  EXPECT_EQ(a->Current().epoch, 1u);
}

TEST_F(LeaderElectionTest, SecondCandidateIsStandbyAndSeesTheLeader) {
  auto [a, b] = StartLeaderAndStandby();
  ASSERT_FALSE(HasFailure());
  ElectionSnapshot snapshot = b->Current();
  EXPECT_EQ(snapshot.epoch, 1u);
  EXPECT_EQ(snapshot.leader_id, "a");
  EXPECT_EQ(snapshot.leader_address, AddressOf("a"));
  EXPECT_EQ(snapshot.elections_won, 0u);
  EXPECT_EQ(a->role(), ElectionRole::kLeader);
}

TEST_F(LeaderElectionTest, StandbyLeadsAtOnceWhenTheLeaderResigns) {
  auto [a, b] = StartLeaderAndStandby();
  ASSERT_FALSE(HasFailure());

  auto start = std::chrono::steady_clock::now();
  a->election->Resign();
  EXPECT_NE(a->role(), ElectionRole::kLeader);
  ASSERT_TRUE(WaitForRole(*b, ElectionRole::kLeader, kSessionTimeout));
  long long took = MillisSince(start);
  std::printf("failover after the leader resigned: %lld ms\n", took);
  EXPECT_EQ(b->Current().epoch, 2u);
  // Resigning closes the session at once: no wait for it to expire.
  EXPECT_LT(took, kSessionTimeout.count() / 2);
}

// kill -9 of the leader's process: ZooKeeper expires its session after the session timeout,
// and the standby leads at once after that.
TEST_F(LeaderElectionTest, FailoverAfterTheLeaderIsKilled) {
  TempDir dir;
  Process a = Process::Start(BinaryPath("bm-election-probe"),
                             {"--zookeeper", connect_, "--id", "a", "--address", AddressOf("a"),
                              "--session-ms", std::to_string(kSessionTimeout.count())},
                             dir.Sub("a.log"));
  ASSERT_TRUE(WaitFor(
      [&] {
        Result<LeaderRecord> leader = LeaderDirectory::ReadOnce(connect_, milliseconds(1000));
        return leader.ok() && leader->id == "a";
      },
      milliseconds(10000)));
  auto b = StartCandidate("b");
  ASSERT_TRUE(WaitForRole(*b, ElectionRole::kStandby, milliseconds(10000)));

  auto start = std::chrono::steady_clock::now();
  a.Kill();
  ASSERT_TRUE(WaitForRole(*b, ElectionRole::kLeader, kSessionTimeout + milliseconds(3000)));
  long long took = MillisSince(start);
  std::printf("failover after kill -9 of the leader (session timeout %lld ms): %lld ms\n",
              static_cast<long long>(kSessionTimeout.count()), took);
  EXPECT_EQ(b->Current().epoch, 2u);
  // The session timeout, rounded up to the server's tick (250 ms), plus a claim.
  EXPECT_LT(took, kSessionTimeout.count() + 1000);
}

// The paused leader of the issue: SIGSTOP past its session, the standby takes over, SIGCONT.
// The old leader must not say it leads for even a moment after it runs again, and rejoins as
// a standby.
TEST_F(LeaderElectionTest, PausedLeaderNeverLeadsAgainInItsOldEpochAndRejoinsAsStandby) {
  TempDir dir;
  const std::string log = dir.Sub("a.log");
  Process a = Process::Start(BinaryPath("bm-election-probe"),
                             {"--zookeeper", connect_, "--id", "a", "--address", AddressOf("a"),
                              "--session-ms", std::to_string(kSessionTimeout.count())},
                             log);
  ASSERT_TRUE(WaitFor([&] { return ReadFile(log).find("leader 1 a\n") != std::string::npos; },
                      milliseconds(10000)));
  auto b = StartCandidate("b");
  ASSERT_TRUE(WaitForRole(*b, ElectionRole::kStandby, milliseconds(10000)));

  a.Signal(SIGSTOP);
  ASSERT_TRUE(WaitForRole(*b, ElectionRole::kLeader, kSessionTimeout + milliseconds(3000)));
  const size_t printed_while_leading = ReadFile(log).size();
  a.Signal(SIGCONT);
  ASSERT_TRUE(WaitFor(
      [&] {
        return ReadFile(log).find("standby 2 b\n", printed_while_leading) != std::string::npos;
      },
      milliseconds(10000)))
      << ReadFile(log);
  // The probe's lines are "<role> <epoch> <leader>" (its log lines start with a timestamp);
  // the first after SIGCONT is "resumed ...", printed at its first look, which races the C
  // client's thread noticing the silence: the leader lease alone decides that look.
  std::string after = "\n" + ReadFile(log).substr(printed_while_leading);
  EXPECT_NE(after.find("\nresumed "), std::string::npos) << after;
  EXPECT_EQ(after.find("\nresumed leader "), std::string::npos) << after;
  EXPECT_EQ(after.find("\nleader "), std::string::npos) << after;
  EXPECT_EQ(b->role(), ElectionRole::kLeader);
}

// The epoch only grows: a candidate that cannot read it never guesses one (a guess could reuse
// an epoch and let a fenced leader's commands through again).
TEST_F(LeaderElectionTest, AMalformedEpochKeepsEveryoneFromLeadingUntilItIsRepaired) {
  auto address = ParseZooKeeperAddress(connect_);
  ASSERT_TRUE(address.ok());
  auto session = ZooKeeperSession::Open(*address, kSessionTimeout, nullptr);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->WaitConnected(std::chrono::steady_clock::now() + milliseconds(5000)));
  ASSERT_TRUE((*session)->EnsurePath("").ok());
  ASSERT_TRUE((*session)->Create("/epoch", "seven", false, false).ok());

  auto a = StartCandidate("a");
  // Nothing to await but time: it must not lead while the epoch is unreadable.
  EXPECT_FALSE(WaitForRole(*a, ElectionRole::kLeader, milliseconds(1500)));

  ASSERT_TRUE((*session)->Multi({{ZooKeeperOp::Kind::kSetData, "/epoch", "7"}}).ok());
  ASSERT_TRUE(WaitForRole(*a, ElectionRole::kLeader, milliseconds(5000)));
  EXPECT_EQ(a->Current().epoch, 8u);
}

// The session ids watching each znode, from the server's "wchp" (a path line, then one
// "\t0x<session>" line per watcher).
std::map<std::string, std::vector<int64_t>> WatchersByPath(const std::string& wchp) {
  std::map<std::string, std::vector<int64_t>> watchers;
  std::istringstream lines(wchp);
  std::string line, path;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    if (line[0] == '/') {
      path = line;
      watchers[path];
    } else if (!path.empty()) {
      watchers[path].push_back(static_cast<int64_t>(std::stoull(line, nullptr, 16)));
    }
  }
  return watchers;
}

// "c_<session hex>_<sequence>" names the session that created it.
int64_t SessionOfCandidate(const std::string& name) {
  return static_cast<int64_t>(std::stoull(name.substr(2, name.rfind('_') - 2), nullptr, 16));
}

TEST_F(LeaderElectionTest, EachStandbyWatchesOnlyItsPredecessor) {
  auto [a, b] = StartLeaderAndStandby();
  ASSERT_FALSE(HasFailure());
  auto c = StartCandidate("c");
  ASSERT_TRUE(WaitForRole(*c, ElectionRole::kStandby, milliseconds(10000)));

  auto address = ParseZooKeeperAddress(connect_);
  ASSERT_TRUE(address.ok());
  auto session = ZooKeeperSession::Open(*address, kSessionTimeout, nullptr);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->WaitConnected(std::chrono::steady_clock::now() + milliseconds(5000)));
  auto children = (*session)->Children("/candidates");
  ASSERT_TRUE(children.ok());
  ASSERT_EQ(children->size(), 3u);
  std::sort(children->begin(), children->end(), [](const std::string& x, const std::string& y) {
    return x.substr(x.size() - 10) < y.substr(y.size() - 10);
  });
  const std::string root = address->chroot + "/candidates/";
  const std::string node_a = root + (*children)[0], node_b = root + (*children)[1],
                    node_c = root + (*children)[2];
  const int64_t session_b = SessionOfCandidate((*children)[1]);
  const int64_t session_c = SessionOfCandidate((*children)[2]);

  auto watchers = WatchersByPath(zookeeper_->Command("wchp"));
  EXPECT_EQ(watchers[node_a], std::vector<int64_t>{session_b});
  EXPECT_EQ(watchers[node_b], std::vector<int64_t>{session_c});
  EXPECT_TRUE(watchers[node_c].empty());
  // Nobody watches the list itself: a change to it wakes no one.
  EXPECT_TRUE(watchers[address->chroot + "/candidates"].empty());

  // The last candidate leaves: its predecessor's watch goes with it, and nobody else is woken.
  const int b_changes = b->changes.load(), a_changes = a->changes.load();
  c->election->Resign();
  ASSERT_TRUE(WaitFor([&] { return WatchersByPath(zookeeper_->Command("wchp"))[node_b].empty(); },
                      milliseconds(5000)));
  watchers = WatchersByPath(zookeeper_->Command("wchp"));
  EXPECT_EQ(watchers[node_a], std::vector<int64_t>{session_b});
  EXPECT_EQ(b->changes.load(), b_changes);
  EXPECT_EQ(a->changes.load(), a_changes);
  EXPECT_EQ(b->role(), ElectionRole::kStandby);
  EXPECT_EQ(a->role(), ElectionRole::kLeader);
}

TEST_F(LeaderElectionTest, LeaderDemotesItselfWhenZooKeeperStopsAndLeadsAgainWhenItReturns) {
  auto [a, b] = StartLeaderAndStandby();
  ASSERT_FALSE(HasFailure());

  auto start = std::chrono::steady_clock::now();
  zookeeper_->Kill();
  ASSERT_TRUE(WaitFor([&] { return a->role() != ElectionRole::kLeader; }, kSessionTimeout));
  long long demoted = MillisSince(start);
  std::printf("leader demoted %lld ms after ZooKeeper was killed\n", demoted);
  // The connection closed with the process: seen at once, long before the lease would lapse.
  EXPECT_LT(demoted, kSessionTimeout.count() / 4);
  EXPECT_EQ(a->role(), ElectionRole::kNoQuorum);
  ASSERT_TRUE(WaitForRole(*b, ElectionRole::kNoQuorum, kSessionTimeout));

  // ZooKeeper stays away for longer than a session (nothing to await: time has to pass).
  std::this_thread::sleep_for(kSessionTimeout + milliseconds(500));
  EXPECT_EQ(a->role(), ElectionRole::kNoQuorum);
  EXPECT_EQ(b->role(), ElectionRole::kNoQuorum);
  start = std::chrono::steady_clock::now();
  ASSERT_TRUE(zookeeper_->Restart().ok());
  int leader = WaitForSettledLeader({a.get(), b.get()}, 1, milliseconds(15000));
  ASSERT_GE(leader, 0);
  std::printf("a leader again %lld ms after ZooKeeper was restarted: %s, epoch %llu\n",
              MillisSince(start), leader == 0 ? "a" : "b",
              static_cast<unsigned long long>(a->Current().epoch));
}

// A hung ZooKeeper server: connections stay open, nothing answers. The leader must stop leading
// before the server could expire its session.
TEST_F(LeaderElectionTest, LeaderDemotesItselfWhenZooKeeperFallsSilent) {
  auto [a, b] = StartLeaderAndStandby();
  ASSERT_FALSE(HasFailure());

  auto start = std::chrono::steady_clock::now();
  zookeeper_->Pause();
  ASSERT_TRUE(WaitFor([&] { return a->role() != ElectionRole::kLeader; }, kSessionTimeout));
  long long demoted = MillisSince(start);
  std::printf("leader demoted %lld ms after ZooKeeper fell silent (session timeout %lld ms)\n",
              demoted, static_cast<long long>(kSessionTimeout.count()));
  EXPECT_NE(b->role(), ElectionRole::kLeader);

  // Silent for longer than a session, then back: the sessions may have expired or not; either
  // way one master leads, in a new epoch.
  std::this_thread::sleep_for(kSessionTimeout);
  start = std::chrono::steady_clock::now();
  zookeeper_->Resume();
  int leader = WaitForSettledLeader({a.get(), b.get()}, 1, milliseconds(15000));
  ASSERT_GE(leader, 0);
  std::printf("a leader again %lld ms after ZooKeeper resumed: %s\n", MillisSince(start),
              leader == 0 ? "a" : "b");
}

// Watches every pair of candidates while leaders come and go. x, then y, then x again: if x
// says it leads in the same epoch both times, it led throughout (a new term always has a new
// epoch), so y must not have said it leads in between. Also: one epoch, one leader.
class DoubleLeaderDetector {
 public:
  explicit DoubleLeaderDetector(std::vector<Candidate*> candidates)
      : candidates_(std::move(candidates)), thread_([this] { Run(); }) {}
  ~DoubleLeaderDetector() { Stop(); }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int overlaps() const { return overlaps_; }
  int samples() const { return samples_; }
  // Every epoch seen led, and by whom ("a,b" if by two).
  std::map<uint64_t, std::string> leaders_by_epoch() const {
    std::lock_guard lock(mutex_);
    return leaders_by_epoch_;
  }

 private:
  void Run() {
    while (!stop_) {
      for (Candidate* x : candidates_) {
        for (Candidate* y : candidates_) {
          if (x == y) continue;
          ElectionSnapshot x1 = x->Current();
          ElectionSnapshot y1 = y->Current();
          ElectionSnapshot x2 = x->Current();
          ++samples_;
          if (x1.role == ElectionRole::kLeader && x2.role == ElectionRole::kLeader &&
              x1.epoch == x2.epoch && y1.role == ElectionRole::kLeader) {
            ++overlaps_;
          }
          Record(x1, x->id);
          Record(y1, y->id);
        }
      }
      // Leave the two cores to ZooKeeper and the candidates between rounds.
      std::this_thread::yield();
    }
  }

  void Record(const ElectionSnapshot& snapshot, const std::string& id) {
    if (snapshot.role != ElectionRole::kLeader) return;
    std::lock_guard lock(mutex_);
    std::string& ids = leaders_by_epoch_[snapshot.epoch];
    if (ids.empty()) {
      ids = id;
    } else if (ids != id && ids.find("," + id) == std::string::npos) {
      ids += "," + id;
    }
  }

  const std::vector<Candidate*> candidates_;
  std::atomic<bool> stop_{false};
  std::atomic<int> overlaps_{0};
  std::atomic<int> samples_{0};
  mutable std::mutex mutex_;
  std::map<uint64_t, std::string> leaders_by_epoch_;
  std::thread thread_;
};

TEST_F(LeaderElectionTest, NeverTwoLeadersAtOnceOverASequenceOfFailovers) {
  std::vector<std::unique_ptr<Candidate>> owned;
  std::vector<Candidate*> candidates;
  for (const char* id : {"a", "b", "c", "d", "e"}) {
    owned.push_back(StartCandidate(id));
    candidates.push_back(owned.back().get());
  }
  DoubleLeaderDetector detector(candidates);
  int leader = WaitForSettledLeader(candidates, 0, milliseconds(10000));
  ASSERT_GE(leader, 0);
  uint64_t epoch = candidates[leader]->Current().epoch;

  // A silent ZooKeeper, past the session: everyone drops out, then one leads again.
  zookeeper_->Pause();
  ASSERT_TRUE(WaitFor([&] { return candidates[leader]->role() != ElectionRole::kLeader; },
                      kSessionTimeout));
  std::this_thread::sleep_for(kSessionTimeout);
  zookeeper_->Resume();
  leader = WaitForSettledLeader(candidates, epoch, milliseconds(15000));
  ASSERT_GE(leader, 0);
  epoch = candidates[leader]->Current().epoch;

  // Leaders resign one after the other; each successor has a larger epoch.
  for (int round = 0; round < 3; ++round) {
    candidates[leader]->election->Resign();
    std::vector<Candidate*> remaining;
    for (Candidate* c : candidates) {
      if (c != candidates[leader]) remaining.push_back(c);
    }
    candidates = remaining;
    leader = WaitForSettledLeader(candidates, epoch, milliseconds(10000));
    ASSERT_GE(leader, 0) << "round " << round;
    epoch = candidates[leader]->Current().epoch;
  }
  detector.Stop();
  std::printf("%d samples of pairs of candidates, epochs led: ", detector.samples());
  for (const auto& [e, ids] : detector.leaders_by_epoch())
    std::printf("%llu:%s ", (unsigned long long)e, ids.c_str());
  std::printf("\n");
  EXPECT_EQ(detector.overlaps(), 0);
  for (const auto& [e, ids] : detector.leaders_by_epoch()) {
    EXPECT_EQ(ids.find(','), std::string::npos) << "epoch " << e << " led by " << ids;
  }
  EXPECT_GT(detector.samples(), 100);
}

}  // namespace
}  // namespace bm::testing
