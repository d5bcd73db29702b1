#include "common/zookeeper/leader_directory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>

#include "master/leader_election.h"
#include "tests/support/process.h"
#include "tests/zookeeper/zookeeper_test_fixture.h"

namespace bm::testing {
namespace {

using std::chrono::milliseconds;

class LeaderDirectoryTest : public ZooKeeperTest {
 protected:
  std::unique_ptr<LeaderElection> StartCandidate(const std::string& id) {
    Result<std::unique_ptr<LeaderElection>> election =
        LeaderElection::Start({connect_, id, "tcp://" + id + ".test:7700", kSessionTimeout}, {});
    if (!election.ok()) throw std::runtime_error(election.status().ToString());
    return std::move(election).value();
  }
};

TEST_F(LeaderDirectoryTest, FollowsTheLeaderAsItChanges) {
  std::atomic<int> changes{0};
  auto directory = LeaderDirectory::Start(connect_, kSessionTimeout, [&] { ++changes; });
  ASSERT_TRUE(directory.ok()) << directory.status().ToString();
  EXPECT_FALSE((*directory)->Current().has_value());
  EXPECT_FALSE((*directory)->WaitForLeader(0, milliseconds(300)).has_value());

  auto a = StartCandidate("a");
  std::optional<LeaderRecord> leader = (*directory)->WaitForLeader(0, milliseconds(10000));
  ASSERT_TRUE(leader.has_value());
  EXPECT_EQ(*leader, (LeaderRecord{"a", "tcp://a.test:7700", 1}));
  // The callback runs on the directory's thread just after waiters are woken.
  EXPECT_TRUE(WaitFor([&] { return changes.load() >= 1; }, milliseconds(5000)));

  auto b = StartCandidate("b");
  ASSERT_TRUE(
      WaitFor([&] { return b->Current().role == ElectionRole::kStandby; }, milliseconds(10000)));
  auto start = std::chrono::steady_clock::now();
  a->Resign();
  leader = (*directory)->WaitForLeader(1, milliseconds(10000));
  ASSERT_TRUE(leader.has_value());
  std::printf("the directory saw the new leader %lld ms after the old one resigned\n",
              MillisSince(start));
  EXPECT_EQ(*leader, (LeaderRecord{"b", "tcp://b.test:7700", 2}));
  EXPECT_EQ((*directory)->Current(), leader);

  // The last leader goes and nobody follows: no leader is known.
  b->Resign();
  ASSERT_TRUE(WaitFor([&] { return !(*directory)->Current().has_value(); }, milliseconds(10000)));
}

TEST_F(LeaderDirectoryTest, KeepsFollowingAfterZooKeeperWasAwayForLongerThanASession) {
  auto directory = LeaderDirectory::Start(connect_, kSessionTimeout);
  ASSERT_TRUE(directory.ok());
  auto a = StartCandidate("a");
  ASSERT_TRUE((*directory)->WaitForLeader(0, milliseconds(10000)).has_value());

  zookeeper_->Pause();
  // Time has to pass, past the directory's session: nothing to await.
  std::this_thread::sleep_for(kSessionTimeout + milliseconds(500));
  // Meanwhile the last leader read is still the best guess.
  ASSERT_TRUE((*directory)->Current().has_value());
  zookeeper_->Resume();

  // Whatever happened to the sessions, the directory ends up naming the leader of the latest
  // epoch, and follows the next change.
  ASSERT_TRUE(WaitFor(
      [&] {
        std::optional<LeaderRecord> now = (*directory)->Current();
        ElectionSnapshot a_now = a->Current();
        return now && a_now.role == ElectionRole::kLeader && now->epoch == a_now.epoch;
      },
      milliseconds(15000)));
  uint64_t epoch = a->Current().epoch;
  auto b = StartCandidate("b");
  ASSERT_TRUE(
      WaitFor([&] { return b->Current().role == ElectionRole::kStandby; }, milliseconds(10000)));
  a->Resign();
  std::optional<LeaderRecord> leader = (*directory)->WaitForLeader(epoch, milliseconds(10000));
  ASSERT_TRUE(leader.has_value());
  EXPECT_EQ(leader->id, "b");
}

TEST_F(LeaderDirectoryTest, ReadOnceSaysWhenNoLeaderIsElected) {
  Result<LeaderRecord> leader = LeaderDirectory::ReadOnce(connect_, milliseconds(5000));
  ASSERT_FALSE(leader.ok());
  EXPECT_EQ(leader.status().code(), StatusCode::kNotFound) << leader.status().ToString();
}

TEST_F(LeaderDirectoryTest, ReadOnceSaysWhenZooKeeperIsUnreachable) {
  zookeeper_->Kill();
  auto start = std::chrono::steady_clock::now();
  Result<LeaderRecord> leader = LeaderDirectory::ReadOnce(connect_, milliseconds(1000));
  ASSERT_FALSE(leader.ok());
  EXPECT_EQ(leader.status().code(), StatusCode::kUnavailable) << leader.status().ToString();
  EXPECT_LT(MillisSince(start), 3000);
}

TEST(LeaderDirectoryAddressTest, RejectsMalformedAddresses) {
  for (const char* bad :
       {"", "/chroot", "host", "host:", ":2181", "host:21x1", "a:1,b", "a:1/chroot/", "a:1//x"}) {
    EXPECT_FALSE(LeaderDirectory::Start(bad, milliseconds(1000)).ok()) << bad;
  }
}

}  // namespace
}  // namespace bm::testing
