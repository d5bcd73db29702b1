// Reads and puts aimed at a worker that is dead or stopped, but still listed by the master
// (its heartbeat timeout has not passed), fail over to another worker within about half a
// second instead of the 5 s request timeout (RpcChannel: ZMQ_IMMEDIATE, ZMTP heartbeats), and
// a worker that is only slow to reach is not taken for a stopped one.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>

#include "blockmgr/client.h"
#include "tests/support/files.h"
#include "tests/support/local_cluster.h"
#include "tests/support/process.h"
#include "tests/support/tcp_proxy.h"

namespace bm::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Well under the 5 s request timeout, with room for a loaded test machine.
constexpr milliseconds kFailoverBound{1500};

class FastFailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(cluster_.StartMaster());
    // w1 has the most free memory, so placement tries it first.
    ASSERT_NO_FATAL_FAILURE(
        cluster_.StartWorker(WorkerSpec{.id = "w1", .memory = "256MiB", .disk_limit = ""}));
    ASSERT_NO_FATAL_FAILURE(
        cluster_.StartWorker(WorkerSpec{.id = "w2", .memory = "64MiB", .disk_limit = ""}));
  }
  void TearDown() override {
    if (cluster_.ListedWorkers().size() < 2) return;
    cluster_.SignalWorker("w1", SIGCONT);  // so it can be killed cleanly
  }

  // The master's heartbeat timeout (60 s) keeps a dead or stopped worker listed throughout.
  LocalCluster cluster_{60};
};

TEST_F(FastFailoverTest, ReadFromAStoppedWorkerFailsOverToTheOtherCopy) {
  Client client(cluster_.ClientOptionsFor());
  const std::vector<std::byte> data = RandomByteVector(256 * 1024, 3);
  Result<PutResult> put = client.Put(BlockId::Rdd(1, 0), data, StorageLevel::kMemoryOnly2);
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  ASSERT_EQ(put->replicas.size(), 2u);
  // Connected to both already: the read goes over an established connection to w1.
  ASSERT_TRUE(client.Get(BlockId::Rdd(1, 0)).ok());

  cluster_.SignalWorker("w1", SIGSTOP);
  const auto started = Clock::now();
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(1, 0));
  const auto took = Clock::now() - started;
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
  EXPECT_LT(took, kFailoverBound);
}

TEST_F(FastFailoverTest, PutPlacedOnAStoppedWorkerFailsOverToAnother) {
  cluster_.SignalWorker("w1", SIGSTOP);
  Client client(cluster_.ClientOptionsFor());  // a new client: its connection to w1 never completes
  const auto started = Clock::now();
  Result<PutResult> put =
      client.Put(BlockId::Rdd(2, 0), RandomByteVector(1024, 4), StorageLevel::kMemoryOnly);
  const auto took = Clock::now() - started;
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->worker_id, "w2");
  EXPECT_LT(took, kFailoverBound);
}

TEST_F(FastFailoverTest, PutPlacedOnAKilledWorkerFailsOverToAnother) {
  Client client(cluster_.ClientOptionsFor());
  // Connected to w1 before it dies.
  Result<PutResult> first =
      client.Put(BlockId::Rdd(3, 0), RandomByteVector(1024, 5), StorageLevel::kMemoryOnly);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->worker_id, "w1");
  cluster_.KillWorker("w1");
  const auto started = Clock::now();
  Result<PutResult> put =
      client.Put(BlockId::Rdd(3, 1), RandomByteVector(1024, 6), StorageLevel::kMemoryOnly);
  const auto took = Clock::now() - started;
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->worker_id, "w2");
  EXPECT_LT(took, kFailoverBound);
}

// Put sends the caller's bytes without copying them and must not return while a frame still
// points into them. With w1 stopped mid-transfer, frames queued for it are never taken: they
// go with w1's connection (lost to the heartbeat, or reset when the put gives up on w1), and
// the put fails over to w2 and returns.
TEST_F(FastFailoverTest, BigPutToAWorkerStoppedMidTransferReturnsHavingStoredItElsewhere) {
  Client client(cluster_.ClientOptionsFor());
  Result<PutResult> first =
      client.Put(BlockId::Rdd(4, 0), RandomByteVector(1024, 7), StorageLevel::kMemoryOnly);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(first->worker_id, "w1");  // connected: the pieces go out over an open connection

  cluster_.SignalWorker("w1", SIGSTOP);
  std::vector<std::byte> data = RandomByteVector(32 << 20, 8);
  const std::vector<std::byte> expected = data;
  const auto started = Clock::now();
  Result<PutResult> put = client.Put(BlockId::Rdd(4, 1), data, StorageLevel::kMemoryOnly);
  const auto took = Clock::now() - started;
  ASSERT_TRUE(put.ok()) << put.status().ToString();
  EXPECT_EQ(put->worker_id, "w2");
  EXPECT_LT(took, 4 * kFailoverBound);

  // Returned: nothing refers to `data` any more, so overwriting it changes nothing stored.
  std::fill(data.begin(), data.end(), std::byte{0});
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(4, 1));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == expected);
}

// The other side of the heartbeats: a put on a link slower than a piece per heartbeat timeout
// is not taken for a stopped worker. The client's ping waits behind the megabytes it has
// queued on the link, and the worker answers a piece only once all of it arrived (over a second
// here); the worker's own pings, on the quiet direction, show it alive meanwhile.
TEST(SlowLinkTest, APutOverALinkSlowerThanAPiecePerHeartbeatTimeoutCompletes) {
  LocalCluster cluster;
  ASSERT_NO_FATAL_FAILURE(cluster.StartMaster());
  TcpProxy link(FreeLoopbackPort());
  ASSERT_NO_FATAL_FAILURE(cluster.StartWorkerBehind(link, {"w1", "64MiB", ""}));
  // 3 MB/s: a 4 MiB piece takes 1.4 s, several times RpcChannel::kHeartbeatTimeout (400 ms).
  link.LimitRate(3'000'000);

  Client client(cluster.ClientOptionsFor());
  const std::vector<std::byte> data = RandomByteVector(12 << 20, 11);
  Result<PutResult> put = client.Put(BlockId::Rdd(5, 0), data, StorageLevel::kMemoryOnly);
  ASSERT_TRUE(put.ok()) << put.status().ToString() << cluster.LogTail("w1");
  EXPECT_GT(link.Captured().size(), data.size()) << "the put should have gone through the link";
  Result<std::vector<std::byte>> got = client.Get(BlockId::Rdd(5, 0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);
}

}  // namespace
}  // namespace bm::testing
